"""Fault tests: each fault is counted and classified, the run ends on time, the result file is
valid. Faults a real server cannot be made to show on demand come from the FAKE server
(kvplan.bench.fake_server, a real subprocess on 127.0.0.1); the server-killed case kills that
process by PID mid-run. Kills and interrupts happen on an observed condition (the fake has served N
requests, polled), never on a wall-clock timer. Every run is bounded in requests and seconds."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from test_bench_support import bench, fake_server, start_bench, stop_pid, wait_until_served


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _valid(d: dict) -> None:
    assert d["kind"] == "kvplan.bench" and d["schema_version"] == 1
    r = d["requests"]
    assert r["total"] == r["ok"] + r["failed"]
    assert sum(d["errors"].values()) == r["failed"]


def test_connection_refused_stops_early_and_is_partial(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}"
    p, d = bench(url, tmp_path / "r.json", "--model", "m", "--rate", "20", "--duration", "20s", timeout=90)
    assert p.returncode == 1, p.stderr
    _valid(d)
    assert set(d["errors"]) == {"connect_refused"} and d["requests"]["ok"] == 0
    assert d["partial"] and d["stop_reason"] == "server_unreachable"
    # the run's own clock (CLI start-up excluded): ended after unreachable_after_s (3 s), not the 20 s
    # duration; 9 s of slack for a loaded host
    assert d["client"]["wall_s"] < 12, d["client"]


def test_no_model_and_no_server_exits_1(tmp_path):
    p, d = bench(f"http://127.0.0.1:{_free_port()}", tmp_path / "r.json", "--rate", "1", "--duration", "1s")
    assert p.returncode == 1 and "cannot list models" in p.stderr and d is None


def test_server_killed_mid_run(tmp_path):
    out = tmp_path / "r.json"
    with fake_server("--itl", "0.02") as (port, server):
        client = start_bench(f"http://127.0.0.1:{port}", out, "--rate", "20", "--duration", "60s",
                             "--output-len", "50", "--timeout", "10s")
        try:
            wait_until_served(port, 8, client)  # 8 requests done, others mid-stream
            os.kill(server.pid, signal.SIGKILL)  # our own fake, by PID
            killed = time.monotonic()
            _, stderr = client.communicate(timeout=60)
            after_kill = time.monotonic() - killed
        finally:
            stop_pid(client)
    assert client.returncode == 1, stderr
    d = json.loads(out.read_text())
    _valid(d)
    assert d["partial"] and d["stop_reason"] == "server_unreachable"
    assert d["requests"]["ok"] >= 3  # of the 8 the fake had completed (its last bytes may be lost in the kill)
    assert d["errors"].get("broken_stream", 0) >= 1  # the streams cut by the kill
    assert d["errors"].get("connect_refused", 0) >= 3
    # the run ends unreachable_after_s (3 s) after the kill, not at its 60 s duration; 17 s of slack for a busy host
    assert after_kill < 20, f"the run went on {after_kill:.1f} s after the server died"
    recs = [json.loads(x) for x in (tmp_path / "r.records.jsonl").read_text().splitlines()]
    assert len(recs) == d["requests"]["total"]


@pytest.mark.parametrize("code", [429, 500, 503])
def test_http_status_codes_classified_with_body(tmp_path, code):
    with fake_server("--mode", f"status:{code}", "--fault-every", "3") as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--rate", "50", "--arrival", "constant",
                     "--max-requests", "30", "--output-len", "4")
    _valid(d)
    assert d["requests"]["total"] == 30
    assert d["errors"] == {f"http_{code}": 10}  # every 3rd of the 30 the fake received
    assert f"fake {code}" in d["error_examples"][f"http_{code}"]
    # No --slo error_rate given: failed requests fail the run by default (issue 14, finding 13).
    assert p.returncode == 1
    chk = {c["name"]: c for c in d["verdict"]["checks"]}["error_rate"]
    assert not chk["passed"] and chk["value"] == pytest.approx(1 / 3) and chk["limit"] == 0.0
    assert "--slo error_rate=X" in chk["note"]


def test_error_rate_slo_fails_the_run(tmp_path):
    with fake_server("--mode", "status:500", "--fault-every", "4") as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--rate", "50", "--max-requests", "20",
                     "--output-len", "4", "--slo", "error_rate=0")
    assert p.returncode == 1
    chk = {c["name"]: c for c in d["verdict"]["checks"]}
    assert not chk["error_rate"]["passed"] and chk["error_rate"]["value"] == 0.25


@pytest.mark.parametrize("mode, klass", [("drop", "broken_stream"), ("garbage", "malformed_sse"),
                                         ("truncate", "truncated")])
def test_stream_faults(tmp_path, mode, klass):
    with fake_server("--mode", mode) as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--rate", "20", "--max-requests", "10",
                     "--output-len", "8", "--endpoint", "completions")
    _valid(d)
    assert d["errors"] == {klass: 10} and d["requests"]["ok"] == 0
    assert p.returncode == 1  # no request succeeded


def test_a_request_the_server_hung_up_on_unanswered_is_sent_once_more(tmp_path):
    """A server that closes a connection without answering (vLLM's API server closing an idle
    keep-alive connection the client reuses at that moment) never saw the request: it is sent once
    more and counted as resent, not failed; a server that hangs up on every request still fails
    them all (one resend each, not a loop)."""
    with fake_server("--mode", "hangup", "--fault-every", "2") as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--rate", "20", "--max-requests", "10",
                     "--output-len", "4", "--endpoint", "completions", "--records", str(tmp_path / "rec.jsonl"),
                     env={"COLUMNS": "200"})  # the summary's cells unwrapped
    _valid(d)
    assert p.returncode == 0 and d["requests"]["ok"] == 10, d["errors"]
    recs = [json.loads(line) for line in (tmp_path / "rec.jsonl").read_text().splitlines()]
    assert d["requests"]["resent"] == sum(r["resent"] for r in recs if not r["warmup"]) >= 1, d["requests"]
    assert f"0 failed, {d['requests']['resent']} sent again on a fresh connection" in p.stdout, p.stdout
    with fake_server("--mode", "hangup") as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r2.json", "--rate", "20", "--max-requests", "4",
                     "--output-len", "4", "--endpoint", "completions")
    _valid(d)
    assert d["errors"] == {"broken_stream": 4} and d["requests"]["resent"] == 4
    assert d["error_examples"]["broken_stream"].startswith("sent again after the server disconnected"), d
    assert p.returncode == 1


def test_slow_server_times_out_on_time(tmp_path):
    with fake_server("--mode", "slow", "--slow-s", "60") as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--rate", "5", "--duration", "2s",
                     "--timeout", "1s", timeout=90)
    _valid(d)
    assert set(d["errors"]) == {"timeout"} and d["requests"]["failed"] == d["requests"]["total"] >= 5
    # the run's own clock: duration 2 s + timeout 1 s, not the server's 60 s stall; 9 s of slack
    assert d["client"]["wall_s"] < 12, d["client"]
    assert not d["partial"]


def test_ctrl_c_writes_partial_result(tmp_path):
    out = tmp_path / "r.json"
    with fake_server("--itl", "0.01") as (port, _):
        proc = start_bench(f"http://127.0.0.1:{port}", out, "--rate", "20", "--duration", "60s", "--output-len", "30")
        try:
            wait_until_served(port, 8, proc)
            proc.send_signal(signal.SIGINT)  # what Ctrl-C does
            _, stderr = proc.communicate(timeout=30)
        finally:
            stop_pid(proc)
    assert proc.returncode == 1, stderr
    d = json.loads(out.read_text())
    _valid(d)
    assert d["partial"] and d["stop_reason"] == "interrupted"
    assert d["requests"]["ok"] > 5  # of the 8 the fake had completed before the signal
    assert set(d["errors"]) <= {"cancelled"}


# ------------------------------------------------------------------ issue 14, finding 13
def test_a_model_the_server_does_not_serve_fails_before_sending(tmp_path):
    with fake_server() as (port, _):
        t = time.monotonic()
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--rate", "5", "--duration", "30s",
                     "--model", "no-such-model")
        took = time.monotonic() - t
    assert p.returncode == 1 and d is None
    assert "--model no-such-model is not served" in p.stderr and "fake-model" in p.stderr
    assert took < 20  # not the 30 s of 404s


def test_every_request_404_stops_the_run_at_once(tmp_path):
    """A server that answers 404 to everything (no /v1/models to check first): the run stops after
    the first few requests and says why."""
    with fake_server("--mode", "status:404") as (port, _):
        t = time.monotonic()
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--rate", "20", "--duration", "30s",
                     "--model", "fake-model")
        took = time.monotonic() - t
    assert p.returncode == 1 and d["stop_reason"] == "all_requests_404" and d["partial"]
    assert took < 20 and d["requests"]["total"] < 100
    chk = {c["name"]: c for c in d["verdict"]["checks"]}["run_complete"]
    assert "does not serve model 'fake-model'" in chk["note"]


def test_errors_fail_by_default_and_the_limit_is_settable(tmp_path):
    with fake_server("--mode", "status:400", "--fault-every", "3") as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--rate", "50", "--arrival", "constant",
                     "--max-requests", "30", "--output-len", "4", "--max-lag-p50", "10s", "--max-lag-p99", "10s")
        assert p.returncode == 1
        assert not {c["name"]: c for c in d["verdict"]["checks"]}["error_rate"]["passed"]
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "s.json", "--rate", "50", "--arrival", "constant",
                     "--max-requests", "30", "--output-len", "4", "--slo", "error_rate=0.5",
                     "--max-lag-p50", "10s", "--max-lag-p99", "10s")
    assert p.returncode == 0, p.stdout
    assert d["config"]["lag_p50_limit_s"] == 10.0 and d["config"]["client_cpu_limit"] == 0.7
