"""`kvplan bench` against the real vLLM CPU server (shared tiny-Llama, float32): the client's
counts equal the server's own counters, its latencies fall in the server's histogram buckets,
and KV usage is captured on the run's time axis. Short runs (~10 s, a few requests per second,
small max_tokens: the CPU server does ~500 output tokens/s)."""
from __future__ import annotations

import json

import pytest

from kvplan.bench.config import BenchConfig, parse_length, parse_slo
from kvplan.bench.metrics import Histogram
from kvplan.bench.run import run_bench
from kvplan.traffic.arrivals import rate_schedule
from verdict_helpers import (CLIENT_LAG_TOLERANCE_S, CLIENT_SERVER_GAP_TOLERANCE_S, assert_bench_passed, client_note,
                             tolerate_host_contention)

pytestmark = pytest.mark.vllm

# (96 output tokens kept a request always in flight, but kept the CPU server busy throughout: on a slow
# host a CI run's client then lagged by seconds and 3 requests failed; 48 leaves it idle half the time.)
# The rate is not a whole number: bench scrapes on a 1 s grid from the run's start, so at 3.0 req/s
# every scrape fell on a send (k/3 s) and read the server between two requests: 4 CI runs out of 4
# caught none. At 2.7 req/s the scrapes fall 0.04 to 0.33 s after a send, spread over the gap.
RATE, DURATION, OUT_LEN = 2.7, 10.0, 48
N_REQUESTS = len(list(rate_schedule(RATE, "constant", end_s=DURATION)))  # 27: sends at k / 2.7 s, k < 27


@pytest.fixture(scope="module")
def bench_run(tiny_llama_server):
    cfg = BenchConfig(url=tiny_llama_server.base_url, rate=RATE, arrival="constant", duration_s=DURATION,
                      input_len=parse_length("64", "x"), output_len=parse_length(str(OUT_LEN), "x"), timeout_s=60,
                      slo=parse_slo("ttft_p99=10s,error_rate=0"))
    result, records = run_bench(cfg)
    return tiny_llama_server, result.to_dict(), records


def _bucket_index(buckets, value: float) -> int:
    for i, (le, _) in enumerate(buckets):
        le = float("inf") if le == "+Inf" else le
        if value <= le:
            return i
    return len(buckets) - 1


def test_request_and_token_counts_match_the_server(bench_run):
    server, d, records = bench_run
    assert d["model"] == server.served_model_name  # discovered from /v1/models
    assert d["ignore_eos"] is True  # owned_by: vllm
    n = N_REQUESTS
    assert d["requests"] == {"total": n, "ok": n, "failed": 0, "error_rate": 0.0, "warmup_excluded": 0, "resent": 0}
    assert d["errors"] == {} and not d["partial"]
    assert_bench_passed(None, d)  # every gate, bar a client-bound verdict on an overloaded host (stated tolerance)
    deltas = d["server"]["deltas"]
    assert d["tokens"]["output_total"] == n * OUT_LEN == deltas["vllm:generation_tokens_total"]
    assert d["tokens"]["input_total"] == deltas["vllm:prompt_tokens_total"]
    assert d["tokens"]["usage_missing"] == 0
    assert deltas["vllm:request_success_total"] == n
    assert d["finish_reasons"] == {"length": n}
    assert deltas.get("vllm:num_preemptions_total", 0) == 0


def test_latencies_fall_in_the_server_histogram_buckets(bench_run):
    _, d, _ = bench_run
    hists = d["server"]["histograms"]
    n = N_REQUESTS
    # vLLM times a request from its input processing to its output processing in the API server;
    # the client adds HTTP, templating, tokenisation and the stream's delivery. On an idle host that
    # is a bucket; on a 2-core host where the CPU engine's threads take both cores it is not (a CI
    # run: client TTFT p50 240 ms, server 15.6 ms, with the client's own schedule kept). So: the
    # client is never below the server's median bucket, and above it by at most the stated gap.
    unloaded = tolerate_host_contention(d, "histogram buckets")
    for key in ("ttft", "e2e"):
        h = hists[key]
        assert h["count"] == n  # the server observed exactly our requests
        server_p50 = h["p50"]
        client_p50 = d["latency_s"][key]["p50"]
        bi = _bucket_index(h["buckets"], server_p50)
        upper = float("inf") if h["buckets"][bi][0] == "+Inf" else h["buckets"][bi][0]
        lower = h["buckets"][bi - 1][0] if bi > 0 else 0.0
        where = (key, server_p50, client_p50, h["buckets"], "unloaded" if unloaded else "host contended")
        assert lower <= client_p50 <= upper + CLIENT_SERVER_GAP_TOLERANCE_S, where
        # the server's own mean is below the client's (same requests, measured later and earlier)
        assert h["mean"] <= d["latency_s"][key]["mean"] * 1.05, where
    b = [(float("inf") if le == "+Inf" else le, c) for le, c in hists["ttft"]["buckets"]]
    assert Histogram(tuple(b), 0, n).quantile(0.5) == pytest.approx(hists["ttft"]["p50"], abs=1e-6)


def test_kv_usage_and_queue_on_the_time_axis(bench_run):
    _, d, _ = bench_run
    srv = d["server"]
    assert srv["available"] and srv["names_used"]["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    samples = srv["samples"]
    assert len(samples) >= DURATION - 1  # one a second
    ts = [s["t"] for s in samples]
    assert ts == sorted(ts) and ts[0] < 2.0 and ts[-1] >= DURATION - 1
    if not any(s["requests_running"] or s["kv_cache_usage"] for s in samples):
        # every 1 Hz sample fell between requests (one runs about half the time here; a CI run's ten
        # samples all read an idle server): the time axis was captured, its KV values measured nothing
        pytest.skip(f"no sample fell while a request ran: {[(s['t'], s['requests_running']) for s in samples]}")
    assert max(s["kv_cache_usage"] or 0 for s in samples) > 0
    assert max(s["requests_running"] or 0 for s in samples) >= 1
    # per-interval deltas add up to the run's delta
    assert sum(s["generation_tokens"] or 0 for s in samples) == srv["deltas"]["vllm:generation_tokens_total"]
    json.dumps(d, allow_nan=False)  # the result is valid JSON


def test_client_kept_its_schedule(bench_run):
    # 3 req/s from one event loop is far below what the load generator sustains (benchmarks/
    # loadgen_capacity.py): the median send lag stays within bench's own limit (10 ms: what its
    # verdict calls "kept its schedule"; how far below it is a benchmark's number, not a test's: a
    # CI run on an otherwise idle 2-core machine with the CPU server beside it saw 6.9 ms). The p99
    # is one stalled event among 30 when other jobs load the machine, so it is held to the stated
    # tolerance (verdict_helpers) instead of bench's 50 ms.
    # With the host's cores taken by other jobs, sends are late while the client idles: bench
    # must then say so (host contention, not client-bound) instead of blaming the load generator.
    _, d, _ = bench_run
    lag = d["schedule_lag_s"]
    unloaded = tolerate_host_contention(d, "schedule")
    if unloaded:
        assert lag["p50"] < BenchConfig.lag_p50_limit_s, client_note(d)
        assert lag["p99"] <= CLIENT_LAG_TOLERANCE_S, client_note(d)
    # late sends shift the measured rate by up to the p99 lag over the run's length
    rel = 0.02 if unloaded else 0.02 + lag["p99"] / DURATION
    assert d["rate"]["requested"] == RATE and d["rate"]["achieved"] == pytest.approx(RATE, rel=rel), client_note(d)


def test_non_streaming_completions(tiny_llama_server):
    cfg = BenchConfig(url=tiny_llama_server.base_url, endpoint="completions", stream=False, concurrency=2,
                      max_requests=4, output_len=parse_length("8", "x"), input_len=parse_length("16", "x"),
                      timeout_s=60)
    d = run_bench(cfg)[0].to_dict()
    assert d["requests"]["ok"] == 4 and d["tokens"]["output_total"] == 32
    assert d["latency_s"]["ttft"]["count"] == 4 and d["latency_s"]["itl"]["count"] == 0  # one chunk each


def test_print_numbers_for_the_record(bench_run, capsys):
    """Not an assertion of speed: prints what the run measured (visible with -s)."""
    _, d, _ = bench_run
    with capsys.disabled():
        print("\n[bench vs vLLM] client TTFT p50 %.1f ms, server TTFT p50 %.1f ms; client E2E p50 %.1f ms, "
              "server E2E p50 %.1f ms; lag p50 %.2f ms; KV max %.2f%%" % (
                  d["latency_s"]["ttft"]["p50"] * 1e3, d["server"]["histograms"]["ttft"]["p50"] * 1e3,
                  d["latency_s"]["e2e"]["p50"] * 1e3, d["server"]["histograms"]["e2e"]["p50"] * 1e3,
                  d["schedule_lag_s"]["p50"] * 1e3,
                  100 * max(s["kv_cache_usage"] or 0 for s in d["server"]["samples"])))


def test_exact_prompt_lengths_are_what_vllm_counts(tiny_llama_server):
    """Issue 14, finding 14, against the real server: --input-len 128 on the chat endpoint arrives
    longer than 128 tokens by default (the chat template), and exactly 128 in vLLM's own usage with
    --prompt-length exact (the template overhead measured with the served model's tokenizer)."""
    base = dict(url=tiny_llama_server.base_url, endpoint="chat", concurrency=2, max_requests=4,
                input_len=parse_length("128", "x"), output_len=parse_length("4", "x"), timeout_s=60)
    words = run_bench(BenchConfig(**base))[1]
    exact_result, exact = run_bench(BenchConfig(**base, prompt_length="exact",
                                                tokenizer=str(tiny_llama_server.model_dir)))
    assert all(r.ok for r in words + exact)
    assert all(r.prompt_tokens > 128 for r in words), [r.prompt_tokens for r in words]
    assert [r.prompt_tokens for r in exact] == [128] * 4
    assert exact_result.to_dict()["prompt_length"]["template_overhead_tokens"] > 0


def test_a_model_the_server_does_not_serve_fails_before_sending(tiny_llama_server):
    """Issue 14, finding 13: a wrong --model (vLLM would answer 404 to every request) fails at once."""
    from kvplan.bench.run import ServerUnavailable

    cfg = BenchConfig(url=tiny_llama_server.base_url, rate=2, duration_s=60, model="no-such-model")
    with pytest.raises(ServerUnavailable, match="--model no-such-model is not served"):
        run_bench(cfg)
