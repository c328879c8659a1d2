"""`kvplan watch`: window rates and histogram-delta percentiles, threshold trips, a server that
restarts (counters reset) or vanishes, and the CLI's --once JSON against a local HTTP server that
serves the real vLLM CPU scrape (tests/fixtures/vllm_cpu/metrics.txt), then changed versions of it."""
from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

from kvplan.ops.thresholds import Thresholds
from kvplan.ops.watch import Snapshot, Watcher, tripped
from test_bench_support import run_cli

REAL = (Path(__file__).parent / "fixtures" / "vllm_cpu" / "metrics.txt").read_text()
LAB = 'engine="0",model_name="m"'
BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0)


def scrape(prompt: float, gen: float, pre: float, e2e: list[float], waiting: float = 0, kv: float = 0.25) -> str:
    """vLLM-shaped exposition (names and labels as 0.32 exports them)."""
    out = ["# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{LAB}}} {kv}",
           "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{LAB}}} 3",
           "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{LAB}}} {waiting}",
           "# TYPE vllm:num_preemptions counter", f"vllm:num_preemptions_total{{{LAB}}} {pre}",
           "# TYPE vllm:prompt_tokens counter", f"vllm:prompt_tokens_total{{{LAB}}} {prompt}",
           "# TYPE vllm:generation_tokens counter", f"vllm:generation_tokens_total{{{LAB}}} {gen}",
           "# TYPE vllm:e2e_request_latency_seconds histogram"]
    for le in BUCKETS:
        out.append(f'vllm:e2e_request_latency_seconds_bucket{{{LAB},le="{le}"}} {sum(1 for v in e2e if v <= le)}')
    out.append(f'vllm:e2e_request_latency_seconds_bucket{{{LAB},le="+Inf"}} {len(e2e)}')
    out.append(f"vllm:e2e_request_latency_seconds_count{{{LAB}}} {len(e2e)}")
    out.append(f"vllm:e2e_request_latency_seconds_sum{{{LAB}}} {sum(e2e)}")
    return "\n".join(out) + "\n"


class Script:
    """fetch() answers from a list (an exception instance = the server is unreachable)."""

    def __init__(self, answers):
        self.answers = list(answers)

    def __call__(self, url):
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a


def clock(*ts):
    it = iter(ts)
    return lambda: next(it)


def test_rates_and_percentiles_come_from_the_window_deltas():
    # 100 old requests at 0.4 s must not count; the 10 new ones take 3 s -> P99 in (2.5, 5]
    a = scrape(1000, 5000, 0, [0.4] * 100)
    b = scrape(1600, 5900, 2, [0.4] * 100 + [3.0] * 10, waiting=12)
    w = Watcher("u", 60, Thresholds(e2e_p99=2.0), fetch=Script([a, b]), clock=clock(0.0, 10.0))
    s1 = w.poll()
    assert s1.up and s1.prompt_tokens_per_s is None and s1.e2e_p99_s is None  # one scrape: no rates
    s = w.poll()
    assert s.window_s == 10.0
    assert s.prompt_tokens_per_s == pytest.approx(60.0) and s.generation_tokens_per_s == pytest.approx(90.0)
    assert s.preemptions_per_s == pytest.approx(0.2) and s.preemptions_in_window == pytest.approx(2.0)
    assert 2.5 < s.e2e_p99_s <= 5.0 and 2.5 < s.e2e_p50_s <= 5.0
    assert set(s.tripped) == {"e2e_p99", "waiting", "preemptions"}
    assert s.kv_cache_usage == 0.25 and s.requests_waiting == 12


def test_window_slides():
    answers = [scrape(100 * i, 0, 0, []) for i in range(6)]
    w = Watcher("u", 20, fetch=Script(answers), clock=clock(0, 10, 20, 30, 40, 50))
    snaps = [w.poll() for _ in range(6)]
    assert snaps[-1].window_s == 20.0  # the newest scrape at least 20 s old is kept
    assert snaps[-1].prompt_tokens_per_s == pytest.approx(10.0)


def test_restart_resets_the_window_and_vanishing_is_reported():
    a = scrape(5000, 9000, 7, [1.0] * 50)
    b = scrape(5100, 9100, 7, [1.0] * 51)
    restarted = scrape(40, 80, 0, [0.5])  # counters went down: a new server run
    c = scrape(140, 180, 0, [0.5, 0.6])
    w = Watcher("u", 60, fetch=Script([a, b, ConnectionRefusedError(111, "refused"), restarted, c]),
                clock=clock(0, 1, 2, 3, 4))
    w.poll()
    assert w.poll().prompt_tokens_per_s == pytest.approx(100.0)
    down = w.poll()
    assert not down.up and "refused" in down.error and down.tripped == ()
    back = w.poll()
    assert back.up and back.restarts == 1 and back.prompt_tokens_per_s is None  # no negative rates
    s = w.poll()
    assert s.prompt_tokens_per_s == pytest.approx(100.0) and s.preemptions_per_s == 0
    assert s.restarts == 1


def test_garbage_is_down_not_a_crash():
    w = Watcher("u", 60, fetch=Script(["<html>not metrics</html>", "\x00\xff garbage {{{"]), clock=clock(0, 1))
    assert not w.poll().up and not w.poll().up


def test_thresholds_gpu_memory():
    base = Watcher("u", fetch=Script([REAL]), clock=clock(0.0)).poll()
    hot = Snapshot(**{**base.to_dict(), "gpu_memory_used_fraction": 0.95, "tripped": ()})
    assert tripped(hot, Thresholds()) == ["gpu_memory"]
    assert tripped(hot, Thresholds(gpu_memory=0.96)) == []


# --------------------------------------------------------------------------- CLI over HTTP (127.0.0.1)
class _Handler(http.server.BaseHTTPRequestHandler):
    bodies: list = []

    def do_GET(self):
        body = (self.bodies.pop(0) if len(self.bodies) > 1 else self.bodies[0]).encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def metrics_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_cli_once_json_on_the_real_scrape(metrics_server):
    srv, url = metrics_server
    moved = REAL.replace('vllm:prompt_tokens_total{engine="0",model_name="kvplan-tiny"} 17.0',
                         'vllm:prompt_tokens_total{engine="0",model_name="kvplan-tiny"} 217.0')
    assert moved != REAL
    _Handler.bodies = [REAL, moved]
    p = run_cli("watch", url, "--once", "--format", "json", "--interval", "0.5")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    for key in ("kv_cache_usage", "requests_running", "requests_waiting", "preemptions_per_s", "prompt_tokens_per_s",
                "generation_tokens_per_s", "ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "queue_p50_s",
                "queue_p99_s", "gpu_memory_used_fraction", "tripped", "restarts"):
        assert key in d
    assert d["up"] is True and d["scrapes"] == 2
    assert d["prompt_tokens_per_s"] > 100  # 200 tokens in ~0.5 s
    assert d["metric_names"]["kv_cache_usage"] == "vllm:kv_cache_usage_perc"


def test_cli_once_down_exits_1():
    p = run_cli("watch", "http://127.0.0.1:9", "--once", "--format", "json", "--interval", "0.1")
    assert p.returncode == 1 and json.loads(p.stdout)["up"] is False


def test_cli_streaming_lines_bounded(metrics_server):
    srv, url = metrics_server
    _Handler.bodies = [REAL]
    p = run_cli("watch", url, "--interval", "0.2", "--duration", "1", timeout=30)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert 2 <= len(lines) <= 8 and "KV-cache usage=" in lines[-1]


@pytest.mark.parametrize("args, msg", [(["ftp://x"], "http"), (["http://127.0.0.1:9", "--interval", "0"], "--interval"),
                                       (["http://127.0.0.1:9", "--thresholds", "x=1"], "unknown key"),
                                       (["http://127.0.0.1:9", "--format", "xml"], "--format")])
def test_cli_usage_errors(args, msg):
    p = run_cli("watch", *args)
    assert p.returncode == 2 and msg in p.stderr


def test_restart_seen_from_the_process_start_time_even_when_counters_grew():
    a = scrape(10, 10, 0, [1.0]) + "process_start_time_seconds 1000.0\n"
    b = scrape(900, 900, 0, [1.0] * 9) + "process_start_time_seconds 2000.0\n"
    w = Watcher("u", 60, fetch=Script([a, b]), clock=clock(0, 1))
    w.poll()
    s = w.poll()
    assert s.restarts == 1 and s.prompt_tokens_per_s is None
