"""The GPU step-time model (kvplan.sim.opmodel) over the shipped kernel tables: what it must
respect whatever the fitted constants are (monotonic in work, faster hardware/dtypes faster,
stated clock, lazy import), and the tables' shape."""
import json
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from kvplan.hardware import catalog, find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.models import load_model
from kvplan.sim import default_profile, simulate, synthetic_trace
from kvplan.sim import kernels as K
from kvplan.sim.stepmodel import StepModel
from kvplan.traffic.lengthdist import parse_length


def _model(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100", tp=1, **kw):
    req = PlanRequest(model=load_model(model), gpu=find_gpu(gpu), tensor_parallel_size=tp, max_model_len=4096, **kw)
    return req, default_profile(req, plan(req, what_ifs=False))


def test_shipped_tables_are_compact_and_complete():
    names = K.available()
    assert {"A100-SXM4-80GB", "H100-SXM5-80GB", "H200-141GB", "L40S", "B200-180GB"} <= set(names)
    for n in names:
        path = K.KERNEL_DIR / f"{n}.json"
        assert path.stat().st_size < 80_000
        t = json.loads(path.read_text())
        assert t["format"] == K.KERNEL_FORMAT and t["source"]["licence"] == "Apache-2.0"
        g = t["gemm"]
        for grid in g["neg_ln_eff_x200"].values():
            assert len(grid) == len(g["m"]) * len(g["n"]) * len(g["k"]) and all(-100 < v < 2800 for v in grid)
        assert t["attention"] and t["allreduce"]["graph"]


#: nccl-tests all-reduce of half-precision messages on one 8-GPU node, microseconds (microsoft/apex_plus
#: @d96aa5f profile/comm/{H100-SXM-80GB,H200-SXM-141GB}/all_reduce.csv, MIT): an independent kernel-level
#: measurement of the sizes vLLM hands to symmetric memory or NCCL (> 8 MiB at TP 2/4 on Hopper).
NCCL_TESTS_US = {("H100-SXM5-80GB", 2, 32): 139, ("H100-SXM5-80GB", 4, 32): 171, ("H100-SXM5-80GB", 4, 64): 323,
                 ("H100-SXM5-80GB", 8, 64): 325, ("H200-141GB", 2, 32): 142, ("H200-141GB", 4, 32): 173,
                 ("H200-141GB", 4, 64): 326, ("H200-141GB", 8, 64): 374}


@pytest.mark.parametrize("gpu,tp,mib", sorted(NCCL_TESTS_US))
def test_the_all_reduce_table_is_read_in_bytes(gpu, tp, mib):
    """AIConfigurator's all-reduce rows count half-precision *elements*; read as bytes, every message
    looked twice its size and a prefill step's all-reduce took about twice as long as measured (an 8B
    model at TP 4 on H200: 28 of a 57 ms step). Large messages are bandwidth-bound, so the shipped
    table must land near nccl-tests' time for the same bytes (vLLM's symmetric-memory path at TP 8 is
    faster than NCCL's ring, never twice as slow)."""
    table = json.loads((K.KERNEL_DIR / f"{gpu}.json").read_text())
    ours = K.AllReduce(table["allreduce"], tp, graph=True)(mib * 2**20) * 1e6
    assert 0.7 <= ours / NCCL_TESTS_US[(gpu, tp, mib)] <= 1.3, (ours, NCCL_TESTS_US[(gpu, tp, mib)])


def test_every_catalog_gpu_with_peaks_gets_a_model_and_says_where_its_efficiencies_come_from():
    m = load_model("Qwen/Qwen2.5-7B-Instruct")
    for gpu in catalog():
        if not gpu.bandwidth_gbs or not gpu.bf16_tflops or gpu.memory_gib < 20:
            continue
        req = PlanRequest(model=m, gpu=gpu, max_model_len=2048)
        pr = plan(req, what_ifs=False)
        if not pr.startup.ok:
            continue
        p = default_profile(req, pr)
        assert isinstance(p, StepModel) and p.time(1, 1, 100, 0) > 0
        assert p.clock["kernel_tables_exact"] == (gpu.name in K.available())
        if not p.clock["kernel_tables_exact"]:
            assert any("no measured kernel tables" in n for n in p.notes)


@settings(max_examples=examples(40), deadline=None)
@given(tokens=st.integers(1, 8192), seqs=st.integers(1, 256), kv=st.integers(0, 2_000_000),
       pairs=st.integers(0, 4_000_000), more=st.integers(1, 512))
@example(tokens=5, seqs=1, kv=0, pairs=0, more=4)  # the measured 16-row GEMM ran faster than the 8-row one
def test_more_work_never_takes_less_time(tokens, seqs, kv, pairs, more):
    _, p = _PROFILE
    seqs = min(seqs, tokens)
    t = p.time(tokens, seqs, kv, pairs)
    assert p.time(tokens + more, seqs, kv, pairs) >= t - 1e-12
    assert p.time(tokens, seqs, kv + more * 100, pairs) >= t
    assert p.time(tokens, seqs, kv, pairs + more * 1000) >= t


_PROFILE = _model()


def test_faster_gpu_fp8_and_tensor_parallel_are_faster_where_they_should_be():
    _, h100 = _model("meta-llama/Llama-3.1-70B-Instruct", "H100", tp=4)
    _, a100 = _model("meta-llama/Llama-3.1-70B-Instruct", "A100-80GB", tp=4)
    _, tp8 = _model("meta-llama/Llama-3.1-70B-Instruct", "H100", tp=8)
    _, fp8 = _model("meta-llama/Llama-3.1-70B-Instruct", "H100", tp=4, quantization="fp8")
    _, kv8 = _model("meta-llama/Llama-3.1-70B-Instruct", "H100", tp=4, kv_cache_dtype="fp8")
    decode = (32, 32, 32 * 2000, 0.0)
    prefill = (4096, 2, 4096, 2 * 2048 * 2048 / 2)
    for shape in (decode, prefill):
        assert h100.time(*shape) < a100.time(*shape)
        assert tp8.time(*shape) < h100.time(*shape)
        assert fp8.time(*shape) < h100.time(*shape)
    # fp8 KV: half the bytes, read at the fp8 kernel's own measured bandwidth
    assert kv8.clock["attention_fit"].startswith("fp8/") and h100.clock["attention_fit"].startswith("bfloat16/")
    assert h100.per_kv_token_s / 2 <= kv8.per_kv_token_s < h100.per_kv_token_s


def test_async_scheduling_hides_the_cpu_work_and_eager_mode_costs_launches():
    req, p = _PROFILE
    pr = plan(req, what_ifs=False)
    sync = default_profile(req, pr, async_scheduling=False)
    for shape in ((1, 1, 500, 0.0), (256, 256, 256 * 1000, 0.0)):
        assert p.time(*shape) <= sync.time(*shape)
    eager_req = replace(req, enforce_eager=True)
    eager = default_profile(eager_req, plan(eager_req, what_ifs=False))
    assert eager.time(1, 1, 500, 0.0) > p.time(1, 1, 500, 0.0)


def test_sliding_window_layers_read_at_most_the_window():
    _, p = _model("openai/gpt-oss-20b", "H100")
    assert p.sliding_window == 128
    short, long = p.time(8, 8, 8 * 100, 0.0), p.time(8, 8, 8 * 20_000, 0.0)
    full_only = p.per_kv_token_s * 8 * 19_900
    assert long - short == pytest.approx(full_only + p.sliding_per_kv_token_s * 8 * 28, rel=1e-6)


def test_sliding_window_layers_compute_at_most_the_window_of_pairs():
    """FlashAttention and vLLM's Triton kernel skip the key tiles outside a sliding window: a
    prefill token costs at most ``window`` pairs in those layers, the full layers every pair."""
    from kvplan.sim.stepmodel import StepFeatures

    _, p = _model("openai/gpt-oss-20b", "H100")
    att = p.term("attention")
    assert att.window == 128 and 0 < att.window_pair_s and 0 < att.pair_s
    # gpt-oss alternates the two: 12 sliding and 12 full layers of the same shape
    assert att.window_pair_s == pytest.approx(att.pair_s)

    def t(pairs):
        return p.step_time(StepFeatures(tokens=2048, num_seqs=1, kv_read_tokens=2048, attn_pairs=pairs,
                                        prefill_tokens=2048, prefill_seqs=1))
    # past the cap (2048 tokens x 128 keys) only the full layers' pairs add
    assert t(40e6) - t(20e6) == pytest.approx(att.pair_s * 20e6, rel=1e-6)
    assert t(200_000) - t(100_000) == pytest.approx((att.pair_s + att.window_pair_s) * 100_000, rel=1e-6)
    f = StepFeatures(tokens=2048, num_seqs=1, kv_read_tokens=2048, attn_pairs=20e6, prefill_tokens=2048,
                     prefill_seqs=1)
    assert sum(p.breakdown(f)["gpu"].values()) == pytest.approx(p.breakdown(f)["gpu_s"])
    assert p.breakdown(f)["step_s"] == pytest.approx(p.step_time(f), rel=1e-9)


def test_triton_attention_on_ampere_streams_the_prefix_per_query_block():
    """Sinks (gpt-oss) on SM 8.x select vLLM's Triton unified attention (platforms/cuda.py,
    0.11.0), whose 2D kernel reads a query block's whole key prefix per BLOCK_Q = 16 / (query
    heads per KV head) tokens: a long prefill is bound by that KV traffic, not by the FLOPs;
    Hopper runs FlashAttention at the FLOP rate."""
    from kvplan.sim.opmodel import DEFAULT_OVERHEADS, _triton_block_q

    assert _triton_block_q(64, 8) == 2 and _triton_block_q(32, 32) == 16 and _triton_block_q(64, 2) == 1
    _, a100 = _model("openai/gpt-oss-20b", "A100-80GB")
    _, h100 = _model("openai/gpt-oss-20b", "H100")
    assert any("Triton kernel" in n and "KV traffic" in n for n in a100.notes)
    assert not any("Triton kernel" in n for n in h100.notes)
    gpu = find_gpu("A100-80GB")
    kv_eff = K.attention_fit(K.load_table("A100-SXM4-80GB"), "bfloat16", 64)[0]["decode"]["bandwidth_eff"] or 0.8
    # 12 full layers x 8 KV heads x (64 + 64) x 2 bytes per key, once per 2 query tokens
    traffic = 12 * 8 * 128 * 2 / 2 * DEFAULT_OVERHEADS.triton_attention_dram_share / (gpu.bandwidth_gbs * 1e9 * kv_eff)
    assert a100.term("attention").pair_s == pytest.approx(traffic, rel=1e-6)
    assert h100.term("attention").pair_s < a100.term("attention").pair_s / 5


def test_a_simulate_result_states_its_clock():
    req, _ = _PROFILE
    tr = synthetic_trace(2, num_requests=30, input_len=parse_length("500", "x"), output_len=parse_length("50", "x"))
    d = simulate(req, tr).to_dict()
    assert d["clock"]["kernel_tables"] == "H100-SXM5-80GB" and d["clock"]["kernels_vllm_version"] == "0.19.0"
    assert "validation" in d["clock"] and d["profile"]["format"] == "kvplan-step-model/1"
    from kvplan.report.sim_common import headline

    assert any(k == "clock" and "kernel tables" in v for k, v in headline(d))


def test_the_api_server_spreads_a_burst_and_latency_counts_from_the_send():
    req, p = _PROFILE
    burst = synthetic_trace(1e9, num_requests=200, input_len=parse_length("100", "x"),
                            output_len=parse_length("20", "x"), arrival="constant")
    d = simulate(req, burst, per_request=True).to_dict()
    arrivals = [r["arrival"] for r in d["per_request"]]
    assert max(arrivals) < 1e-3  # the client's send times, not the hand-off
    ttft = sorted(r["ttft"] for r in d["per_request"])
    assert ttft[-1] >= 200 * p.api_request_s  # the last request waited for the 199 before it


def test_plan_startup_does_not_load_the_kernel_tables():
    code = ("import sys, kvplan.cli.main; assert 'kvplan.sim.kernels' not in sys.modules; "
            "assert 'kvplan.sim.opmodel' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_h100_times_gpt_oss_experts_with_its_own_mxfp4_measurement_and_says_which_kernel():
    """H100's table at vLLM 0.19.0 has no MXFP4 MoE; the distiller adds AIConfigurator's H100 rows for
    gpt-oss's shapes on the Triton kernel (0.24.0) and the table says so (source.moe_supplements)."""
    t = K.load_table("H100-SXM5-80GB")
    (sup,) = t["source"]["moe_supplements"]
    assert sup["moe_dtype"] == "w4a16_mxfp4" and sup["vllm_version"] == "0.24.0"
    assert all("triton" in k for k in sup["kernel_source"])
    curve = K.moe_direct(t, "mxfp4", 2880, 2880, 32, 4)
    assert curve is not None and 1e-5 < curve(8) < curve(1024)
    _, p = _model("openai/gpt-oss-20b", "H100")
    assert any("measured with vLLM 0.24.0's kernel" in n for n in p.notes)
    assert not any("H200-141GB's measured fused-MoE speed" in n for n in p.notes)


def test_gpt_oss_experts_on_h100_run_marlin_before_vllm_0_12():
    """A pip-installed vLLM before 0.12 has no triton_kernels (the 0.11.0 wheel lacks
    vllm/third_party/triton_kernels, 0.12.0's has it), so get_mxfp4_backend falls back to Marlin on
    SM 9.0: a long prefill is slower there than with 0.12's Triton kernel; decode stays close."""
    from kvplan.sim.stepmodel import StepFeatures

    _, old = _model("openai/gpt-oss-20b", "H100", vllm_version="0.11.0")
    _, new = _model("openai/gpt-oss-20b", "H100", vllm_version="0.12.0")
    assert any("Marlin" in n and "triton_kernels" in n for n in old.notes)
    assert not any("as Marlin W4A16" in n for n in new.notes)
    prefill = StepFeatures(tokens=8192, num_seqs=2, kv_read_tokens=8192, max_context=4096, prefill_seqs=2,
                           prefill_tokens=8192)
    assert old.step_time(prefill) > 1.3 * new.step_time(prefill)


def test_a_prefill_attention_fit_above_the_peak_is_not_used():
    """H200's prefill attention rows fit to 390-470x the peak (their latencies do not grow with the
    FLOPs) and L40S's fp8 ones to 9x: a failed fit. The model takes the same architecture's fit
    (H100 for H200), else the GPU's other KV dtype, and says so; every fit it uses is physical."""
    for name in K.available():
        for key in K.load_table(name)["attention"]:
            kv, hd = key.split("/")
            fit, where = K.physical_prefill_fit(name, kv, int(hd))
            assert 0 < fit["flops_eff"] <= 1.0, (name, key, where)
    fit, where = K.physical_prefill_fit("H200-141GB", "bfloat16", 128)
    assert where == "H100-SXM5-80GB bfloat16/128"
    _, h200 = _model("meta-llama/Llama-3.1-8B-Instruct", "H200")
    _, h100 = _model("meta-llama/Llama-3.1-8B-Instruct", "H100")
    assert any("faster than the GPU's peak" in n for n in h200.notes)
    assert not any("faster than the GPU's peak" in n for n in h100.notes)
    # same peak FLOP rate and the same fit: the same seconds per prefill pair
    assert h200.term("attention").pair_s == pytest.approx(h100.term("attention").pair_s)
