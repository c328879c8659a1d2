"""The history analysis of `kvplan doctor --prometheus` (a pure function of the series; the
Prometheus side is tested against a real server in tests/vllm_real/test_vllm_prometheus.py and
tests/test_prom_errors.py): ranges as evidence, counter totals with resets, restarts."""
from __future__ import annotations

from kvplan.ops.doctor.history import Points, analyse, counter_total
from kvplan.ops.thresholds import Thresholds


def _p(**kw):
    base = dict(kv=[], waiting=[], preemptions=[], requests=[], prompt_tokens=[], generation_tokens=[],
                e2e_p99=[], ttft_p99=[], start_time=[], gpus={})
    return Points(**{**base, **kw})


def test_counter_total_handles_resets():
    assert counter_total([(0, 5), (1, 7), (2, 2), (3, 4)]) == (2 + 2 + 2, 1)
    assert counter_total([]) == (None, 0)


def test_findings_carry_time_ranges():
    t0 = 1_796_000_000
    kv = [(t0 + i, 0.95 if 10 <= i <= 20 else 0.3) for i in range(40)]
    waiting = [(t0 + i, 3 if 12 <= i <= 18 else 0) for i in range(40)]
    pre = [(t0 + i, 0 if i < 15 else 2) for i in range(40)]
    start = [(t0 + i, 100.0 if i < 30 else 200.0) for i in range(40)]
    reqs = [(t0 + i, i if i < 30 else i - 30) for i in range(40)]
    outside = [(t0 + i, 1000 + 200 * i) for i in range(40)]
    totals = [(t0 + i, 81090) for i in range(40)]
    e2e = [(t0 + i, 3.0 if i in (5, 6) else 0.5) for i in range(40)]
    got = {f.id: f for f in analyse("prometheus X", _p(kv=kv, waiting=waiting, preemptions=pre, start_time=start,
                                                        requests=reqs, e2e_p99=e2e, gpus={"GPU 0 on h": (outside, totals)}),
                                    Thresholds(e2e_p99=2.0), 1.0, 0.92)}
    kvf = got["kv_cache_full_with_waiting"]
    assert (kvf.evidence[0].start, kvf.evidence[0].end) == ("2026-11-30T00:53:32Z", "2026-11-30T00:53:38Z")
    assert dict(kvf.numbers)["waiting_max"] == 3
    assert dict(got["preemption"].numbers)["preemptions"] == 2
    assert dict(got["latency_tail"].numbers)["max_s"] == 3.0
    g = dict(got["gpu_memory_outside_budget"].numbers)
    assert g["growing"] is True and g["outside_budget_mib_first"] == 2600  # first above 3 % of 81,090
    r = got["server_restart"]
    assert dict(r.numbers)["restarts"] == 1 and "process_start_time_seconds changed" in r.evidence[0].text


def test_quiet_history_has_no_findings():
    t0 = 1_796_000_000
    flat = [(t0 + i, 0.0) for i in range(10)]
    assert analyse("p", _p(kv=flat, waiting=flat, preemptions=flat, requests=flat, start_time=flat), Thresholds(),
                   1.0, None) == []


def test_renamed_metrics_of_older_versions_resolve_through_the_alias_table():
    from kvplan.ops.prom.history import Deployment, name_regex

    old = Deployment("vllm", "h:8000", ("m",), frozenset({"vllm:gpu_cache_usage_perc", "vllm:num_requests_running",
                                                          "vllm:time_per_output_token_seconds_bucket"}))
    names = old.metric_names()
    assert names["kv_cache_usage"] == "vllm:gpu_cache_usage_perc" and names["itl"] == "vllm:time_per_output_token_seconds"
    assert names["requests_running"] == "vllm:num_requests_running" and names["e2e"] is None
    assert "vllm:gpu_cache_usage_perc" in name_regex() and "vllm:time_per_output_token_seconds(_bucket" in name_regex()
