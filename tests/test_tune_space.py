"""kvplan tune's pure parts: the search space and its pruning by the memory plan, the Pareto front
(hypothesis), SLO checks and ranking, the execution backends' ordering, the CLI's list flags."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from kvplan.errors import UsageError
from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest
from kvplan.models import load_model
from kvplan.tune.execute import Backend, _chunks, _uninterleave, choose_backend, run_tasks
from kvplan.tune.rank import closeness, pareto_front, rank_key
from kvplan.slo import Check, count_good, goodput_limits, judge
from kvplan.quantiles import percentile
from kvplan.tune.share import ShareOutcome, combine_shares
from kvplan.tune.space import (BELOW_WORKLOAD, FP8_UNSUPPORTED, TuneSpace, combinations, expand,
                                   split_round_robin, workload_floor)
from kvplan.slo import Slo, parse_slo


class _Req:
    def __init__(self, arrival_s, prompt_tokens, output_tokens):
        self.arrival_s, self.prompt_tokens, self.output_tokens = arrival_s, prompt_tokens, output_tokens


class _Trace:
    """A stand-in with the Trace fields the space needs (arrivals and lengths only)."""

    def __init__(self, lengths, source="test"):
        self.requests = tuple(_Req(i * 0.1, p, o) for i, (p, o) in enumerate(lengths))
        self.source = source


LLAMA70 = load_model("meta-llama/Llama-2-70b-chat-hf")


def _base(**kw) -> PlanRequest:
    return PlanRequest(model=LLAMA70, gpu=find_gpu("A100-80GB"), tensor_parallel_size=4, **kw)


# ---- the workload floor of max_model_len -------------------------------------------------------

def test_floor_is_the_largest_prompt_plus_output_or_its_percentile():
    lengths = [(1000, 500)] * 999 + [(3000, 900)]
    t = _Trace(lengths)
    assert workload_floor(t, None) == 3900
    assert workload_floor(t, 100) == 3900
    assert workload_floor(t, 99.9) == 1500  # nearest rank: 999 of 1,000 requests hold ≤ 1,500 tokens


def test_listed_max_model_len_below_the_workload_is_dropped_and_counted():
    t = _Trace([(1000, 512)] * 10)
    space = TuneSpace(max_num_seqs=(64,), max_model_len=(1024, 2048, None), gpu_memory_utilization=(0.9,),
                      kv_cache_dtype=("auto",))
    cands, pruned, floor = expand(_base(), space, t)
    assert floor == 1512
    # None (the default) is the need rounded up to 1,024: 2,048, the same as the listed one (one run).
    assert sorted(c.plan.flags.max_model_len for c in cands) == [2048]
    assert dict(pruned.by_reason) == {BELOW_WORKLOAD: 1}


# ---- pruning by the plan ---------------------------------------------------------------------

def test_configs_that_cannot_start_are_pruned_with_vllms_error_kind():
    t = _Trace([(1000, 512)] * 10)
    # 8 GPUs: at TP 1 the 138 GB of fp16 weights exceed the 79 GiB GPU (vLLM's CUDA OOM while
    # loading them); from TP 2 (69 GB per GPU) on, some KV memory is left. 64 heads divide by every power of two.
    space = TuneSpace(max_num_seqs=(128,), gpu_memory_utilization=(0.9,), kv_cache_dtype=("auto",), gpus=(8,))
    cands, pruned, _ = expand(_base(), space, t)
    assert sorted((c.request.tensor_parallel_size, c.data_parallel_size) for c in cands) == [(2, 4), (4, 2), (8, 1)]
    assert dict(pruned.by_reason) == {"weights_oom": 1}
    assert "CUDA out of memory while loading the model weights" in dict(pruned.examples)["weights_oom"]
    assert all(c.gpus == 8 for c in cands)


def test_tp_that_does_not_divide_the_heads_is_pruned_as_tp_heads():
    t = _Trace([(100, 10)])
    space = TuneSpace(max_num_seqs=(64,), gpu_memory_utilization=(0.9,), kv_cache_dtype=("auto",),
                      gpus=(6,), tensor_parallel=(3, 6))
    cands, pruned, _ = expand(_base(), space, t)
    assert cands == [] and dict(pruned.by_reason) == {"tp_heads": 2}


def test_fp8_follows_the_plans_rule_for_each_gpu_and_version():
    # vLLM 0.33 starts an fp8 KV cache on an A100 too (Triton/FlashInfer convert it in the kernel): the
    # plan's rule (VllmSemantics.fp8_kv_cache), not "needs sm 8.9", decides what tune tries.
    t = _Trace([(1000, 512)])
    space = TuneSpace(max_num_seqs=(64,), gpu_memory_utilization=(0.9,), kv_cache_dtype=("auto", "fp8"),
                      gpu=("A100-80GB", "H100"))
    cands, pruned, _ = expand(_base(), space, t)
    got = sorted((c.plan.flags.gpu, c.plan.flags.kv_cache_dtype) for c in cands)
    assert got == [("A100-SXM4-80GB", "float16"), ("A100-SXM4-80GB", "fp8"), ("H100-SXM5-80GB", "float16"),
                   ("H100-SXM5-80GB", "fp8")]
    assert pruned.total == 0
    # vLLM 0.10 with V1 forced: its V1 took fp8 KV only on Hopper, so the A100 fp8 configuration is refused
    cands, pruned, _ = expand(_base(vllm_version="0.10", engine="v1"), space, t)
    assert ("A100-SXM4-80GB", "fp8") not in {(c.plan.flags.gpu, c.plan.flags.kv_cache_dtype) for c in cands}
    assert dict(pruned.by_reason) == {FP8_UNSUPPORTED: 1}


def test_flags_resolving_to_the_same_vllm_config_are_simulated_once():
    t = _Trace([(1000, 512)])
    # vLLM 0.33's default max_num_seqs on an A100 is 256 (V1 serve): None and 256 are one configuration.
    space = TuneSpace(max_num_seqs=(None, 256), gpu_memory_utilization=(0.9,), kv_cache_dtype=("auto",))
    cands, pruned, _ = expand(_base(), space, t)
    assert len(cands) == 1 and pruned.duplicates == 1 and cands[0].plan.flags.max_num_seqs == 256


def test_without_gpus_the_listed_tps_keep_the_base_dp():
    combos = list(combinations(_base(data_parallel_size=2), TuneSpace(
        max_num_seqs=(64,), gpu_memory_utilization=(0.9,), kv_cache_dtype=("auto",), tensor_parallel=(4, 8)), 100))
    assert [(r.tensor_parallel_size, dp) for r, dp, _ in combos] == [(4, 2), (8, 2)]
    assert all(r.data_parallel_size == 2 for r, _, _ in combos)


def test_measured_kv_memory_only_kept_where_it_was_measured():
    base = _base(gpu_memory_utilization=0.9, kv_cache_memory_bytes=30 << 30)
    combos = list(combinations(base, TuneSpace(max_num_seqs=(64,), gpu_memory_utilization=(0.9, 0.95),
                                               kv_cache_dtype=("auto",)), 100))
    kept = {r.gpu_memory_utilization: r.kv_cache_memory_bytes for r, _, _ in combos}
    assert kept == {0.9: 30 << 30, 0.95: None}


@pytest.mark.parametrize("kw,flag", [
    ({"max_num_seqs": (0,)}, "--max-num-seqs"), ({"max_num_seqs": ()}, "--max-num-seqs"),
    ({"gpu_memory_utilization": (1.5,)}, "--gpu-memory-utilization"), ({"kv_cache_dtype": ("int3",)}, "--kv-cache-dtype"),
    ({"gpus": (0,)}, "--gpus"), ({"tensor_parallel": (-2,)}, "--tensor-parallel-size"), ({"coverage_pct": 0.0}, "--coverage"),
])
def test_bad_space_values_name_the_flag(kw, flag):
    with pytest.raises(UsageError, match=flag):
        TuneSpace(**kw).validate()


def test_round_robin_split_covers_every_request_once():
    t = _Trace([(i + 1, 1) for i in range(10)])
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class T:
        requests: tuple
        source: str

    parts = split_round_robin(T(t.requests, "x"), 3)
    assert [len(p.requests) for p in parts] == [4, 3, 3]
    assert sorted(r.prompt_tokens for p in parts for r in p.requests) == list(range(1, 11))
    assert [r.prompt_tokens for r in parts[1].requests] == [2, 5, 8]


# ---- Pareto front ----------------------------------------------------------------------------

def _dominated(p, q) -> bool:
    """q dominates p: throughput ≥, latency ≤, one strictly."""
    return q[0] >= p[0] and q[1] <= p[1] and (q[0] > p[0] or q[1] < p[1])


finite = st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.one_of(finite, st.sampled_from([0.0, 1.0, 2.0])),
                          st.one_of(finite, st.sampled_from([0.0, 1.0, 2.0]))), max_size=30))
def test_pareto_front_is_exactly_the_non_dominated_points(points):
    front = set(pareto_front(points))
    for i, p in enumerate(points):
        dominated = any(_dominated(p, q) for j, q in enumerate(points) if j != i)
        assert (i in front) == (not dominated), (i, p, points)


def test_pareto_front_skips_nan_latency():
    assert pareto_front([(10.0, math.nan), (5.0, 1.0)]) == [1]


# ---- SLO checks, goodput, ranking ---------------------------------------------------------------

def test_slo_checks_and_closeness():
    slos = parse_slo("ttft_p99=2s,tpot_p99=100ms,error_rate=0.01,goodput_ratio=0.9")
    lat = {"ttft": {"p99": 3.0}, "tpot": {"p99": 0.05}}
    checks = judge(slos, latency=lat, error_rate=0.0, goodput_ratio=0.95)
    assert [c.passed for c in checks] == [False, True, True, True]
    assert closeness(checks) == pytest.approx(1.5)
    assert Check("goodput_ratio", False, 0.45, 0.9).ratio == pytest.approx(2.0)
    assert Check("error_rate", True, 0.0, 0.0).ratio == 1.0
    assert judge(slos[:1], latency={}, error_rate=None, goodput_ratio=None)[0].passed is False


def test_goodput_counts_each_request_against_the_tightest_limit():
    limits = goodput_limits([Slo("ttft_p99", 2.0), Slo("ttft_p50", 1.0), Slo("e2e_p99", 10.0), Slo("itl_p99", 0.01)])
    assert limits == {"ttft": 1.0, "e2e": 10.0}
    assert count_good(limits, zip([0.5, 1.5, 0.5, 0.9], [0.01, 0.01, None, 5.0], [5, 5, 11, 5])) == 2
    assert count_good({"tpot": 0.1}, [(0.5, 0.5, 1)]) == 0


def test_rank_key_orders_meeting_configs_by_objective_then_closest_miss():
    rows = {  # name: (meets, goodput/GPU, latency, gpus, miss, index)
        "a8": (True, 5.0, 1.0, 8, 0.5, 0), "b4": (True, 9.0, 1.5, 4, 0.9, 1), "c4": (True, 9.0, 1.2, 4, 0.8, 2),
        "miss_small": (False, 20.0, 3.0, 2, 1.1, 3), "miss_big": (False, 30.0, 9.0, 1, 4.0, 4),
    }
    by = lambda obj: sorted(rows, key=lambda n: rank_key(obj, *rows[n]))  # noqa: E731
    assert by("goodput_per_gpu") == ["c4", "b4", "a8", "miss_small", "miss_big"]
    rows["a2"] = (True, 4.0, 0.5, 2, 0.2, 5)
    assert by("min_gpus")[:4] == ["a2", "c4", "b4", "a8"]
    assert by("goodput_per_gpu")[:3] == ["c4", "b4", "a8"]


# ---- combining replicas ----------------------------------------------------------------------

def _share(ttft, e2e, start, end, itl_p99):
    return ShareOutcome(total=len(ttft) + 1, completed=len(ttft), rejected=1, failed=0, output_tokens=10 * len(ttft),
                        start_s=start, end_s=end, ttft=tuple(ttft), tpot=tuple([0.01] * len(ttft)), e2e=tuple(e2e),
                        itl={"p99": itl_p99, "p50": itl_p99 / 2}, preemptions=2)


def test_fleet_percentiles_are_over_every_replicas_requests():
    a = _share([0.1, 0.2], [1.0, 2.0], 0.0, 10.0, 0.05)
    b = _share([0.3, 0.4], [3.0, 4.0], 0.1, 12.0, 0.07)
    f = combine_shares([a, b])
    assert (f.total, f.completed, f.rejected, f.output_tokens, f.preemptions) == (6, 4, 2, 40, 4)
    assert f.window_s == pytest.approx(12.0)
    assert f.latency["ttft"]["p50"] == pytest.approx(percentile([0.1, 0.2, 0.3, 0.4], 50))
    assert f.latency["e2e"]["max"] == 4.0
    assert f.latency["itl"]["p99"] == 0.07  # the worst replica's: an upper bound
    assert combine_shares([a]).latency["itl"] == a.itl


# ---- backends ----------------------------------------------------------------------------------

def _square_plus(task, shared):
    return task * task + shared["offset"]


def test_chunks_round_trip_in_task_order():
    tasks = list(range(23))
    chunks, n = _chunks(tasks, 2)
    assert n == 8 and sorted(x for c in chunks for x in c) == tasks
    assert _uninterleave([[t for t in c] for c in chunks], n, len(tasks)) == tasks


def test_process_pool_and_serial_give_the_same_ordered_results():
    tasks = list(range(37))
    serial = run_tasks(_square_plus, tasks, {"offset": 3}, Backend("serial", 1))
    pooled = run_tasks(_square_plus, tasks, {"offset": 3}, Backend("processes", 2))
    assert serial == pooled == [t * t + 3 for t in tasks]


def test_backend_choice():
    assert choose_backend(1, None, 10).kind == "serial"
    assert choose_backend(4, None, 1) == Backend("serial", 1)
    assert choose_backend(2, None, 10) == Backend("processes", 2)
    assert choose_backend(None, "127.0.0.1:1", 10).kind == "ray"
    with pytest.raises(UsageError, match="--processes"):
        choose_backend(0, None, 10)
