"""A private local Ray head for the Ray tests (tests/test_bench_ray.py, tests/test_tune_ray.py):
``ray start --head --block`` in its own process group on 127.0.0.1, stopped by that process group
(raylet, GCS and workers: only what the test started). Used through the ``ray_head`` fixture of
tests/conftest.py."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_ray_head(temp_dir: Path, startup_timeout_s: float = 90.0) -> Iterator[str]:
    """Start the head, yield its address (``127.0.0.1:PORT``) once ``ray status`` answers."""
    import ray

    port = free_port()
    ray_bin = Path(sys.executable).with_name("ray")
    proc = subprocess.Popen([str(ray_bin), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             "--include-dashboard=false", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
                             f"--temp-dir={temp_dir}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + startup_timeout_s
        while time.monotonic() < deadline:
            if subprocess.run([str(ray_bin), "status", f"--address=127.0.0.1:{port}"], capture_output=True,
                              timeout=60).returncode == 0:
                break
            if proc.poll() is not None:
                pytest.fail("ray start exited")
            time.sleep(1)
        else:
            pytest.fail(f"the local Ray head did not come up in {startup_timeout_s:.0f} s")
        yield f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():  # this process joined the head (kvplan tune in-process)
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
