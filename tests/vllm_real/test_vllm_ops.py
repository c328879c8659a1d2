"""`kvplan alerts` against the real vLLM CPU server: after real traffic, every metric the
generated dashboard and rules query is exported by the live server (with the model_name label
they filter on)."""
from __future__ import annotations

import json
import statistics

import pytest

from kvplan.bench.metrics import parse_metrics
from kvplan.ops import alerts
from kvplan.ops.thresholds import Thresholds
from tests.vllm_server.client import get_text, post_json

pytestmark = pytest.mark.vllm


def test_dashboard_and_rules_query_only_live_metrics(tiny_llama_server, vllm_version, tmp_path):
    # one request so the histograms and counters carry the model_name label with data
    r = post_json(tiny_llama_server.base_url, "/v1/completions",
                  {"model": tiny_llama_server.served_model_name, "prompt": "hello", "max_tokens": 4}, 60)
    assert r["usage"]["completion_tokens"] >= 1
    status, text = get_text(tiny_llama_server.base_url, "/metrics", 10)
    assert status == 200
    snap = parse_metrics(text)
    out = alerts.write(tmp_path, Thresholds(), vllm_version, [tiny_llama_server.served_model_name])
    queried = alerts.queried_metrics(json.loads(out.dashboard_path.read_text()))
    queried |= set(alerts._METRIC.findall(" ".join(r.expr for r in alerts.rules(Thresholds(), out.names))))
    assert queried - snap.names() == set()
    # the model_name filter matches the live series
    assert snap.value(out.names.requests_running, model_name=tiny_llama_server.served_model_name) is not None
    assert snap.value(out.names.prompt_tokens, model_name=tiny_llama_server.served_model_name) >= 1


# --------------------------------------------------------------------------- doctor on real logs
def _doctor(*sources: tuple[str, str]):
    from kvplan.ops.doctor import diagnose

    return diagnose(list(sources))


def test_doctor_on_real_kv_too_small_startup(kv_too_small_exit):
    """The harness's failed start-up (1 MiB of KV for --max-model-len 2048): vLLM estimates 384
    tokens; doctor says so, quotes the line, suggests the KV size that keeps 2,048 tokens first (free)
    and --max-model-len 384 next (capacity: longer requests would be refused)."""
    assert kv_too_small_exit.returncode != 0
    r = _doctor((str(kv_too_small_exit.log_path), kv_too_small_exit.log_text))
    f = next(f for f in r.findings if f.id == "kv_cache_too_small_for_max_model_len")
    nums = dict(f.numbers)
    assert nums["max_model_len"] == 2048 and nums["estimated_max_model_len"] == 384
    assert f.fixes[0].change.startswith("--kv-cache-memory-bytes ") and f.fixes[0].cost == "free"
    assert f.fixes[1].change == "--max-model-len 384" and f.fixes[1].cost == "capacity"
    lines = kv_too_small_exit.log_text.splitlines()
    assert "To serve at least one request" in lines[f.evidence[0].line - 1]
    assert not r.healthy


def test_doctor_counts_real_preemptions(small_kv_server):
    """A preemption burst on the 160-block server. Measured: vLLM 0.32's V1 stats line never prints
    "Preemptions: N" (it resets the count before logging), so the log alone shows none and doctor
    says to collect /metrics; given the live scrape too, doctor reports exactly the server's
    vllm:num_preemptions_total with the counter line as evidence."""
    import time

    from tests.vllm_server.client import preemption_burst

    from kvplan.ops.doctor.signatures import STATS

    def stats_lines() -> int:
        return sum(1 for line in small_kv_server.log_text().splitlines() if STATS.search(line))

    burst = preemption_burst(small_kv_server.base_url, 4, 1000, 500, timeout=180)
    assert burst.all_ok and burst.preemptions >= 1, burst.summary()
    # wait (polled, bounded) for the stats line vLLM logs every 10 s after the burst's last interval
    before, deadline = stats_lines(), time.monotonic() + 90
    while stats_lines() <= before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert stats_lines() > before, "vLLM logged no stats line within 90 s of the burst"
    log = small_kv_server.log_text()
    status, scrape = get_text(small_kv_server.base_url, "/metrics", 10)
    assert status == 200
    total = parse_metrics(scrape).get("preemptions")
    assert total is not None and total >= burst.preemptions
    alone = _doctor(("server.log", log))
    assert any(r.stats_lines for r in alone.runs)
    assert not any(f.id == "preemption" for f in alone.findings)
    assert any("/metrics" in c for c in alone.collect_next)
    both = _doctor(("server.log", log), ("metrics.txt", scrape))
    f = next(f for f in both.findings if f.id == "preemption")
    assert dict(f.numbers)["preemptions"] == int(total)
    assert f.evidence[0].file == "metrics.txt" and f.evidence[0].text.startswith("vllm:num_preemptions_total{")
    assert scrape.splitlines()[f.evidence[0].line - 1] == f.evidence[0].text
    assert any(fx.change.startswith("--max-num-seqs") for fx in f.fixes)


def test_doctor_on_real_oversize_request(tiny_llama_server):
    """A 3,000-token prompt to the 2,048-token server: HTTP 400; doctor reads vLLM's answer (the
    server log alone only has the access line, and doctor says to collect the body)."""
    import json as _json
    import urllib.error
    import urllib.request

    from tests.vllm_server.client import random_prompt_ids

    body = {"model": tiny_llama_server.served_model_name, "prompt": random_prompt_ids(3000, 7), "max_tokens": 8}
    req = urllib.request.Request(tiny_llama_server.base_url.rstrip("/") + "/v1/completions",  # noqa: S310 - loopback
                                 data=_json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    assert req.full_url.startswith("http://127.0.0.1:")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=60)  # noqa: S310 - loopback server
    assert exc.value.code == 400
    answer = exc.value.read().decode()
    assert "maximum context length is 2048 tokens" in answer
    # Measured on 0.32: the server log has only the access line "POST /v1/completions HTTP/1.1" 400,
    # so the log alone gives no finding and doctor asks for the response body.
    alone = _doctor(("server.log", tiny_llama_server.log_text()))
    assert not any(f.id == "request_too_long" for f in alone.findings)
    assert any("HTTP 400" in c for c in alone.collect_next)
    r = _doctor(("server.log", tiny_llama_server.log_text()), ("http-400.json", answer))
    f = next(f for f in r.findings if f.id == "request_too_long")
    nums = dict(f.numbers)
    assert nums["max_model_len"] == 2048 and nums["longest_requested"] >= 3000
    assert any(fx.change == "--max-model-len 3008" for fx in f.fixes)


# --------------------------------------------------------------------------- watch on the real server
#: The load of test_watch_under_small_load: polls taken while it runs, and its bound in requests.
MIN_POLLS, MAX_LOAD_REQUESTS = 8, 60


def _load(base_url: str, model: str, n: int, max_tokens: int, stop=None) -> None:
    """``n`` completions one after another (fewer once ``stop``, a threading.Event, is set)."""
    for i in range(n):
        if stop is not None and stop.is_set():
            return
        post_json(base_url, "/v1/completions", {"model": model, "prompt": f"count to {i} please", "max_tokens": max_tokens,
                                                "ignore_eos": True}, 120)


#: A /metrics answer slower than this (median) says the API server was starved (an idle 2-core host
#: answers the tiny server's /metrics in about 10 ms)
SLOW_POLL_S = 0.1


def test_watch_under_small_load(tiny_llama_server):
    """Watch polls every 0.5 s while short completions run back to back (bounded): the snapshot has
    every field, tokens/s and running move, and the E2E/TTFT percentiles come from the window."""
    import threading
    import time

    from kvplan.ops.watch import Watcher

    w = Watcher(tiny_llama_server.base_url, window_s=30)
    first = w.poll()
    assert first.up and first.kv_cache_usage is not None
    # completions of 160 tokens one after another (0.3-1 s each) until MIN_POLLS polls have come
    # back during the load, at most MAX_LOAD_REQUESTS: the 0.5 s polls fall inside them. (A fixed 8
    # can end within 4 polls on a 2-core host where one /metrics answer takes 2.6 s, measured.)
    stop = threading.Event()
    t = threading.Thread(target=_load, args=(tiny_llama_server.base_url, tiny_llama_server.served_model_name,
                                             MAX_LOAD_REQUESTS, 160, stop))
    t.start()
    snaps, poll_s = [], []
    deadline = time.monotonic() + 120
    while t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.5)
        t0 = time.monotonic()
        snaps.append(w.poll())
        poll_s.append(time.monotonic() - t0)
        if len(snaps) >= MIN_POLLS:
            stop.set()
    stop.set()
    t.join(timeout=120)
    snaps.append(w.poll())
    assert all(s.up for s in snaps)
    assert max(s.generation_tokens_per_s or 0 for s in snaps) > 0
    assert max(s.prompt_tokens_per_s or 0 for s in snaps) > 0
    last = snaps[-1]
    assert last.e2e_p50_s is not None and 0 < last.e2e_p50_s <= last.e2e_p99_s
    assert last.ttft_p99_s is not None and last.queue_p99_s is not None
    assert last.requests_per_s and last.requests_per_s > 0
    d = last.to_dict()
    assert d["metric_names"]["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    if not max(s.requests_running or 0 for s in snaps) >= 1 and statistics.median(poll_s) > SLOW_POLL_S:
        # vLLM sets the gauges in the API server's output handler, step by step; an API server the
        # host starves handles a request's steps in one backlog, gauge 1 then 0 in one turn of its
        # loop, and no scrape can see it running. Its slow answers to /metrics are the sign.
        pytest.skip(f"no poll saw a request running and /metrics took {statistics.median(poll_s):.3f} s "
                    f"(median of {len(poll_s)}): the API server lagged the engine")
    assert max(s.requests_running or 0 for s in snaps) >= 1, ([s.requests_running for s in snaps], poll_s)


def test_watch_survives_a_server_restart(tiny_llama_model):
    """A private server on a fixed port: watched up, stopped (snapshots say down, no crash), started
    again on the same port (restart counted from process_start_time_seconds, no negative rates)."""
    import time

    from kvplan.ops.watch import Watcher
    from tests.vllm_server import server as S

    port = S.free_port()
    args = ("--max-model-len", "2048")
    env = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    srv = S.VllmServer(tiny_llama_model.path, args, env, port=port, label="watch-restart-1")
    srv2 = None
    try:
        srv.launch().wait_healthy()
        w = Watcher(srv.base_url, window_s=30)
        _load(srv.base_url, srv.served_model_name, 3, 16)
        assert w.poll().up
        _load(srv.base_url, srv.served_model_name, 1, 16)
        s = w.poll()
        assert s.up and s.generation_tokens_per_s and s.generation_tokens_per_s > 0
        srv.stop()
        down = [w.poll() for _ in range(3)]
        assert all(not d.up and d.error for d in down)
        srv2 = S.VllmServer(tiny_llama_model.path, args, env, port=port, label="watch-restart-2")
        srv2.launch().wait_healthy()
        back = w.poll()
        assert back.up and back.restarts == 1
        assert back.prompt_tokens_per_s is None  # a new run: no rate across the restart
        _load(srv2.base_url, srv2.served_model_name, 1, 16)
        time.sleep(0.2)
        s2 = w.poll()
        assert s2.up and s2.restarts == 1 and s2.generation_tokens_per_s > 0
    finally:
        for s_ in (srv, srv2):
            if s_ is not None:
                s_.stop()


def test_doctor_planned_kv_size_starts_the_real_server(kv_too_small_exit, tiny_llama_model):
    """The failed start-up, diagnosed with the model's folder as --model: the planner reproduces
    vLLM's estimate (384) and predicts the smallest --kv-cache-memory-bytes that starts
    --max-model-len 2048 and the KV line vLLM will print. A real server started with exactly that
    size starts and prints exactly that line."""
    from kvplan.ops.doctor import diagnose
    from tests.vllm_server import server as S

    r = diagnose([(str(kv_too_small_exit.log_path), kv_too_small_exit.log_text)], model=str(tiny_llama_model.path))
    f = next(f for f in r.findings if f.id == "kv_cache_too_small_for_max_model_len")
    assert r.runs[0].fix_basis.startswith("plan: ")
    size, shorter = f.fixes[:2]
    assert shorter.change == "--max-model-len 384" and shorter.basis == "plan" and shorter.cost == "capacity"
    assert size.change.startswith("--kv-cache-memory-bytes ") and size.cost == "free"
    nums = dict(size.numbers)
    assert size.basis == "plan" and nums["starts"]
    srv = S.VllmServer(tiny_llama_model.path, ("--max-model-len", "2048", "--kv-cache-memory-bytes",
                                               str(nums["kv_cache_memory_bytes"])), {}, label="doctor-planned-kv")
    try:
        srv.launch().wait_healthy()
        log = srv.log_text()
    finally:
        srv.stop()
    assert f"CPU KV cache size: {nums['kv_cache_tokens']:,} tokens" in log
    assert f"Maximum concurrency for 2,048 tokens per request: {nums['max_concurrency']:.2f}x" in log
