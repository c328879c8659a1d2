"""The GPU step model as a list of cost terms (kvplan.sim.stepmodel, kvplan.sim.costterms): each
term computes its own seconds, the model's breakdown is the same list as its time, and a new term
plugs in without touching the others."""
from dataclasses import dataclass, replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.models import load_model
from kvplan.sim import costterms as C
from kvplan.sim import default_profile, simulate, synthetic_trace
from kvplan.sim.stepmodel import CAPTURE_SIZES, CostTerm, StepFeatures, StepModel, pad_to_capture
from kvplan.traffic.lengthdist import parse_length


def _model(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100", tp=1, async_scheduling=True, **kw) -> StepModel:
    req = PlanRequest(model=load_model(model), gpu=find_gpu(gpu), tensor_parallel_size=tp, max_model_len=4096, **kw)
    return default_profile(req, plan(req, what_ifs=False), async_scheduling=async_scheduling)


MODELS = {
    "dense": _model(),
    "dense sync": _model(async_scheduling=False),
    "moe + sliding window": _model("openai/gpt-oss-20b"),
    "tp over the network": _model("Qwen/Qwen2.5-7B-Instruct", "A100-80GB", tp=2, gpus_per_node=1),
    "eager, pp": _model("meta-llama/Llama-3.1-8B-Instruct", "A100-80GB", tp=2, pipeline_parallel_size=2,
                        enforce_eager=True),
    "linear attention": _model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8", "H200"),
}


@settings(max_examples=examples(30), deadline=None)
@given(name=st.sampled_from(sorted(MODELS)), tokens=st.integers(1, 9000), seqs=st.integers(1, 512),
       kv=st.integers(0, 3_000_000), pairs=st.sampled_from([0.0, 1.0, 2e6]))
@example(name="dense", tokens=600, seqs=1, kv=600, pairs=180_000.0)  # above the largest capture size
@example(name="eager, pp", tokens=3, seqs=3, kv=3000, pairs=0.0)
def test_the_breakdown_is_the_same_list_as_the_time(name, tokens, seqs, kv, pairs):
    m = MODELS[name]
    seqs = min(seqs, tokens)
    f = StepFeatures(tokens, seqs, kv, pairs, prefill_tokens=tokens - seqs + 1 if pairs else 0,
                     prefill_seqs=1 if pairs else 0)
    b = m.breakdown(f)
    assert b["step_s"] == pytest.approx(m.step_time(f), rel=1e-9)
    assert b["gpu_s"] == pytest.approx(sum(b["gpu"].values()), rel=1e-12)
    assert all(v >= 0 for v in b["gpu"].values()) and all(v >= 0 for v in b["cpu"].values())
    if m.async_overlap:
        assert b["step_s"] == pytest.approx(max(b["gpu_s"], b["cpu_s"]), rel=1e-12)
    else:
        assert b["step_s"] == pytest.approx(b["gpu_s"] + b["cpu_s"], rel=1e-12)


def test_each_term_computes_its_own_seconds():
    sampler = C.Sampler(name="s", fixed_s=0.5e-3, seq_s=2e-6)
    assert sampler.per_seq(100) == pytest.approx(2e-4) and sampler.fixed_s == 0.5e-3
    core = C.EngineCore(name="cpu", fixed_s=1e-3, seq_s=1e-5)
    assert core.resource == "cpu" and core.per_seq(10) == pytest.approx(1e-4)
    attn = C.Attention(name="a", token_head_s=1e-9, heads=32, seq_s=1e-6, kv_token_s=1e-10)
    assert attn.per_token(100) == pytest.approx(100 * 32 * 1e-9) and attn.per_seq(4) == pytest.approx(4e-6)
    elem = C.Elementwise(name="e", bytes_per_token=1e6, bandwidth=1e12)
    assert elem.per_token(1000) == pytest.approx(1e-3)
    ar = C.AllReduce(name="ar", layers=10, hidden=4096, latency=lambda nbytes: 1e-6 + nbytes * 1e-12)
    assert ar.padded(8) == pytest.approx(2 * 10 * (1e-6 + 8 * 4096 * 2 * 1e-12))
    lm = C.LMHead(name="lm", vocab_per_rank=1000, hidden=10, pad=pad_to_capture,
                  gemm_time=lambda m, n, k, kind: m * n * k * 1e-12)
    assert lm.per_seq(0) == 0.0 and lm.per_seq(3) == pytest.approx(4 * 1000 * 10 * 1e-12)  # 3 rows run as 4
    dense = C.DenseLinears(name="d", groups=((2, ((10.0, 5, "bfloat16"), (20.0, 5, "fp8"))),),
                           gemm_time=lambda m, n, k, kind: m * n * k * (1.0 if kind == "bfloat16" else 0.5))
    assert dense.padded(1) == 2 * (10 * 5 + 20 * 5 * 0.5)
    moe = C.MoEExperts(name="m", groups=((3, (8, 2, 100.0, "bfloat16", 2)),), moe_time=lambda m, e, k, i, kind, up: m)
    assert moe.padded(7) == 21


def test_padded_parts_run_at_the_cuda_graph_size_and_never_get_cheaper_with_more_tokens():
    m = MODELS["dense"]
    assert pad_to_capture(9) == 16 and pad_to_capture(513) == 513 and CAPTURE_SIZES[-1] == 512
    assert m.padded_envelope(9) == m.padded_envelope(16)
    values = [m.padded_envelope(x) for x in range(1, 2000, 7)]
    assert all(b >= a for a, b in zip(values, values[1:]))


def test_a_first_step_of_131072_batched_tokens_fills_the_envelope_without_recursing():
    """--max-num-batched-tokens 131072 (ROCm's offline throughput runs): the first step above the
    capture sizes is 2,040 grid points up, more frames than Python allows a recursive fill (one per
    point). Filled in a loop, it equals the envelope filled from below."""
    import sys

    first = _model()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # well under the 2,040 points: a recursive fill fails at once
    try:
        top = first.padded_envelope(131072)
    finally:
        sys.setrecursionlimit(limit)
    from_below = _model()
    for x in range(512, 131073, 64):
        from_below.padded_envelope(x)
    assert top == from_below.padded_envelope(131072) > first.padded_envelope(600)


@dataclass(frozen=True, kw_only=True)
class _LongestContext(CostTerm):
    """A test term that reads a per-sequence feature: 1 us per 1,000 tokens of the longest context."""

    needs: tuple = ("max_context",)
    HAS_GENERAL = True

    def general(self, f: StepFeatures) -> float:
        return f.max_context * 1e-9


def test_a_new_term_plugs_in_and_the_scheduler_fills_the_features_it_needs():
    # no API server in front (its hand-offs would follow the steps' ends and change the schedule)
    base = replace(MODELS["dense sync"], api_request_s=0.0, api_prompt_token_s=0.0, api_chunk_s=0.0, _compiled={})
    extended = replace(base, terms=base.terms + (_LongestContext(name="longest context"),), _compiled={})
    f = StepFeatures(8, 8, 8000, 0.0, max_context=5000)
    assert extended.step_time(f) == pytest.approx(base.step_time(f) + 5e-6, rel=1e-12)
    assert extended.breakdown(f)["gpu"]["longest context"] == pytest.approx(5e-6)
    assert extended.needs == ("max_context",)
    req = PlanRequest(model=load_model("meta-llama/Llama-3.1-8B-Instruct"), gpu=find_gpu("H100"), max_model_len=4096)
    tr = synthetic_trace(5, num_requests=20, input_len=parse_length("3000", "x"), output_len=parse_length("20", "x"))
    slow = simulate(req, tr, profile=extended, async_scheduling=False).to_dict()
    fast = simulate(req, tr, profile=base, async_scheduling=False).to_dict()
    # every step pays for its longest context (about 3,000-3,020 tokens): about 3 us per step
    extra = slow["engine"]["busy_s"] - fast["engine"]["busy_s"]
    assert extra == pytest.approx(slow["engine"]["steps"] * 3.01e-6, rel=0.05)


def test_a_simulate_result_shows_the_breakdown_of_each_phases_median_step():
    req = PlanRequest(model=load_model("meta-llama/Llama-3.1-8B-Instruct"), gpu=find_gpu("H100"), max_model_len=4096)
    tr = synthetic_trace(10, num_requests=100, input_len=parse_length("1000", "x"), output_len=parse_length("100", "x"))
    d = simulate(req, tr).to_dict()
    med = d["engine"]["median_step"]
    assert set(med) == {"prefill", "decode"}
    assert med["prefill"]["steps"] + med["decode"]["steps"] == d["engine"]["steps"]
    for phase in med.values():
        b = phase["breakdown_s"]
        assert b["gpu_s"] == pytest.approx(phase["duration_s"], rel=1e-6)  # async: the GPU is the longer
        assert "attention" in b["gpu"] and "engine core (CPU)" in b["cpu"]
    assert med["prefill"]["features"]["attn_pairs"] > 0 and med["decode"]["features"]["prefill_tokens"] == 0
    assert [t["name"] for t in d["profile"]["terms"]][0] == "linear layers (GEMM)"


_TP_MODELS = ("openai/gpt-oss-120b", "openai/gpt-oss-20b", "zai-org/GLM-4.5-Air", "Qwen/Qwen3-30B-A3B",
              "meta-llama/Llama-3.1-70B-Instruct", "Qwen/Qwen3-14B-AWQ", "Qwen/Qwen3-32B-FP8",
              "deepseek-ai/DeepSeek-V2-Lite", "mistralai/Mixtral-8x7B-Instruct-v0.1")
_TP_PROFILES: dict = {}


def _per_rank_model(model: str, gpu: str, tp: int):
    key = (model, gpu, tp)
    if key not in _TP_PROFILES:
        req = PlanRequest(model=load_model(model), gpu=find_gpu(gpu), tensor_parallel_size=tp, max_model_len=2048,
                          gpu_memory_utilization=0.95)
        pr = plan(req, what_ifs=False)
        _TP_PROFILES[key] = default_profile(req, pr) if pr.startup.ok else None
    return _TP_PROFILES[key]


@settings(max_examples=examples(25), deadline=None)
@given(model=st.sampled_from(_TP_MODELS), gpu=st.sampled_from(["H100", "A100-80GB", "H200", "B200", "L40S"]),
       tokens=st.sampled_from([1, 8, 64, 256, 600, 2048, 8192]), seqs=st.integers(1, 256),
       prefill=st.booleans())
@example(model="openai/gpt-oss-120b", gpu="H100", tokens=256, seqs=256, prefill=False)  # the MXFP4 curve at TP 1 only
@example(model="Qwen/Qwen3-30B-A3B", gpu="L40S", tokens=1, seqs=1, prefill=False)  # the bf16 curve at TP 1 only
@example(model="Qwen/Qwen3-32B-FP8", gpu="B200", tokens=64, seqs=1, prefill=False)  # an all-reduce bump, not work
def test_more_tensor_parallelism_never_makes_one_ranks_step_slower(model, gpu, tokens, seqs, prefill):
    """For the same batch, a rank's work (every GPU term at the size that runs, but the all-reduce,
    which TP adds, and the monotone envelope over GEMMs and all-reduce together) never grows with
    TP: a per-rank shape the kernel tables lack is scaled from a measured width."""
    seqs = min(seqs, tokens)
    pairs = (tokens - seqs + 1) ** 2 / 2.0 if prefill else 0.0
    f = StepFeatures(tokens, seqs, seqs * 1500, pairs, tokens - seqs + 1 if prefill else 0, 1 if prefill else 0)
    previous = None
    for tp in (1, 2, 4, 8):
        m = _per_rank_model(model, gpu, tp)
        if m is None:
            continue
        b = m.breakdown(f)
        per_rank = b["gpu_s"] - b["gpu"].get("all-reduce", 0.0) - b["gpu"].get("monotone envelope", 0.0)
        if previous is not None:
            assert per_rank <= previous * (1 + 1e-9), (tp, per_rank, previous)
        previous = per_rank


def test_mla_decode_is_priced_by_its_flops_and_sparse_attention_reads_the_top_k_only():
    """MLA decode with absorbed weights does 2 x heads x (2 x 512 + 64) FLOPs per latent token it
    reads (576 values): at 128 heads that is compute-bound; DeepSeek-V3.2 attends to the indexer's
    top 2,048 tokens per sequence and reads the indexer's keys over the whole context."""
    v2 = _model("deepseek-ai/DeepSeek-V2-Lite", "H200")
    att = v2.term("attention")
    latent_bytes_s = 27 * 576 * 2 / (find_gpu("H200").bandwidth_gbs * 1e9)  # 27 layers of one latent each
    assert att.kv_token_s > latent_bytes_s  # the FLOPs floor, not the bytes
    req = PlanRequest(model=load_model("deepseek-ai/DeepSeek-V3.2"), gpu=find_gpu("H200"), tensor_parallel_size=8,
                      max_model_len=32768)
    v32 = default_profile(req, plan(req, what_ifs=False))
    assert v32.sliding_window == 2048
    near, far = v32.time(8, 8, 8 * 2048, 0.0), v32.time(8, 8, 8 * 30_000, 0.0)
    indexer_only = v32.per_kv_token_s * 8 * (30_000 - 2048)
    assert far - near == pytest.approx(indexer_only, rel=1e-6)


@settings(max_examples=examples(30), deadline=None)
@given(name=st.sampled_from(sorted(MODELS)), seqs=st.integers(1, 512), kv=st.integers(0, 3_000_000))
@example(name="moe + sliding window", seqs=4, kv=3_000_000)  # past the window's cap
@example(name="dense sync", seqs=256, kv=300_000)  # no overlap: gpu + cpu
def test_a_decode_stretch_times_its_steps_with_the_same_floats_as_time(name, seqs, kv):
    """The decode stretch (kvplan.sim.engine_kv) computes each step from ``decode_parts``: it must
    give exactly ``time(n, n, kv, 0.0)``, or the simulator's numbers would depend on the path."""
    m = MODELS[name]
    parts = m.decode_parts(seqs)
    if parts is None:  # a term reads the step's features: the stretch calls time() itself
        return
    gpu_base, kv_s, window, window_kv, cpu, overlap = parts
    gpu = gpu_base + kv_s * kv
    if window:
        cap = seqs * window
        gpu += window_kv * (kv if kv < cap else cap)
    dt = (gpu if gpu > cpu else cpu) if overlap else gpu + cpu
    assert dt == m.time(seqs, seqs, kv, 0.0)
