"""The test servers' port helper (tests/vllm_server/server.py): servers the pool starts side by side
must never share a port (one CI run got two on 47437, and the tests read one server's log as the other's)."""
from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

from tests.vllm_server.server import free_port


def test_ports_handed_out_are_distinct_even_from_concurrent_callers():
    with ThreadPoolExecutor(max_workers=8) as pool:
        ports = list(pool.map(lambda _: free_port(), range(200)))
    assert len(set(ports)) == len(ports)


def test_a_port_handed_out_can_be_bound_on_loopback():
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))
