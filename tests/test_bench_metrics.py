"""kvplan's Prometheus parser: snapshots, renamed vLLM metrics, deltas, histogram quantiles
(hand-checked and property-tested)."""
from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from kvplan.bench.metrics import (
    Histogram,
    counter_delta,
    delta,
    histogram_delta,
    histogram_quantile,
    parse_metrics,
)

V033 = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 100.0
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 4.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 6.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 6.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 3.5
"""

# vLLM 0.8-0.10 names (before the renames)
V08 = """# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{model_name="m"} 40.0
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{model_name="m"} 10.0
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.05",model_name="m"} 1.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 1.0
vllm:time_per_output_token_seconds_count{model_name="m"} 1.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.02
"""


def test_snapshot_values_labels_and_created_series_skipped():
    s = parse_metrics(V033, t=1.5)
    assert s.t == 1.5 and s.bad_lines == 0
    assert s.get("requests_running") == 3.0
    assert s.get("kv_cache_usage") == 0.25
    assert s.value("vllm:request_success_total") == 10.0
    assert s.value("vllm:request_success_total", finished_reason="length") == 6.0
    assert s.value("vllm:request_success_total", finished_reason="abort") is None
    assert "vllm:generation_tokens_created" not in s.names()
    assert s.types["vllm:time_to_first_token_seconds"] == "histogram"


def test_renamed_metrics_resolve_to_old_names():
    s = parse_metrics(V08)
    assert s.resolve("kv_cache_usage") == "vllm:gpu_cache_usage_perc" and s.get("kv_cache_usage") == 0.5
    assert s.resolve("prefix_cache_queries") == "vllm:gpu_prefix_cache_queries_total"
    assert s.get("prefix_cache_hits") == 10.0
    assert s.resolve("itl") == "vllm:time_per_output_token_seconds"
    assert s.get_histogram("itl").count == 1.0
    assert "ttft" in s.absent() and "kv_cache_usage" not in s.absent()
    new = parse_metrics(V033)
    assert new.resolve("kv_cache_usage") == "vllm:kv_cache_usage_perc"


def test_histogram_and_quantile_by_hand():
    h = parse_metrics(V033).get_histogram("ttft")
    assert h.buckets == ((0.1, 2.0), (0.5, 6.0), (1.0, 10.0), (math.inf, 10.0))
    assert h.count == 10 and h.sum == 3.5 and h.mean() == 0.35
    # rank 5 lies in (0.1, 0.5]: 0.1 + 0.4 * (5 - 2) / (6 - 2) = 0.4
    assert h.quantile(0.5) == pytest.approx(0.4)
    # rank 9.9 lies in (0.5, 1.0]: 0.5 + 0.5 * (9.9 - 6) / 4
    assert h.quantile(0.99) == pytest.approx(0.5 + 0.5 * 3.9 / 4)
    assert h.bucket_bounds(0.3) == (0.1, 0.5)
    # everything in +Inf: the highest finite bound (Prometheus' rule)
    assert histogram_quantile(0.5, ((1.0, 0.0), (math.inf, 5.0))) == 1.0
    assert histogram_quantile(0.5, ((1.0, 0.0), (math.inf, 0.0))) is None
    with pytest.raises(ValueError):
        histogram_quantile(1.5, h.buckets)


def test_delta_counters_histograms_and_reset():
    a = parse_metrics(V033)
    b = parse_metrics(V033.replace("} 100.0", "} 160.0").replace('le="1.0",model_name="m"} 10.0',
                                                                  'le="1.0",model_name="m"} 13.0')
                      .replace('le="+Inf",model_name="m"} 10.0', 'le="+Inf",model_name="m"} 13.0')
                      .replace("_count{engine=\"0\",model_name=\"m\"} 10.0", "_count{engine=\"0\",model_name=\"m\"} 13.0")
                      .replace("_sum{engine=\"0\",model_name=\"m\"} 3.5", "_sum{engine=\"0\",model_name=\"m\"} 5.0"))
    d = delta(a, b)
    assert d["vllm:generation_tokens_total"] == 60.0
    assert d["vllm:request_success_total"] == 0.0
    assert d["vllm:time_to_first_token_seconds_count"] == 3.0
    assert d["vllm:time_to_first_token_seconds_bucket|1.0"] == 3.0
    assert d["vllm:time_to_first_token_seconds_bucket|0.1"] == 0.0
    assert "vllm:num_requests_running" not in d  # gauges are not deltas
    hd = histogram_delta(a.get_histogram("ttft"), b.get_histogram("ttft"))
    assert hd.count == 3 and hd.sum == pytest.approx(1.5)
    assert hd.quantile(0.5) == pytest.approx(0.5 + 0.5 * 1.5 / 3)  # all 3 in (0.5, 1.0]
    # counter reset (server restarted): the increase is the new value
    assert counter_delta(100.0, 7.0) == 7.0
    assert counter_delta(None, 7.0) == 7.0 and counter_delta(3.0, None) is None
    assert histogram_delta(b.get_histogram("ttft"), a.get_histogram("ttft")).count == 10  # reset


def test_garbage_lines_are_counted_not_fatal():
    text = V033 + "this is not a metric\nvllm:x{unterminated 1\n"
    s = parse_metrics(text)
    assert s.bad_lines == 2
    assert s.get("generation_tokens") == 100.0
    assert s.get_histogram("ttft").count == 10


def test_prefix_filter_keeps_only_wanted_families():
    s = parse_metrics(V033, prefixes=("vllm:kv_cache_usage_perc",))
    assert s.names() == {"vllm:kv_cache_usage_perc"}


def test_empty_and_non_prometheus_text():
    assert parse_metrics("").series == {}
    assert parse_metrics("<html>not metrics</html>").series == {}


# --------------------------------------------------------------------------- properties
_name = st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True).map(lambda s: "vllm:" + s)
_val = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)


@st.composite
def _exposition(draw):
    counters = draw(st.dictionaries(_name, _val, max_size=5))
    hists = draw(st.dictionaries(_name, st.lists(st.integers(0, 1000), min_size=1, max_size=6), max_size=3))
    lines, expect_c, expect_h = [], {}, {}
    for n, v in counters.items():
        if n in hists:
            continue
        lines += [f"# TYPE {n} counter", f'{n}_total{{model_name="m"}} {v!r}']
        expect_c[n + "_total"] = v
    for n, incs in hists.items():
        les = [0.01 * 2 ** k for k in range(len(incs))]
        acc, buckets = 0, []
        lines.append(f"# TYPE {n} histogram")
        for le, inc in zip(les, incs):
            acc += inc
            buckets.append((le, float(acc)))
            lines.append(f'{n}_bucket{{le="{le!r}",model_name="m"}} {float(acc)}')
        lines += [f'{n}_bucket{{le="+Inf",model_name="m"}} {float(acc)}', f'{n}_count{{model_name="m"}} {float(acc)}',
                  f'{n}_sum{{model_name="m"}} 1.0']
        expect_h[n] = tuple(buckets) + ((math.inf, float(acc)),)
    return "\n".join(lines) + "\n", expect_c, expect_h


@settings(max_examples=examples(150), deadline=None)
@given(_exposition())
def test_property_parse_recovers_every_value(case):
    text, counters, hists = case
    s = parse_metrics(text)
    assert s.bad_lines == 0
    for name, v in counters.items():
        assert s.value(name) == v
    for name, buckets in hists.items():
        h = s.histogram(name)
        assert h.buckets == buckets and h.count == buckets[-1][1]
    # a snapshot minus itself is all zeros
    assert all(v == 0 for v in delta(s, s).values())


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=10), st.floats(0, 1))
@example([3], 1.0)  # 0.1 * 3 / 3 = 0.10000000000000002 before the clamp
def test_property_quantile_lies_in_its_bucket_and_is_monotone(incs, q):
    les = [0.1 * (k + 1) for k in range(len(incs))]
    acc, buckets = 0, []
    for le, inc in zip(les, incs):
        acc += inc
        buckets.append((le, float(acc)))
    buckets.append((math.inf, float(acc)))
    v = histogram_quantile(q, tuple(buckets))
    if acc == 0:
        assert v is None
        return
    assert 0.0 <= v <= les[-1]
    assert histogram_quantile(min(1.0, q + 0.1), tuple(buckets)) >= v - 1e-12
    rank = q * acc
    lo, hi = Histogram(tuple(buckets), 0, acc).bucket_bounds(v)
    below = dict(buckets).get(lo, 0.0) if lo else 0.0
    assert below <= rank + 1e-9 or v == lo


@settings(max_examples=examples(300), deadline=None)
@given(st.text(max_size=400))
def test_property_never_raises_on_arbitrary_text(text):
    s = parse_metrics(text)
    assert s.bad_lines >= 0
    for (name, _labels), v in s.series.items():
        assert isinstance(name, str) and not math.isnan(v)
