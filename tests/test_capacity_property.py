"""Capacity cannot be fooled (kvplan.sim.capacity): for any configuration, the capacity
``--find-saturation`` reports is never above what the same simulation completes at overload, and
two trace lengths that both judge agree within the noise the answer states."""
from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from hypothesis_profiles import examples
from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest
from kvplan.models import load_model
from kvplan.sim import simulate, synthetic_trace
from kvplan.sim.capacity import MIN_REQUESTS, find_capacity
from kvplan.sim.saturation import CEILING_TOLERANCE
from kvplan.sim.steptime import StepTimeProfile
from kvplan.slo import parse_slo
from kvplan.traffic.lengthdist import parse_length

# a small model and a cheap step clock (4-6 ms steps): a probe is a few thousand steps
PROFILE = StepTimeProfile(overhead_s=0.004, per_seq_s=0.0002, weights_read_s=0.002, per_kv_token_s=1e-8,
                          per_token_s=2e-5, per_attn_pair_s=0.0)


def _setup(max_num_seqs, prompt, output, slo):
    req = PlanRequest(model=load_model("qwen2.5-0.5b"), gpu=find_gpu("H100"), max_model_len=2048,
                      max_num_seqs=max_num_seqs)

    def make(rate, n=None):
        return synthetic_trace(rate, num_requests=n or 500, input_len=parse_length(f"uniform:{prompt[0]},{prompt[1]}", "x"),
                               output_len=parse_length(f"uniform:{output[0]},{output[1]}", "x"), seed=0)
    return req, make, parse_slo(slo) if slo else ()


def _overload_completion_rate(req, make, rate):
    """The same simulation at ``rate`` (overload): requests completed per second while the queue is
    full, between the first and last quarter of the completions. On the same requests the capacity's
    ceiling draws on (the traffic's first MIN_REQUESTS): another sample of the same distribution
    differs by its mean's sampling error (outputs uniform in 4-71 tokens: 26.2 req/s over 1,500
    requests, 27.1 over these 1,000, whose burst ceiling is 27.1)."""
    res = simulate(req, make(rate, MIN_REQUESTS), profile=PROFILE, per_request=True)
    ends = sorted(r["end"] for r in res.per_request if r["status"] == "completed")
    lo, hi = len(ends) // 4, 3 * len(ends) // 4
    return (hi - lo) / (ends[hi] - ends[lo])


configs = st.tuples(st.sampled_from([8, 16, 48]), st.tuples(st.integers(50, 200), st.integers(200, 600)),
                    st.tuples(st.integers(4, 16), st.integers(16, 96)),
                    st.sampled_from([None, "ttft_p99=150ms", "ttft_p99=50ms,tpot_p99=30ms"]))


@settings(max_examples=examples(6))
@given(configs)
@example((16, (100, 400), (8, 64), None))
@example((48, (100, 400), (8, 64), "ttft_p99=150ms"))
# a p99 SLO over 500 vs 1,000 requests: 43.9 vs 35.0 req/s (the first 500 arrivals hold fewer
# bursts); the stated noise (batch means of the TTFT p99, ±36 %) covers it, 3 / sqrt(arrivals)
# alone (±19 %) did not
@example((8, (67, 473), (4, 16), "ttft_p99=50ms,tpot_p99=30ms"))
# wide output lengths at 8 sequences: a ceiling burst of the first 200 requests came out 4 % above
# what the traffic completes at overload (the ceiling now draws on 1,000)
@example((8, (50, 200), (4, 51), None))
@example((8, (50, 200), (4, 71), None))
def test_capacity_is_below_the_overload_ceiling_and_stable_across_trace_lengths(cfg):
    max_num_seqs, prompt, output, slo = cfg
    req, make, slos = _setup(max_num_seqs, prompt, output, slo)
    short = find_capacity(req, make, slo=slos, profile=PROFILE, min_requests=500, max_requests=2000)
    long = find_capacity(req, make, slo=slos, profile=PROFILE, min_requests=1000, max_requests=4000)
    ceiling = _overload_completion_rate(req, make, 3 * short["ceiling_rps"])
    for cap in (short, long):
        if cap["max_rate"] is not None:
            assert cap["max_rate"] <= ceiling * (1 + CEILING_TOLERANCE), (cap["max_rate"], ceiling)
    if short["judged"] and long["judged"] and short["max_rate"] and long["max_rate"]:
        noise = max(short["noise"], long["noise"])
        assert abs(short["max_rate"] - long["max_rate"]) <= noise * max(short["max_rate"], long["max_rate"])
