"""`kvplan bench` against a hostile server (the FAKE server's hostile modes, kvplan.bench.fake_server:
what a real server cannot be made to do): the client's memory stays bounded whatever the server
sends, every such answer is counted in the fault matrix's classes, no redirect is followed and the
API key never reaches another origin, setup requests have a total deadline, a cut answer is an
error message, not a traceback.

Memory is the bench process's peak resident set (``os.wait4``'s ``ru_maxrss``), set beside a run of
the same shape against the well-behaved fake. Before these caps the same modes grew the client by
1.24 GB (an endless event, 8 s), 4.86 GB (an endless body) and 237 MB (max_tokens ignored)."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from test_bench_support import KVPLAN, fake_server, get

#: what one hostile run may add to the peak resident memory of the same run against a normal server
#: (the caps: 1 MiB per event and per line, 4 MiB per body, times the 4 requests in flight)
EXTRA_MB = 64
RUN = ("--concurrency", "4", "--max-requests", "4", "--output-len", "16", "--no-metrics", "--timeout", "8s")


def bench_measured(url: str, out: Path, *extra: str, env: dict | None = None, limit: float = 120.0):
    """``kvplan bench`` as a subprocess; (returncode, stderr, result or None, peak RSS in MB, seconds)."""
    e = dict(os.environ, **(env or {}))
    if not env or "OPENAI_API_KEY" not in env:
        e.pop("OPENAI_API_KEY", None)
    t0 = time.monotonic()
    proc = subprocess.Popen([*KVPLAN, "bench", "--url", url, "--output", str(out), "--no-progress", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=e)
    deadline = t0 + limit
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    took = time.monotonic() - t0
    stderr = proc.stderr.read()
    proc.stderr.close()
    d = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, stderr, d, usage.ru_maxrss / 1024, took


@pytest.fixture(scope="module")
def baseline_mb(tmp_path_factory):
    with fake_server() as (port, _):
        rc, err, d, mb, _ = bench_measured(f"http://127.0.0.1:{port}", tmp_path_factory.mktemp("b") / "r.json", *RUN)
    assert rc == 0 and d["requests"]["ok"] == 4, err
    return mb


@pytest.mark.parametrize("mode, stream, klass", [("endless_event", True, "malformed_sse"),
                                                 ("endless_body", False, "overlong_output"),
                                                 ("overlong", True, "overlong_output")])
def test_a_hostile_stream_is_classified_in_bounded_memory(tmp_path, baseline_mb, mode, stream, klass):
    with fake_server("--mode", mode) as (port, _):
        rc, err, d, mb, took = bench_measured(f"http://127.0.0.1:{port}", tmp_path / "r.json", *RUN,
                                              *(() if stream else ("--no-stream",)))
    assert d is not None, err
    assert d["errors"] == {klass: 4} and d["requests"]["ok"] == 0, (d["errors"], d.get("error_examples"))
    assert rc == 1 and "Traceback" not in err
    print(f"{mode}: peak RSS {mb:.0f} MB (normal server: {baseline_mb:.0f} MB), {took:.1f} s")
    assert mb < baseline_mb + EXTRA_MB, (mb, baseline_mb)
    assert took < 60  # each request ends at its cap, not at --timeout x retries


def test_a_redirect_is_not_followed_and_the_key_stays_home(tmp_path):
    """A generation answered with 307 to another server: an http_307 error naming where it pointed;
    the other server never sees a request with the key."""
    with fake_server() as (elsewhere, _), \
            fake_server("--mode", "redirect", "--redirect-to", f"http://127.0.0.1:{elsewhere}") as (port, _):
        rc, err, d, _, _ = bench_measured(f"http://127.0.0.1:{port}", tmp_path / "r.json", *RUN,
                                          "--api-key", "sk-test-secret")
        seen = json.loads(get(f"http://127.0.0.1:{elsewhere}/fake/seen"))
    assert d["errors"] == {"http_307": 4}, d["errors"]
    example = d["error_examples"]["http_307"]
    assert f"redirected to http://127.0.0.1:{elsewhere}/v1/" in example and \
        f"pass --url http://127.0.0.1:{elsewhere}" in example, example
    assert seen == {"requests": 1, "with_authorization": 0}, seen  # only this /fake/seen
    assert "sk-test-secret" not in (tmp_path / "r.json").read_text() + err


def test_models_redirect_is_an_error_naming_the_url_and_sends_no_key(tmp_path):
    with fake_server() as (elsewhere, _), \
            fake_server("--models-mode", "redirect", "--redirect-to", f"http://127.0.0.1:{elsewhere}") as (port, _):
        rc, err, d, _, _ = bench_measured(f"http://127.0.0.1:{port}", tmp_path / "r.json", *RUN,
                                          env={"OPENAI_API_KEY": "sk-from-env"})
        seen = json.loads(get(f"http://127.0.0.1:{elsewhere}/fake/seen"))
    assert rc == 1 and d is None
    assert f"a redirect to http://127.0.0.1:{elsewhere}/v1/models" in err, err
    assert f"pass --url http://127.0.0.1:{elsewhere}" in err and "Traceback" not in err, err
    assert seen == {"requests": 1, "with_authorization": 0}, seen


def test_a_slow_model_listing_ends_at_the_setup_deadline(tmp_path):
    """/v1/models sends a byte every 0.5 s and never finishes: each read is quick, so a per-read
    timeout never fires (44 s with --timeout 8s before); the listing's total deadline does."""
    with fake_server("--models-mode", "slow") as (port, _):
        rc, err, d, _, took = bench_measured(f"http://127.0.0.1:{port}", tmp_path / "r.json", *RUN[:-2],
                                             "--timeout", "2s")
    assert rc == 1 and "no complete answer within 2 s" in err and "Traceback" not in err, err
    print(f"slow /v1/models: bench gave up after {took:.1f} s (deadline 2 s, CLI start-up included)")
    assert took < 40


def test_a_cut_model_listing_is_an_error_message(tmp_path):
    with fake_server("--models-mode", "cut") as (port, _):
        rc, err, d, _, _ = bench_measured(f"http://127.0.0.1:{port}", tmp_path / "r.json", *RUN)
    assert rc == 1 and "cannot list models" in err and "IncompleteRead" in err and "Traceback" not in err, err


def test_setup_get_rules(tmp_path):
    """The setup GET itself (kvplan.bench.http), against the fake: no redirect, a deadline, a cap."""
    from kvplan.bench.http import HttpError, get as setup_get

    with fake_server("--models-mode", "redirect", "--redirect-to", "http://127.0.0.1:9") as (port, _):
        with pytest.raises(HttpError) as err:
            setup_get(f"http://127.0.0.1:{port}/v1/models", {"Authorization": "Bearer x"})
        assert err.value.status == 307 and err.value.location == "http://127.0.0.1:9/v1/models"
    with fake_server() as (port, _):
        status, body = setup_get(f"http://127.0.0.1:{port}/v1/models")
        assert status == 200 and json.loads(body)["data"][0]["id"] == "fake-model"
        with pytest.raises(HttpError, match="larger than"):
            setup_get(f"http://127.0.0.1:{port}/metrics", max_bytes=100)
    with pytest.raises(HttpError, match="not an http"):
        setup_get("file:///etc/passwd")


def test_prometheus_client_reports_a_cut_answer():
    """The Prometheus client catches what a broken server sends: a body shorter than its
    Content-Length (IncompleteRead is an http.client error, not an OSError) and a bad status line.
    The broken server is a few lines of socket code here (no real Prometheus can be made to do it)."""
    import socket
    import threading

    from kvplan.ops.prom.client import PromClient, PromError

    answers = [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"status\":",
               b"NOT-HTTP garbage\r\n\r\n"]
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve():
        for answer in answers:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(10)
                conn.recv(65536)
                conn.sendall(answer)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        whys = []
        for _ in answers:
            with pytest.raises(PromError) as err:
                PromClient(f"http://127.0.0.1:{port}", timeout=10).query("up")
            whys.append(err.value.why)
    finally:
        t.join(timeout=10)
        srv.close()
    assert "IncompleteRead" in whys[0] and "BadStatusLine" in whys[1], whys


def test_help_points_to_the_environment_and_a_key_file():
    p = subprocess.run([*KVPLAN, "bench", "--help"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, COLUMNS="200"))
    assert "OPENAI_API_KEY" in p.stdout and "--api-key-file" in p.stdout, p.stdout


def test_api_key_file(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-from-a-file\n")
    with fake_server() as (port, _):
        rc, err, d, _, _ = bench_measured(f"http://127.0.0.1:{port}", tmp_path / "r.json", *RUN, "--api-key-file",
                                          str(key))
    assert rc == 0 and d["requests"]["ok"] == 4, err
    assert d["config"]["api_key_set"] is True and "sk-from-a-file" not in (tmp_path / "r.json").read_text()
    rc, err, _, _, _ = bench_measured(f"http://127.0.0.1:{port}", tmp_path / "r2.json", *RUN, "--api-key-file",
                                      str(tmp_path / "missing"))
    assert rc == 2 and "--api-key-file" in err and "Traceback" not in err, err
