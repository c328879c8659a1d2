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


#: How often the head is started again when ``ray start`` exits before it answers: it takes free
#: ports it picked itself (GCS, raylet, object manager) and a port another process took between
#: the pick and the bind ends it at once.
START_ATTEMPTS = 3


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


def _start_head(ray_bin: Path, temp_dir: Path, attempt: int) -> tuple[subprocess.Popen, int, Path]:
    port = free_port()
    log = temp_dir / f"ray-start-{attempt}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(ray_bin), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                                 "--include-dashboard=false", "--disable-usage-stats",
                                 "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, port, log


def _stop_head(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextlib.contextmanager
def local_ray_head(temp_dir: Path, startup_timeout_s: float = 90.0) -> Iterator[str]:
    """Start the head, yield its address (``127.0.0.1:PORT``) once ``ray status`` answers."""
    import ray

    ray_bin = Path(sys.executable).with_name("ray")
    exits: list[str] = []
    for attempt in range(START_ATTEMPTS):
        proc, port, log = _start_head(ray_bin, temp_dir, attempt)
        deadline = time.monotonic() + startup_timeout_s
        while time.monotonic() < deadline:
            if subprocess.run([str(ray_bin), "status", f"--address=127.0.0.1:{port}"], capture_output=True,
                              timeout=60).returncode == 0:
                break
            if proc.poll() is not None:
                break
            time.sleep(1)
        else:
            _stop_head(proc)
            pytest.fail(f"the local Ray head did not come up in {startup_timeout_s:.0f} s; its log:\n{_tail(log)}")
        if proc.poll() is None:
            break
        _stop_head(proc)  # its raylet or GCS may outlive the exited `ray start`
        exits.append(f"try {attempt + 1} (port {port}), exit {proc.returncode}:\n{_tail(log)}")
        print(f"[ray] ray start exited, started again: {exits[-1]}")
    else:
        pytest.fail("ray start exited on every try:\n" + "\n".join(exits))
    try:
        yield f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():  # this process joined the head (kvplan tune in-process)
            ray.shutdown()
        _stop_head(proc)
