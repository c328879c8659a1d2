"""kvplan tune on Ray: a local Ray head that this test starts (``ray start --head --block`` in its own
process group, stopped by that group, as tests/test_bench_ray.py does) runs the simulations; the
ranking equals the serial one. Skipped when Ray (extra ``kvplan[ray]``) is not installed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from test_tune import BASE, BURST, STEP, TINY  # noqa: E402

from kvplan.errors import UsageError  # noqa: E402
from kvplan.sim.tune import tune  # noqa: E402
from kvplan.slo import parse_slo  # noqa: E402


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
            if subprocess.run([str(ray_bin), "status", f"--address=127.0.0.1:{port}"], capture_output=True,
                              timeout=60).returncode == 0:
                break
            if proc.poll() is not None:
                pytest.fail("ray start exited")
            time.sleep(1)
        else:
            pytest.fail("the local Ray head did not come up in 90 s")
        yield f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_ray_backend_ranks_like_serial(ray_head):
    space = replace(TINY, max_num_seqs=(4, 64), gpus=(1, 2))
    slo = parse_slo("ttft_p99=200ms")
    serial = tune(BASE, BURST, slo, space=space, profile=STEP, processes=1, exhaustive=True)
    on_ray = tune(BASE, BURST, slo, space=space, profile=STEP, ray_address=ray_head, exhaustive=True)
    assert on_ray.backend["kind"] == "ray" and on_ray.backend["address"] == ray_head
    assert [r.to_dict() for r in on_ray.rows] == [r.to_dict() for r in serial.rows]
    assert on_ray.pruned == serial.pruned and on_ray.pareto == serial.pareto and len(on_ray.rows) == 12


def test_unreachable_ray_address_is_a_usage_error():
    with pytest.raises(UsageError, match="no Ray head answers"):
        tune(BASE, BURST, (), space=TINY, profile=STEP, ray_address=f"127.0.0.1:{_free_port()}")
