"""``simulate`` and ``tune`` judge an SLO by one rule (issue 28): an open-loop run meets it only
when its backlog is judged bounded; a run too short to judge says so and proposes the length that
judges it; a saturated run misses whatever its percentiles say; a burst is judged on its
percentiles alone (no steady state to judge).

The setups are test_tune.py's hand-derived ones: Qwen2.5-0.5B with 105 blocks of KV memory, a fixed
10 ms step, requests of 100 prompt + 50 output tokens (one prefill step and 49 decode steps: 0.5 s).
"""
from __future__ import annotations


from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest
from kvplan.models import load_model
from kvplan.report.sim_common import check_rows, verdict_word
from kvplan.sim import StepTimeProfile, simulate, synthetic_trace
from kvplan.traffic.trace import SimRequest, Trace
from kvplan.slo import parse_slo
from kvplan.traffic.lengthdist import LengthDist
from kvplan.tune.search import TuneSpace, tune

STEP = StepTimeProfile(overhead_s=0.01, per_seq_s=0.0, weights_read_s=0.0, per_kv_token_s=0.0, per_token_s=0.0,
                       per_attn_pair_s=0.0, source="test: 10 ms per step")
BASE = PlanRequest(model=load_model("Qwen/Qwen2.5-0.5B-Instruct"), gpu=find_gpu("H100"), gpu_memory_utilization=0.9,
                   kv_cache_memory_bytes=105 * 196_608, kv_cache_dtype="fp8", max_model_len=2048, max_num_seqs=64)
SLO = parse_slo("ttft_p99=200ms")


def steady(rate: float, n: int, **kw):
    return synthetic_trace(rate, num_requests=n, input_len=LengthDist("fixed", 100),
                           output_len=LengthDist("fixed", 50), arrival="constant", **kw)


def failed(d: dict) -> list[str]:
    return [c["name"] for c in d["verdict"]["checks"] if not c["passed"]]


def test_a_run_too_short_to_judge_is_not_judged_by_simulate_as_by_tune():
    """10 requests at 40 req/s (0.23 s of arrivals) against a 0.5 s E2E: every TTFT is one 10 ms
    step, but the detector cannot judge the backlog. tune fails the row on ``saturation_judged``;
    simulate says the same, and proposes 40 × 5 × 0.5 s = 100 requests, rounded up to 500 (the
    length tune derives for it)."""
    d = simulate(BASE, steady(40, 10), profile=STEP, slo=SLO).to_dict()
    assert d["saturation"]["saturated"] is None
    assert failed(d) == ["saturation_judged"] and d["verdict"]["passed"] is False
    assert d["verdict"]["state"] == "not_judged"
    check = d["verdict"]["checks"][-1]
    assert "--num-requests 500" in check["reason"]
    assert verdict_word(d).startswith("SLO NOT JUDGED")
    assert check_rows(d)[-1][-1] == "NOT JUDGED"
    (row,) = tune(BASE, steady(40, 10), SLO, space=TuneSpace(max_num_seqs=(64,), gpu_memory_utilization=(0.9,),
                                                                  kv_cache_dtype=("fp8",)),
                  profile=STEP, processes=1).rows
    assert [c.name for c in row.checks if not c.passed] == failed(d)


def test_the_proposed_length_judges_the_run():
    d = simulate(BASE, steady(40, 500), profile=STEP, slo=SLO).to_dict()
    assert d["saturation"]["saturated"] is False
    assert d["verdict"] == {"passed": True, "state": "met", "checks": d["verdict"]["checks"]}
    assert failed(d) == [] and verdict_word(d) == "SLO met"


def test_a_saturated_run_misses_its_slo_whatever_its_percentiles_say():
    """120 req/s against at most 64 sequences of 0.5 s each (128 req/s at best, and the KV cache
    holds fewer): the queue grows. A loose TTFT limit passes on the trace's percentiles; the run
    still misses, on ``not_saturated``, as tune's row does."""
    loose = parse_slo("ttft_p99=600s")
    d = simulate(BASE, steady(120, 2000), profile=STEP, slo=loose).to_dict()
    assert d["saturation"]["saturated"] is True
    assert failed(d) == ["not_saturated"] and d["verdict"]["state"] == "missed"
    assert verdict_word(d) == "SLO MISSED"


def test_a_burst_is_judged_on_its_percentiles_alone():
    """vLLM bench's default (--request-rate inf): every request at t = 0 is a finite benchmark with no
    rate to carry; no saturation check is added."""
    burst = Trace(tuple(SimRequest(0.0, 100, 50) for _ in range(20)), source="test: 20 requests at t = 0")
    d = simulate(BASE, burst, profile=STEP, slo=parse_slo("ttft_p99=10s")).to_dict()
    assert d["saturation"]["saturated"] is None
    assert [c["name"] for c in d["verdict"]["checks"]] == ["ttft_p99"]
    assert d["verdict"]["state"] == "met"


def test_no_slo_means_no_verdict():
    d = simulate(BASE, steady(40, 10), profile=STEP).to_dict()
    assert d["verdict"] == {"passed": True, "state": "no_slo", "checks": []}
    assert verdict_word(d) == ""
