"""Helpers shared by the bench tests (imported as ``test_bench_support``), and tests of the FAKE
server itself. The fake server runs as a real subprocess on 127.0.0.1, started and stopped by PID
here; every run against it is bounded in requests and seconds."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator, Optional

import pytest

REPO = Path(__file__).resolve().parents[1]
KVPLAN = [sys.executable, "-m", "kvplan.cli.main"]


@contextlib.contextmanager
def fake_server(*args: str, lifetime: float = 120.0) -> Iterator[tuple[int, subprocess.Popen]]:
    """Start ``python -m kvplan.bench.fake_server`` (a FAKE, on 127.0.0.1); yield (port, process).
    Stopped by PID at exit; it also exits by itself after ``lifetime`` seconds."""
    proc = subprocess.Popen([sys.executable, "-m", "kvplan.bench.fake_server", "--port", "0",
                             "--max-lifetime", str(lifetime), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("LISTENING "):
            raise RuntimeError(f"fake server did not start: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}")
        yield int(line.split()[1]), proc
    finally:
        stop_pid(proc)


def stop_pid(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


def run_cli(*args: str, timeout: float = 60.0, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """``kvplan ...`` in a subprocess (bounded by ``timeout``)."""
    e = dict(os.environ, **(env or {}))
    e.pop("OPENAI_API_KEY", None) if env is None or "OPENAI_API_KEY" not in env else None
    return subprocess.run([*KVPLAN, *args], capture_output=True, text=True, timeout=timeout, env=e)


def bench(url: str, out: Path, *extra: str, timeout: float = 60.0, env: Optional[dict] = None):
    """Run ``kvplan bench`` with --output; return (completed process, result dict or None)."""
    p = run_cli("bench", "--url", url, "--output", str(out), "--no-progress", *extra, timeout=timeout, env=env)
    d = json.loads(out.read_text()) if out.exists() else None
    return p, d


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - loopback test server
        return r.read().decode()


def fake_counter(port: int, name: str) -> float:
    """One value of the fake server's /metrics (the first sample named ``name``)."""
    for line in get(f"http://127.0.0.1:{port}/metrics").splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the fake server's /metrics")


def wait_until_served(port: int, completed: int, client: subprocess.Popen, timeout: float = 120.0) -> None:
    """Poll the fake server until it has completed ``completed`` requests and is streaming others.

    The fault tests act on this observed condition, not on a wall-clock timer: on a loaded machine
    the CLI can take seconds to import, and a timer would fire before the first request."""
    deadline = time.monotonic() + timeout
    while True:
        if client.poll() is not None:
            out, err = client.communicate()
            raise AssertionError(f"kvplan bench exited ({client.returncode}) before the fake served {completed} "
                                 f"requests:\n{err[-2000:]}")
        done = fake_counter(port, "vllm:request_success_total")
        if done >= completed and fake_counter(port, "vllm:num_requests_running") >= 1:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the fake served {done:g} of {completed} requests in {timeout:g} s")
        time.sleep(0.05)


def start_bench(url: str, out: Path, *extra: str) -> subprocess.Popen:
    """``kvplan bench`` with --output in the background (the caller stops it or waits for it)."""
    env = dict(os.environ)
    env.pop("OPENAI_API_KEY", None)
    return subprocess.Popen([*KVPLAN, "bench", "--url", url, "--output", str(out), "--no-progress", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


# --------------------------------------------------------------------------- the fake itself
def test_fake_server_serves_models_metrics_and_exits_on_sigterm():
    with fake_server("--owned-by", "vllm") as (port, proc):
        models = json.loads(get(f"http://127.0.0.1:{port}/v1/models"))
        assert models["data"][0] == {"id": "fake-model", "object": "model", "owned_by": "vllm"}
        text = get(f"http://127.0.0.1:{port}/metrics")
        assert "vllm:generation_tokens_total" in text and "vllm:time_to_first_token_seconds_bucket" in text
    assert proc.poll() is not None


def test_fake_server_exits_by_itself():
    t = time.monotonic()
    with fake_server(lifetime=1.0) as (_port, proc):
        proc.wait(timeout=10)
    assert time.monotonic() - t < 10


def test_fake_server_rejects_unknown_mode():
    p = subprocess.run([sys.executable, "-m", "kvplan.bench.fake_server", "--mode", "nonsense"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--mode" in p.stderr


@pytest.fixture()
def tmp_out(tmp_path: Path) -> Path:
    return tmp_path / "result.json"
