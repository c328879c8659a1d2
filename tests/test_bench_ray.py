"""The optional Ray backend: workers as Ray actors on a local Ray instance that this test starts
(``ray start --head --block`` in its own process group) and stops by that process group, against
the FAKE server on 127.0.0.1. Skipped when Ray (extra ``kvplan[ray]``) is not installed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_bench_support import bench, fake_server

ray = pytest.importorskip("ray")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    port = _free_port()
    tmp = tmp_path_factory.mktemp("ray")
    ray_bin = Path(sys.executable).with_name("ray")
    proc = subprocess.Popen([str(ray_bin), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             "--include-dashboard=false", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
                             f"--temp-dir={tmp}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            ok = subprocess.run([str(ray_bin), "status", f"--address=127.0.0.1:{port}"], capture_output=True,
                                timeout=60).returncode == 0
            if ok:
                break
            if proc.poll() is not None:
                pytest.fail("ray start exited")
            time.sleep(1)
        else:
            pytest.fail("the local Ray head did not come up in 90 s")
        yield f"127.0.0.1:{port}"
    finally:
        # Our own Ray head: its whole process group (raylet, GCS, workers), by PGID.
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_ray_workers_give_one_merged_result(tmp_path, ray_head):
    with fake_server() as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--ray-address", ray_head, "--workers", "2",
                     "--rate", "40", "--arrival", "constant", "--max-requests", "40", "--output-len", "4",
                     timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    assert d["requests"]["total"] == 40 and d["requests"]["ok"] == 40
    recs = [json.loads(x) for x in (tmp_path / "r.records.jsonl").read_text().splitlines()]
    assert {r["worker"] for r in recs} == {0, 1} and sorted(r["i"] for r in recs) == list(range(40))
    assert d["server"]["deltas"]["vllm:generation_tokens_total"] == 160.0
    assert not d["client_bound"], d["client_bound_reasons"]


def test_ray_address_unreachable_is_a_usage_error(tmp_path):
    p, d = bench("http://127.0.0.1:1", tmp_path / "r.json", "--model", "m", "--ray-address",
                 f"127.0.0.1:{_free_port()}", "--rate", "1", "--max-requests", "1", timeout=60)
    assert p.returncode == 2 and "no Ray head answers" in p.stderr and d is None
