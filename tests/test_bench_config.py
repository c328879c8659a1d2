"""Config parsing, arrival schedules, percentiles / order-statistic intervals, compare verdicts, result building."""
from __future__ import annotations

import json
import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from kvplan.traffic.arrivals import rate_schedule, replay_schedule
from kvplan.bench.client import Record
from kvplan.bench.compare import compare
from kvplan.bench.config import BenchConfig, LengthDist, parse_length, parse_seconds, parse_slo
from kvplan.bench.prompts import RequestSource
from kvplan.bench.result import build_result
from kvplan.bench.stats import percentile, quantile_change_ci
from kvplan.errors import UsageError


def test_parse_length_and_seconds():
    assert parse_length("128", "x") == LengthDist("fixed", 128)
    assert parse_length("uniform:10:20", "x") == LengthDist("uniform", 10, 20)
    assert parse_length("normal:100:10", "x").kind == "normal"
    assert parse_length("log", "x").kind == "log" and parse_length("empirical", "x").kind == "empirical"
    for bad in ("0", "uniform:20:10", "normal:x:1", "gauss:1:2", ""):
        with pytest.raises(UsageError):
            parse_length(bad, "--input-len")
    assert parse_seconds("500ms", "x") == 0.5 and parse_seconds("2m", "x") == 120 and parse_seconds("3", "x") == 3
    with pytest.raises(UsageError):
        parse_seconds("soon", "x")


def test_parse_slo():
    s = parse_slo("ttft_p99=2s,e2e_p95=500ms,error_rate=1%,goodput_ratio=0.9")
    assert [(x.key, x.limit) for x in s] == [("ttft_p99", 2.0), ("e2e_p95", 0.5), ("error_rate", 0.01),
                                             ("goodput_ratio", 0.9)]
    assert s[3].lower_bound and not s[0].lower_bound
    for bad in ("ttft=2s", "foo_p99=1", "error_rate=2", "ttft_p99"):
        with pytest.raises(UsageError):
            parse_slo(bad)


@pytest.mark.parametrize("kw, msg", [
    ({}, "exactly one"),
    ({"rate": 1, "concurrency": 2}, "exactly one"),
    ({"rate": 1}, "bounded"),
    ({"rate": -1, "duration_s": 1}, "positive"),
    ({"rate": 1, "duration_s": 1, "endpoint": "embeddings"}, "--endpoint"),
    ({"replay": True, "duration_s": 1}, "--requests"),
    ({"rate": 1, "duration_s": 1, "input_len": LengthDist("log")}, "--requests"),
    ({"concurrency": 0, "duration_s": 1}, "at least 1"),
])
def test_config_validation(kw, msg):
    with pytest.raises(UsageError, match=msg):
        BenchConfig(url="http://127.0.0.1:1", **kw).validate()
    with pytest.raises(UsageError, match="--url"):
        BenchConfig(url="ftp://x", rate=1, duration_s=1).validate()


def test_api_key_never_in_public_config_or_repr():
    cfg = BenchConfig(url="http://127.0.0.1:1", rate=1, duration_s=1, api_key="sk-SECRET")
    assert "sk-SECRET" not in repr(cfg)
    assert "sk-SECRET" not in json.dumps(cfg.public()) and cfg.public()["api_key_set"] is True


# --------------------------------------------------------------------------- arrivals
def test_constant_schedule_exact():
    assert list(rate_schedule(4, "constant", end_s=1.0)) == [0.0, 0.25, 0.5, 0.75]
    assert len(list(rate_schedule(4, "constant", max_count=3))) == 3
    with pytest.raises(ValueError):
        list(rate_schedule(4, "constant"))


def test_poisson_and_gamma_rate_and_burstiness():
    for kind, shape in (("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0)):
        xs = list(rate_schedule(100, kind, burstiness=shape, seed=3, max_count=20000))
        gaps = [b - a for a, b in zip(xs, xs[1:])]
        assert statistics.fmean(gaps) == pytest.approx(0.01, rel=0.05)
        cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
        assert cv == pytest.approx(1 / math.sqrt(shape), rel=0.1)  # gamma: CV = 1/sqrt(shape)
    assert list(rate_schedule(5, seed=1, max_count=10)) == list(rate_schedule(5, seed=1, max_count=10))


def test_ramp_rises_linearly_then_holds():
    xs = list(rate_schedule(100, "constant", ramp_s=10, end_s=20))
    first_half = sum(1 for x in xs if x < 5)
    ramp = sum(1 for x in xs if x < 10)
    steady = sum(1 for x in xs if 10 <= x < 20)
    assert ramp == pytest.approx(100 * 10 / 2, abs=2)  # ∫ of a linear ramp to 100/s over 10 s
    assert first_half == pytest.approx(ramp / 4, abs=2)  # quadratic growth
    assert steady == pytest.approx(1000, abs=2)


@settings(max_examples=examples(100), deadline=None)
@given(st.floats(0.1, 1000), st.sampled_from(["constant", "poisson", "gamma"]), st.floats(0.1, 10),
       st.floats(0, 5), st.integers(0, 2**31))
def test_property_schedule_sorted_bounded(rate, kind, shape, ramp, seed):
    xs = list(rate_schedule(rate, kind, shape, ramp, seed, end_s=3.0, max_count=500))
    assert xs == sorted(xs) and all(0 <= x < 3.0 for x in xs) and len(xs) <= 500


def test_replay_schedule():
    assert replay_schedule([100.0, None, 101.0, 103.0], speed=2) == [0.0, 0.0, 0.5, 1.5]
    with pytest.raises(ValueError):
        replay_schedule([None, None])


# --------------------------------------------------------------------------- stats & compare
def test_percentile_matches_numpy_linear():
    xs = sorted([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0])
    assert percentile(xs, 50) == 3.5 and percentile(xs, 0) == 1.0 and percentile(xs, 100) == 9.0
    assert percentile(xs, 90) == pytest.approx(6.9)  # numpy.percentile(xs, 90)
    assert percentile([], 50) is None and percentile([2.0], 99) == 2.0


def test_quantile_change_ci_detects_shift_and_not_noise():
    rng = random.Random(1)
    base = [rng.lognormvariate(0, 0.3) for _ in range(3000)]
    same = [rng.lognormvariate(0, 0.3) for _ in range(3000)]
    worse = [x * 1.3 for x in (rng.lognormvariate(0, 0.3) for _ in range(3000))]
    pt, lo, hi = quantile_change_ci(base, same, 0.5, 0.95)
    assert lo < 0 < hi
    pt, lo, hi = quantile_change_ci(base, worse, 0.5, 0.95)
    assert 0.2 < lo <= pt <= hi < 0.4


def _result(samples, **extra):
    return {"kind": "kvplan.bench", "partial": False, "client_bound": False,
            "samples": {"ttft": samples, "tpot": samples, "e2e": samples}, **extra}


def test_compare_verdicts_and_trust_problems():
    rng = random.Random(2)
    base = [rng.uniform(1, 2) for _ in range(2000)]
    cmp = compare(_result(base), _result([x * 1.5 for x in base]))
    assert cmp.regressed and cmp.exit_code == 1
    assert {r.verdict for r in cmp.rows} == {"worse"}
    ok = compare(_result(base), _result([x * 0.5 for x in base]))
    assert not ok.regressed and ok.exit_code == 0 and {r.verdict for r in ok.rows} == {"better"}
    same = compare(_result(base), _result(base))
    assert {r.verdict for r in same.rows} == {"same"} and same.exit_code == 0
    bad = compare(_result(base), _result(base, partial=True, stop_reason="interrupted"))
    assert bad.exit_code == 1 and "partial" in bad.problems[0]
    empty = compare(_result([]), _result(base))
    assert {r.verdict for r in empty.rows} == {"n/a"}


# --------------------------------------------------------------------------- result building
def _rec(i, sched, sent, first, end, out=10, error=None, warm=False):
    r = Record(i, 0, sched, warm, 10)
    r.sent, r.first_token, r.last_token, r.end = sent, first, end, end
    r.output_tokens, r.prompt_tokens, r.error = out, 5, error
    r.chunk_times = [first + k * (end - first) / max(1, out - 1) for k in range(out)] if first is not None else []
    r.chunks = len(r.chunk_times)
    return r


def test_build_result_counts_failures_lag_and_gates():
    cfg = BenchConfig(url="http://127.0.0.1:1", rate=10, duration_s=1, arrival="constant",
                      slo=parse_slo("ttft_p99=0.05,error_rate=0")).validate()
    recs = [_rec(i, i * 0.1, i * 0.1 + 0.0005, i * 0.1 + 0.02, i * 0.1 + 0.2) for i in range(9)]
    recs.append(_rec(9, 0.9, 0.9005, None, 0.95, out=None, error="http_503"))
    recs.append(_rec(10, -0.1, -0.1, -0.05, 0.0, warm=True))
    res = build_result(cfg, recs, meta={"model": "m"}, server={}, gpu={}, stop_reason="completed", cpu_s=0.1,
                       wall_s=1.0)
    d = res.to_dict()
    assert d["requests"] == {"total": 10, "ok": 9, "failed": 1, "error_rate": 0.1, "warmup_excluded": 1, "resent": 0}
    assert d["errors"] == {"http_503": 1}
    assert d["latency_s"]["ttft"]["p50"] == pytest.approx(0.0195)
    assert d["latency_s"]["tpot"]["p50"] == pytest.approx((0.1995 - 0.0195) / 9)
    assert d["latency_s"]["itl"]["count"] == 9 * 9
    assert d["tokens"]["output_total"] == 90 and d["tokens"]["input_total"] == 45
    assert d["schedule_lag_s"]["p50"] == pytest.approx(0.0005)
    assert not d["client_bound"]
    checks = {c["name"]: c["passed"] for c in d["verdict"]["checks"]}
    assert checks == {"run_complete": True, "not_client_bound": True, "some_requests_ok": True,
                      "ttft_p99": True, "error_rate": False}
    assert res.exit_code == 1
    assert d["goodput"]["requests"] == 9 and d["goodput"]["ratio"] == 0.9


def test_build_result_client_bound_when_lagging():
    cfg = BenchConfig(url="http://127.0.0.1:1", rate=100, duration_s=1, arrival="constant").validate()
    recs = [_rec(i, i * 0.01, i * 0.03, i * 0.03 + 0.01, i * 0.03 + 0.02) for i in range(50)]
    d = build_result(cfg, recs, meta={}, server={}, gpu={}, stop_reason="completed", cpu_s=1, wall_s=1).to_dict()
    assert d["client_bound"] and d["rate"]["achieved_ratio"] == pytest.approx(1 / 3, rel=0.01)
    assert any("schedule lag" in r for r in d["client_bound_reasons"])
    assert not d["verdict"]["passed"]


def test_request_source_is_deterministic_and_sized():
    cfg = BenchConfig(url="http://127.0.0.1:1", rate=1, duration_s=1, input_len=parse_length("uniform:5:9", "x"),
                      output_len=parse_length("7", "x"), seed=5)
    src = RequestSource(cfg, "m", ignore_eos=True)
    a, b = src.get(3), src.get(3)
    assert a == b and a != src.get(4)
    body = json.loads(a.body)
    assert body["max_tokens"] == 7 and body["ignore_eos"] is True and body["stream_options"] == {"include_usage": True}
    assert 5 <= len(body["messages"][0]["content"].split()) <= 9
    comp = RequestSource(BenchConfig(url="http://127.0.0.1:1", rate=1, duration_s=1, endpoint="completions",
                                     stream=False), "m", ignore_eos=False)
    body = json.loads(comp.get(0).body)
    assert "prompt" in body and "ignore_eos" not in body and "stream_options" not in body and body["stream"] is False


# ------------------------------------------------------------ issue 14, finding 12: tails at small n
def _lognormal_runs(seed, n=50, factor=1.0):
    rng = random.Random(seed)
    return ([rng.lognormvariate(0, 0.5) for _ in range(n)], [factor * rng.lognormvariate(0, 0.5) for _ in range(n)])


def test_identical_configurations_at_n_50_never_compare_as_a_regression():
    """100 pairs of identical runs (50 requests each, a wide latency spread): the former bootstrap
    called 10 of them a tail REGRESSION; order-statistic intervals with Bonferroni call none."""
    for seed in range(100):
        a, b = _lognormal_runs(seed)
        cmp = compare(_result(a), _result(b))
        assert not cmp.regressed and cmp.exit_code == 0, (seed, [r.to_dict() for r in cmp.rows if r.verdict == "worse"])
        tails = [r for r in cmp.rows if r.quantile > 0.5]
        assert {r.verdict for r in tails} == {"n/a"} and all("too few samples: 50 < " in r.note for r in tails)
        assert [w.split(" ")[0] for w in cmp.warnings] == ["p95", "p99"]


def test_a_2x_slowdown_at_n_50_is_still_caught():
    caught = sum(compare(_result(a), _result(b)).regressed for a, b in (_lognormal_runs(s, factor=2.0)
                                                                        for s in range(50)))
    assert caught >= 40  # power ~85% per pair at this (wide) spread
    rng = random.Random(3)
    tight = [rng.uniform(1.0, 1.2) for _ in range(50)]
    cmp = compare(_result(tight), _result([2 * x for x in reversed(tight)]))
    assert cmp.regressed and {r.verdict for r in cmp.rows if r.quantile == 0.5} == {"worse"}


def test_order_statistic_interval_is_exact():
    from kvplan.bench.stats import min_count_for_quantile, quantile_ci_ranks

    # n = 50, median, 95%: ranks 18..33 (the textbook table's interval for n = 50).
    assert quantile_ci_ranks(50, 0.5, 0.95) == (18, 33)
    assert quantile_ci_ranks(50, 0.99, 0.95)[1] is None  # no order statistic of 50 bounds a P99 above
    assert min_count_for_quantile(0.99, 0.95) == 368 and min_count_for_quantile(0.5, 0.95) == 6
    # coverage by simulation on uniforms: the true median 0.5 lies inside for ≥ 95% of samples
    rng = random.Random(0)
    inside = 0
    for _ in range(2000):
        xs = sorted(rng.random() for _ in range(50))
        inside += xs[17] <= 0.5 <= xs[32]
    assert inside / 2000 >= 0.94


def test_late_sends_with_an_idle_client_are_host_contention_not_client_bound():
    """Issue 14, finding 13: 2 req/s sent ~0.9 s late. With the client at 3% of a core the host's CPU
    went elsewhere (a vLLM server on the same cores): warned, not FAILED. With the client at 95% of
    a core it is client-bound. The limit is the config's (--client-cpu-limit)."""
    from dataclasses import replace as _replace

    cfg = BenchConfig(url="http://127.0.0.1:1", rate=2, duration_s=10, arrival="constant").validate()
    recs = [_rec(i, i * 0.5, i * 0.5 + 0.9, i * 0.5 + 1.0, i * 0.5 + 1.5) for i in range(20)]
    kw = dict(meta={"model": "m"}, server={}, gpu={}, stop_reason="completed", wall_s=10.0,
              loop_lag=[0.001] * 50 + [0.8] * 5)
    idle = build_result(cfg, recs, cpu_s=0.3, **kw).to_dict()
    assert idle["client_bound"] is False and idle["verdict"]["passed"] is True
    assert idle["client"]["host_contention"] is True and idle["client"]["cpu_share_per_process"] == 0.03
    assert "host contention, not the load generator" in idle["client"]["host_contention_reasons"][0]
    assert idle["client"]["loop_lag_s"]["max"] == 0.8
    busy = build_result(cfg, recs, cpu_s=9.5, **kw).to_dict()
    assert busy["client_bound"] is True and not busy["verdict"]["passed"]
    assert any("client CPU 95% of a core" in r for r in busy["client_bound_reasons"])
    lenient = build_result(_replace(cfg, client_cpu_limit=1.0), recs, cpu_s=9.5, **kw).to_dict()
    assert lenient["client_bound"] is False and lenient["client"]["host_contention"] is True
