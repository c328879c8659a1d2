"""The budget terms kvplan derives from vLLM's source (memory/budget.py, models/params.py)."""
from __future__ import annotations

from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.memory.budget import (
    SAMPLER_FLASHINFER_BYTES_PER_LOGIT,
    SAMPLER_NATIVE_BYTES_PER_LOGIT,
    SAMPLER_NATIVE_FULL_SORT_BYTES_PER_LOGIT,
    SAMPLER_NATIVE_SORT_BYTES_PER_LOGIT,
    activation_peak_bytes,
    rope_positions,
    sampler_bytes_per_logit,
)
from kvplan.memory.semantics import semantics
from kvplan.models import load_model, params, spec_from_config


def test_a_huge_max_model_len_does_not_grow_the_rope_cache():
    """Issue 14 finding 4: vLLM sizes the cos/sin cache by max_position_embeddings, so asking for
    --max-model-len 1000000000 changes nothing in the weights (it was -442 GiB of KV memory)."""
    spec = load_model("meta-llama/Llama-3.1-8B-Instruct")
    gpu = find_gpu("H100")
    normal = plan(PlanRequest(spec, gpu), what_ifs=False)
    huge = plan(PlanRequest(spec, gpu, max_model_len=1_000_000_000), what_ifs=False)
    assert huge.memory.weights_gib_per_gpu == normal.memory.weights_gib_per_gpu
    assert huge.memory.available_kv_cache_gib > 40
    assert rope_positions(spec) == 131072  # llama3 rope: max_position_embeddings, not × factor


def test_sampler_bytes_per_logit_follow_the_sampler_code():
    assert SAMPLER_FLASHINFER_BYTES_PER_LOGIT == 2 + 4 + 4 + 4
    assert SAMPLER_NATIVE_BYTES_PER_LOGIT == 2 + 4 + (4 + 8 + 1 + 4 + 1 + 4)
    assert sampler_bytes_per_logit(semantics("0.21")) == 14
    assert sampler_bytes_per_logit(semantics("0.21"), "cpu") == 28


def test_native_sampler_peaks_in_torch_sort_on_0_10_to_0_16():
    """apply_top_k_top_p (0.10.0 to 0.16.0) sorts the float32 logits; PyTorch's
    launch_stable_sort_kernel holds its index buffers and CUB's alternate key/value buffers while
    the sorted values and int64 indices are written (memory/budget.py, docs §12)."""
    assert SAMPLER_NATIVE_SORT_BYTES_PER_LOGIT == 2 + 4 + (4 + 8) + 8 + (4 + 8)
    assert SAMPLER_NATIVE_FULL_SORT_BYTES_PER_LOGIT == 2 + 4 + (4 + 8) + (8 + 8 + 4) + (4 + 8)
    vocab = 201088
    for version in ("0.10.0", "0.10.1", "0.11"):
        sem = semantics(version)
        assert sampler_bytes_per_logit(sem, "cuda", False, 1024, vocab) == 38
        assert sampler_bytes_per_logit(sem, "cuda", False, 128, vocab) == 38
        assert sampler_bytes_per_logit(sem, "cuda", False, 64, vocab) == 50
        assert sampler_bytes_per_logit(sem, "cuda", False, 1, vocab) == 38
        assert sampler_bytes_per_logit(sem, "cuda", False, 64, 1_200_000) == 28  # one row at a time
        assert sampler_bytes_per_logit(sem, "cuda", None, 1024, vocab) == 14  # default: FlashInfer installed
        assert sampler_bytes_per_logit(sem, "cuda", True, 1024, vocab) == 14
        assert sampler_bytes_per_logit(sem, "cpu", False, 1024, vocab) == 28  # not CUDA's sort
    # from 0.11.1 FlashInfer is opt-in (VLLM_USE_FLASHINFER_SAMPLER unset: the native sort runs, to 0.16)
    for version in ("0.11.1", "0.11.2", "0.12", "0.15.1", "0.16"):
        assert sampler_bytes_per_logit(semantics(version), "cuda", None, 1024, vocab) == 38
        assert sampler_bytes_per_logit(semantics(version), "cuda", True, 1024, vocab) == 14


def test_native_sampler_runs_triton_top_k_top_p_from_0_17():
    """0.17.0 and 0.19.0's apply_top_k_top_p masks the float32 logits in place with one Triton
    kernel from 8 rows; forward_native's softmax (4 B) and random_sample's empty_like (4 B) follow:
    2 + 4 + 4 + 4 B per logit. Below 8 rows it sorts as 0.8-0.16 do (budget.py)."""
    from kvplan.memory.budget import SAMPLER_NATIVE_TRITON_BYTES_PER_LOGIT

    assert SAMPLER_NATIVE_TRITON_BYTES_PER_LOGIT == 2 + 4 + 4 + 4
    vocab = 128256
    for version in ("0.17", "0.18", "0.19", "0.19.1", "0.21"):
        sem = semantics(version)
        assert not sem.native_sampler_sorts_logits and sem.native_sampler_triton_topk_topp
        assert sampler_bytes_per_logit(sem, "cuda", False, 1024, vocab) == 14
        assert sampler_bytes_per_logit(sem, "cuda", False, 8, vocab) == 14
        assert sampler_bytes_per_logit(sem, "cuda", False, 7, vocab) == 50  # torch.sort below 8 rows
        assert sampler_bytes_per_logit(sem, "cuda", False, 1, vocab) == 38
        assert sampler_bytes_per_logit(sem, "cuda", True, 1024, vocab) == 14
        assert sampler_bytes_per_logit(sem, "cpu", False, 1024, vocab) == 28  # CPU: not the CUDA path
    assert not semantics("0.16").native_sampler_triton_topk_topp


def test_an_h100_plan_of_0_19_charges_the_triton_sampler_not_the_sort():
    """llm-d-planner's 0.19.0 run of Llama-3.1-8B on one H100 (max_num_seqs defaults to 1024 there;
    the log prints a 1.89 GiB torch peak): the profile's peak is the sampler over 1024 x 128,256
    logits at 14 B, about 1.7 GiB, not the 28 B (3.4 GiB) kvplan charged before."""
    from kvplan.hardware import find_gpu
    from kvplan.memory import PlanRequest, plan
    from kvplan.models import load_model

    r = plan(PlanRequest(load_model("meta-llama/Llama-3.1-8B-Instruct"), find_gpu("H100"), vllm_version="0.19.0",
                         max_model_len=8192, gpu_memory_utilization=0.95), what_ifs=False)
    assert r.flags.max_num_seqs == 1024
    sampler_gib = (1024 * 128256 * 14 + 132 * 128256 * 4) / 2**30  # plus the kernel's 132-row scratch
    assert sampler_gib < r.memory.activation_peak_gib < sampler_gib + 0.1  # plus the hidden states
    assert abs(r.memory.available_kv_cache_gib - 58.11) < 0.3  # the log's figure


def test_the_triton_sampler_keeps_a_scratch_row_per_program_capped_at_the_sm_count():
    """apply_top_k_top_p_triton (0.17.0, 0.19.0): NUM_PROGRAMS = min(num_sm, rows) and a cached
    (min(next_power_of_2(NUM_PROGRAMS), num_sm), vocab) float32 buffer. Not on the FlashInfer
    sampler, below 8 rows, before 0.17, or on a GPU whose SM count is unknown."""
    from dataclasses import replace

    from kvplan.hardware import custom_gpu, find_gpu
    from kvplan.memory import PlanRequest
    from kvplan.memory._resolve import resolve
    from kvplan.memory.budget import triton_sampler_scratch_bytes
    from kvplan.models import load_model

    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    vocab = model.vocab_size

    def scratch(gpu, rows, version="0.19.0", **flags):
        return triton_sampler_scratch_bytes(resolve(PlanRequest(model, gpu, vllm_version=version, **flags)), rows)

    h100, l4 = find_gpu("H100"), find_gpu("L4")
    assert (h100.multiprocessors, l4.multiprocessors) == (132, 58)
    assert scratch(h100, 1024) == 132 * vocab * 4
    assert scratch(h100, 100) == 128 * vocab * 4  # next power of two of 100 programs
    assert scratch(l4, 40) == 58 * vocab * 4  # 64 rows capped at the 58 SMs
    assert scratch(l4, 256) == 58 * vocab * 4
    assert scratch(h100, 7) == 0  # below 8 rows the sort runs
    assert scratch(h100, 1024, flashinfer_sampler=True) == 0
    assert scratch(h100, 1024, version="0.21.0") == 0  # FlashInfer by default
    assert scratch(h100, 1024, version="0.21.0", flashinfer_sampler=False) == 132 * vocab * 4
    assert scratch(h100, 1024, version="0.16.0") == 0  # the sort
    assert scratch(custom_gpu(80 << 30), 1024) == 0
    assert scratch(replace(h100, multiprocessors=None), 1024) == 0


def test_native_sampler_sorts_from_0_8_and_v1_before_0_8_ran_no_sampler():
    """0.8.0-0.9.2's _dummy_sampler_run sets top_p and top_k, and apply_top_k_top_p sorts the
    logits as in 0.10 (read in 0.8.0, 0.8.1, 0.8.2, 0.8.5, 0.9.0.1, 0.9.2). V1 before 0.8 only
    computed logits in the model dtype: for every token in 0.7.0-0.7.2, one row per request in 0.7.3."""
    from kvplan.memory.budget import profile_logit_rows

    vocab = 151936
    for version in ("0.8", "0.8.2", "0.8.5", "0.9", "0.9.2"):
        sem = semantics(version)
        assert sem.v1_profile_logits == "sampler"
        assert sampler_bytes_per_logit(sem, "cuda", False, 256, vocab) == 38
        assert sampler_bytes_per_logit(sem, "cuda", None, 256, vocab) == 14  # release images: FlashInfer
        assert profile_logit_rows(sem, "cuda", False, 256, 2048, vocab, 2) == (256, 38)
    assert semantics("0.7.3", engine="V1").v1_profile_logits == "per_request"
    assert profile_logit_rows(semantics("0.7.3", engine="V1"), "cuda", None, 256, 2048, vocab, 2) == (256, 2)
    for version in ("0.7.1", "0.7.2"):
        sem = semantics(version, engine="V1")
        assert sem.v1_profile_logits == "all_tokens"
        assert profile_logit_rows(sem, "cuda", None, 256, 2048, vocab, 2) == (2048, 2)
    # V0 keeps its own sampler whatever the version
    assert profile_logit_rows(semantics("0.7.3"), "cuda", None, 256, 2048, vocab, 2) == (256, 36)


def test_no_flashinfer_sampler_adds_the_sort_peak_and_nothing_else():
    """gpt-oss-120b on one H100, vLLM 0.10.1 (1,024 sampler rows x 201,088 logits): without
    FlashInfer the profile peak grows by rows x vocab x (38 - 14) B; the weights do not move."""
    spec, gpu = load_model("openai/gpt-oss-120b"), find_gpu("H100")
    base = plan(PlanRequest(spec, gpu, vllm_version="0.10.1"), what_ifs=False)
    native = plan(PlanRequest(spec, gpu, vllm_version="0.10.1", flashinfer_sampler=False), what_ifs=False)
    grown = (native.memory.activation_peak_gib - base.memory.activation_peak_gib) * 2**30
    assert abs(grown - 1024 * spec.vocab_size * (38 - 14)) < 2**20
    assert native.memory.weights_gib_per_gpu == base.memory.weights_gib_per_gpu
    assert not native.startup.ok  # vLLM 0.10.1 printed -2.14 GiB and failed (log 16)
    assert any("native top-k/top-p" in n for n in native.notes)
    assert not any("top-k/top-p" in n for n in base.notes)
    explicit = plan(PlanRequest(spec, gpu, vllm_version="0.10.1", flashinfer_sampler=True), what_ifs=False)
    assert explicit.memory.available_kv_cache_gib == base.memory.available_kv_cache_gib


def test_sampler_rows_are_capped_by_the_batch():
    """_dummy_run: num_reqs = min(num_tokens, max_num_seqs)."""
    spec = load_model("meta-llama/Llama-3.1-8B-Instruct")
    small = activation_peak_bytes(spec, 1, 2, 512, 1024)
    assert small >= 512 * spec.vocab_size * 14
    assert small < 1024 * spec.vocab_size * 14


def test_mxfp4_experts_are_padded_as_the_marlin_kernel_needs():
    """gpt-oss-120b on an H100 with vLLM 0.10.1 (Marlin: intermediate to 128, hidden to 256):
    65.91 GiB per GPU, the log 16 measured 65.97 GiB; unpadded it would be 60.8 GiB."""
    spec = load_model("openai/gpt-oss-120b")
    assert params.mxfp4_padding(90, (0, 10, 1)) == (128, 256)
    assert params.mxfp4_padding(80, (0, 33)) == (128, 256)
    assert params.mxfp4_padding(90, (0, 11)) == (128, 256)  # triton_kernels is optional
    assert params.mxfp4_padding(100, (0, 11)) == (256, 256)
    padded = params.weights_per_rank(spec, 1, 1, 2, spec.quantization, (128, 256))[0].bytes_per_rank
    plain = params.weights_per_rank(spec, 1, 1, 2, spec.quantization)[0].bytes_per_rank
    assert abs(padded / 2**30 - 65.97) < 0.2
    assert plain < padded - 4 * 2**30


def test_vision_tower_of_a_qwen25_vl_config():
    """Qwen2.5-VL-7B: 8.29 B parameters published; the tower (gated MLP, patch merger) ~0.68 B."""
    cfg = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
           "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 128000,
           "torch_dtype": "bfloat16", "tie_word_embeddings": False,
           "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
                             "num_heads": 16, "out_hidden_size": 3584, "patch_size": 14, "in_chans": 3,
                             "spatial_merge_size": 2, "temporal_patch_size": 2}}
    spec = spec_from_config(cfg, "qwen25vl.json")
    assert spec.num_layers == 28 and spec.hidden_size == 3584
    assert abs(params.count_params(spec) / 1e9 - 8.29) < 0.02


def _kvplan_json(*args: str) -> dict:
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, COLUMNS="120", KVPLAN_OFFLINE="1")
    out = subprocess.run([sys.executable, "-m", "kvplan.cli.main", "plan", "--format", "json", *args],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_kv_cache_memory_and_from_log_need_no_gpu_name():
    """With the KV memory given (or measured in a log) the GPU's size no longer sets the blocks."""
    d = _kvplan_json("--model", "llama-2-70b-chat", "-tp", "4", "--max-model-len", "4096", "--kv-cache-memory", "30")
    assert d["kv"]["num_gpu_blocks"] == 24_576
    from pathlib import Path

    log = Path(__file__).parent / "fixtures" / "vllm_logs" / "26-qwen2-7b-a100-80gb-tp1-util05-v1-0.10.1.1-dev.log"
    d = _kvplan_json("--from-log", str(log), "--model", "Qwen/Qwen2.5-7B-Instruct", "--max-num-batched-tokens", "2048")
    # the log: 24.83 GiB, 464,848 tokens (29,053 blocks of 16); the printed GiB is rounded to 0.01
    assert abs(d["kv"]["num_gpu_blocks"] - 29_053) <= 6
    assert d["flags"]["gpu"].startswith("unspecified GPU")


def test_llama4_scout_keeps_the_hybrid_allocator_from_015():
    """VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 0 in 0.11 (one 48-layer
    group) and to 1 from 0.15.1 (12 full + 36 chunked layers: group_size 12, bpb = 12 pages, so
    four times the blocks for the same memory)."""
    spec = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    gpu = find_gpu("H100")
    old, new = (plan(PlanRequest(spec, gpu, tensor_parallel_size=4, max_model_len=131072, vllm_version=v,
                                 kv_cache_memory_bytes=20 << 30), what_ifs=False) for v in ("0.11", "0.21"))
    assert not old.flags.hybrid_kv_cache_manager and new.flags.hybrid_kv_cache_manager
    assert [g.layers for g in old.kv.groups] == [48]
    assert sorted(g.layers for g in new.kv.groups) == [12, 12, 12, 12]
    assert new.kv.num_gpu_blocks == 4 * old.kv.num_gpu_blocks + 2  # 20 GiB // (12 pages) vs // (48 pages)


def test_pipeline_stages_report_their_own_memory_and_blocks():
    spec = load_model("deepseek-ai/DeepSeek-V2-Lite")
    r = plan(PlanRequest(spec, find_gpu("L4"), tensor_parallel_size=2, pipeline_parallel_size=2, max_model_len=1024,
                         vllm_version="0.9.2"), what_ifs=False)
    m = r.memory
    assert len(m.available_kv_bytes_per_stage) == 2 and len(m.num_gpu_blocks_per_stage) == 2
    assert r.kv.num_gpu_blocks == min(m.num_gpu_blocks_per_stage)
    assert any(n.startswith("Per pipeline stage") for n in r.notes)


def test_only_the_last_pipeline_stage_pays_for_the_sampler():
    """Log 14 (DeepSeek-V2-Lite, TP 2 x PP 2 on L4, a 0.9.2 development branch): stage 0 prints 12.13 GiB
    and the last stage, which alone runs ``_dummy_sampler_run`` (gpu_model_runner.profile_run, 0.9.2),
    11.33. The first stage is planned within 0.1 GiB whatever the sampler; the last is within 0.15 GiB
    with PyTorch's native top-k/top-p sort, the sampler of a source install (the 0.9.2 wheel does not
    require flashinfer-python), and 0.7 GiB high with FlashInfer's."""
    spec = load_model("deepseek-ai/DeepSeek-V2-Lite")

    def stages(flashinfer: bool) -> list[float]:
        r = plan(PlanRequest(spec, find_gpu("L4"), tensor_parallel_size=2, pipeline_parallel_size=2,
                             max_model_len=1024, vllm_version="0.9.2", flashinfer_sampler=flashinfer), what_ifs=False)
        return [a / (1 << 30) for a in r.memory.available_kv_bytes_per_stage]

    native, flashinfer = stages(False), stages(True)
    assert abs(native[0] - 12.13) < 0.1 and native[0] == flashinfer[0]
    assert abs(native[1] - 11.33) < 0.15 < flashinfer[1] - 11.33


def test_batch_defaults_before_0_8_5_follow_the_device_name():
    """0.7.3-0.8.4 `_set_default_args_v1` (read in the wheels): the tier is chosen by "h100"/"h200"
    in the device name, not by memory; max_num_seqs is 1024 everywhere until 0.8.3, 0.8.4 gives
    256 to non-Hopper names. 0.8.5 moved to the memory tiers (an 80 GB A100 is "big" there)."""
    from kvplan.hardware import find_gpu
    from kvplan.memory.defaults import batch_defaults
    from kvplan.memory.semantics import semantics as semantics_for

    a100, h100 = find_gpu("A100-80GB"), find_gpu("H100")
    assert batch_defaults(semantics_for("0.7.3", "V1"), a100, "cuda", 1) == (2048, 1024)
    assert batch_defaults(semantics_for("0.8.2"), a100, "cuda", 1) == (2048, 1024)
    assert batch_defaults(semantics_for("0.8.2"), h100, "cuda", 1) == (8192, 1024)
    assert batch_defaults(semantics_for("0.8.4"), a100, "cuda", 1) == (2048, 256)
    assert batch_defaults(semantics_for("0.8.4"), h100, "cuda", 1, "llm") == (16384, 1024)
    assert batch_defaults(semantics_for("0.8.5"), a100, "cuda", 1) == (8192, 1024)


def test_no_flashinfer_sampler_flag_of_kvplan_plan():
    args = ("--model", "openai/gpt-oss-120b", "--gpu", "H100", "--vllm-version", "0.11",
            "--max-num-batched-tokens", "1024", "--gpu-memory-utilization", "0.95")
    default = _kvplan_json(*args)
    native = _kvplan_json(*args, "--no-flashinfer-sampler")
    assert native["memory"]["available_kv_cache_gib"] < default["memory"]["available_kv_cache_gib"] - 4
    assert _kvplan_json(*args, "--flashinfer-sampler")["memory"] == default["memory"]


def _qwen25_vl_7b():
    """Qwen2.5-VL-7B as the fixture index stores it (log 142's config_fields)."""
    import json
    from pathlib import Path

    entries = json.loads((Path(__file__).parent / "fixtures" / "vllm_logs" / "index.json").read_text())
    fields = next(e for e in entries if e["file"].startswith("142-"))["config_fields"]
    return spec_from_config({k: v for k, v in fields.items() if k not in ("source", "unsure")}, "test", name="qwen25-vl")


def test_vision_encoder_profile_run_is_one_max_size_image():
    """V1 0.9.0.1 profile_run: 1 image of 16,384 merged tokens (65,536 patches) against a
    16,384-token encoder budget, as log 142 prints; the peak is the patches (bf16, as_kwargs casts
    them) plus one block's MLP: 2 x 1280 + 3 x 3420 / tp values per patch."""
    from kvplan.memory.encoder_profile import encoder_profile

    spec = _qwen25_vl_7b()
    one = encoder_profile(spec, 1, 2, 2048, "V1")
    assert (one.items, one.tokens_per_item, one.patches_per_item) == (1, 16384, 65536)
    pixels = 65536 * 3 * 2 * 14 * 14 * 2
    assert one.peak_bytes == pixels + 65536 * (2 * 1280 + 3 * 3420) * 2
    assert one.outputs_bytes == 16384 * 3584 * 2
    two = encoder_profile(spec, 2, 2, 8192, "V1")
    assert two.peak_bytes == pixels + int(65536 * (2 * 1280 + 3 * 3420 / 2) * 2)
    # 0.7-0.10: RoPE in float32 on q, then k, makes the attention the widest point: 2d + 11d/tp at
    # TP 1; with TP the qkv all-gather and its interleaving copy (8d + 3d/tp) bind; 0.11.0 rotates
    # the concatenated q and k (2d + 18d/tp)
    per_tensor = encoder_profile(spec, 1, 2, 2048, "V1", "fp32_per_tensor")
    assert per_tensor.peak_bytes == pixels + 65536 * 13 * 1280 * 2
    assert encoder_profile(spec, 2, 2, 2048, "V1", "fp32_per_tensor").peak_bytes == pixels + 65536 * 1280 * 19
    assert encoder_profile(spec, 1, 2, 2048, "V1", "fp32_qk_concat").peak_bytes == pixels + 65536 * 20 * 1280 * 2
    assert encoder_profile(spec, 1, 2, 32768, "V1").items == 2  # cdiv(budget, tokens per item)
    v0 = encoder_profile(spec, 1, 2, 2048, "V0")  # V0: one sequence with one image, float32 pixels
    assert v0.items == 1 and v0.inputs_bytes == 2 * pixels
    assert encoder_profile(load_model("meta-llama/Llama-3.1-8B-Instruct"), 1, 2, 2048, "V1") is None


def test_the_encoder_peak_is_charged_when_it_is_the_larger_one():
    """Log 142 (Qwen2.5-VL-7B, one L4, 0.9.0.1): the encoder's 2.17 GiB (its float32 RoPE) binds, not
    the language model's 0.52 GiB dummy forward and sampler."""
    spec = _qwen25_vl_7b()
    gpu = find_gpu("L4")
    r = plan(PlanRequest(spec, gpu, vllm_version="0.9.0", max_model_len=2048, max_num_batched_tokens=2048),
             what_ifs=False)
    assert abs(r.memory.activation_peak_gib - 2.17) < 0.01
    # V0 profiles the image inside its dummy sequences (model_runner._dummy_run): the tower's peak too
    from dataclasses import replace

    text_only = replace(spec, raw={k: v for k, v in spec.raw.items() if k != "vision_config"})
    v0 = [plan(PlanRequest(s, gpu, vllm_version="0.9.0", engine="V0", max_model_len=2048,
                           max_num_batched_tokens=2048), what_ifs=False).memory.activation_peak_gib
          for s in (spec, text_only)]
    assert v0[0] > v0[1] + 0.5  # 2.32 GiB: the float32 pixels and the RoPE-bound block


def test_the_multimodal_rope_cache_holds_four_times_the_positions():
    """``MRotaryEmbedding.__init__`` (read in the 0.9.2 wheel, rotary_embedding.py L1038, and 0.7.2 to
    0.33.0): ``cache_max_position_num = max_position_embeddings * 4`` rows for an ``mrope_section``
    config; 0.7.0 builds ``max_position_embeddings`` rows. Log 142 (Qwen2.5-VL-7B on an L4, the 0.9.2
    code) prints "Model loading took 15.6271 GiB": the parameters and 4 x 128,000 x 128 x 2 B of cache."""
    from kvplan.memory.budget import rope_cache_bytes
    from kvplan.memory.semantics import semantics

    spec = _qwen25_vl_7b()
    assert semantics("0.9.2").mrope_cache_positions_factor == 4 == semantics("0.7.2").mrope_cache_positions_factor
    assert semantics("0.7.0").mrope_cache_positions_factor == 1
    assert rope_cache_bytes(spec, 2, 4) == 4 * 128000 * 128 * 2 == 4 * rope_cache_bytes(spec, 2)
    llama = load_model("meta-llama/Llama-3.1-8B-Instruct")  # no mrope_section: one row per position
    assert rope_cache_bytes(llama, 2, 4) == rope_cache_bytes(llama, 2)
    r = plan(PlanRequest(spec, find_gpu("L4"), vllm_version="0.9.2", max_model_len=2048), what_ifs=False)
    assert abs(r.memory.weights_gib_per_gpu - 15.6271) < 0.005


def test_the_plan_says_what_the_encoder_charged_and_only_when_it_estimates():
    spec, gpu = _qwen25_vl_7b(), find_gpu("L4")
    flags = dict(vllm_version="0.9.0", max_model_len=2048, max_num_batched_tokens=2048)
    est = plan(PlanRequest(spec, gpu, **flags), what_ifs=False)
    assert any("vision encoder on 1 image(s) of 16,384 tokens" in n and "2.17 GiB" in n for n in est.notes)
    given = plan(PlanRequest(spec, gpu, kv_cache_memory_bytes=2 * 2**30, **flags), what_ifs=False)
    assert not any("vision encoder" in n for n in given.notes)


def test_which_versions_charge_the_cuda_context_and_nccl_to_the_budget():
    """V0 0.6.0-0.6.4 and V1 0.7-0.9.0 count every byte on the GPU; V0 0.6.5+ and V1 0.9.1-0.10
    measure from a baseline taken before NCCL starts (the context is not charged, NCCL is); 0.11+
    from after it (read in the 0.6.4.post1-0.9.2 wheels: semantics.charged_preexisting). V1 0.9.0.1's
    worker still adds every non-torch byte to the peak; 0.9.1 moved it to memory_profiling."""
    context, nccl = 450, 100
    charged = {(v, e): semantics(v, e).charged_preexisting(context, nccl)
               for v, e in [("0.6.4", "V0"), ("0.6.5", "V0"), ("0.7.3", "V0"), ("0.8.5", "V0"), ("0.9.2", "V0"),
                            ("0.7.1", "V1"), ("0.8.5", "V1"), ("0.9.0", "V1"), ("0.9.1", "V1"), ("0.9.2", "V1"),
                            ("0.10.1", "V1"), ("0.11", "V1")]}
    assert charged == {("0.6.4", "V0"): 550, ("0.6.5", "V0"): 100, ("0.7.3", "V0"): 100, ("0.8.5", "V0"): 100,
                       ("0.9.2", "V0"): 100, ("0.7.1", "V1"): 550, ("0.8.5", "V1"): 550, ("0.9.0", "V1"): 550,
                       ("0.9.1", "V1"): 100, ("0.9.2", "V1"): 100, ("0.10.1", "V1"): 100, ("0.11", "V1"): 0}


def test_a_v0_plan_from_0_6_5_leaves_the_cuda_context_out_of_the_budget():
    """The same one-GPU V0 plan gets the CUDA context's worth more KV memory on 0.7.3 than on
    0.6.4 (log 06, DeepSeek-R1-Distill-Qwen-1.5B on 0.8-era V0, prints non_torch_memory 0.04 GiB)."""
    from kvplan.memory.budget import CUDA_CONTEXT_BYTES

    spec, gpu = load_model("Qwen/Qwen2.5-1.5B-Instruct"), find_gpu("L4")
    kv = {v: plan(PlanRequest(spec, gpu, vllm_version=v, engine="V0", max_model_len=2000),
                  what_ifs=False).memory.available_kv_cache_bytes for v in ("0.6.4", "0.7.3")}
    assert kv["0.7.3"] - kv["0.6.4"] == CUDA_CONTEXT_BYTES


def test_a_qwen_vl_tower_is_sharded_over_tensor_parallel_ranks():
    """qwen2_5_vl.py builds the vision blocks and the merger from parallel linears (default
    mm_encoder_tp_mode "weights"): at TP 2 each rank holds half of them; norms and the patch
    embedding whole."""
    spec = _qwen25_vl_7b()
    one, two = params.vision_params(spec, 1), params.vision_params(spec, 2)
    # per block two RMSNorms and the row-parallel biases of proj and down; the merger's RMSNorm and
    # output bias; the Conv3d patch embedding (no bias)
    whole = 32 * 4 * 1280 + 1280 + 3584 + 14 * 14 * 3 * 2 * 1280
    assert params.vision_tower(spec).tower.whole_params == whole
    assert two - whole == (one - whole) // 2
    assert params.count_params(spec) - params.count_params(spec, include_vision=False) == one


def test_a_pixtral_tower_shards_its_blocks_over_tensor_parallel_ranks():
    """pixtral.py (0.19.0) builds PixtralHF attention and MLP from parallel linears: at TP 2 each rank
    holds half of the 24 blocks' linears (4·h² + 3·h·I each) and of the projector's linear_1/linear_2;
    the patch embedding, norms and the patch merger stay whole. The sweep's Mistral-Small-3.1 w8a8 at TP 2 logs
    12.11 GiB of weights per GPU."""
    from kvplan.models import load_model

    spec = load_model("mistralai/Ministral-3-14B-Instruct-2512")
    h, inter, blocks, text = 1024, 4096, 24, spec.hidden_size
    one, two = params.vision_params(spec, 1), params.vision_params(spec, 2)
    # mistral3.py's projector: linear_1 (column) and linear_2 (row) shard too; its norm and patch merger do not
    assert one - two == (blocks * (4 * h * h + 3 * h * inter) + h * text + text * text) // 2


def test_flashinfer_allreduce_fusion_workspace_is_three_multicast_granules():
    """vLLM 0.17-0.21 build FlashInfer's all-reduce + RMSNorm fusion workspace at TP 2/4/8 on SM90/SM100
    NVSwitch GPUs while the profile run compiles; FlashInfer 0.6.4-0.6.8 rounds each of its three
    buffers up to the recommended multicast granularity (512 MiB assumed): 1.5 GiB of non-torch memory,
    whatever the hidden size (memory/budget.py)."""
    from kvplan.hardware import find_gpu
    from kvplan.memory import PlanRequest
    from kvplan.memory._resolve import resolve
    from kvplan.memory.budget import MULTICAST_GRANULARITY_BYTES, allreduce_fusion_workspace_bytes
    from kvplan.models import load_model

    def workspace(gpu="H100", version="0.19.0", tp=2, **kw):
        model = load_model(kw.pop("model", "meta-llama/Llama-3.1-8B-Instruct"))
        config = resolve(PlanRequest(model, find_gpu(gpu), tensor_parallel_size=tp, vllm_version=version,
                                     max_model_len=8192, **kw))
        return allreduce_fusion_workspace_bytes(config, 8192)

    three = 3 * MULTICAST_GRANULARITY_BYTES
    assert three == 1536 * 2**20
    for version in ("0.17.0", "0.18.0", "0.19.0", "0.20.0", "0.21.0"):
        assert workspace(version=version) == three, version
    assert workspace(tp=4) == workspace(tp=8) == three
    assert workspace(model="Qwen/Qwen2.5-72B-Instruct") == three  # hidden 8192: fewer tokens, same granules
    assert workspace(gpu="H200") == workspace(gpu="B200") == three
    assert workspace(tp=1) == 0  # no all-reduce
    assert workspace(version="0.16.0") == 0 and workspace(version="0.22.0") == 0  # off / not read
    assert workspace(gpu="H100-PCIE") == 0 and workspace(gpu="H100-NVL") == 0  # no NVSwitch multicast
    assert workspace(gpu="A100-80GB") == 0  # SM80: the fusion is off
    assert workspace(enforce_eager=True) == 0  # nothing compiles, no fusion pass
    assert workspace(pipeline_parallel_size=2) == 0  # 0.17-0.20: PP > 1 turns it off
    assert workspace(version="0.21.0", pipeline_parallel_size=2) == three


def test_a_tight_tp2_h100_plan_of_0_19_charges_the_fusion_workspace():
    """llm-d-planner's 0.19.0 run of Qwen2.5-72B at TP 2 on H100s left 3.04 GiB of KV memory; the
    log prints 2.09 GiB of non-torch growth during profiling (0.25 GiB at TP 1)."""
    from kvplan.hardware import find_gpu
    from kvplan.memory import PlanRequest, plan
    from kvplan.models import load_model

    r = plan(PlanRequest(load_model("Qwen/Qwen2.5-72B-Instruct"), find_gpu("H100"), tensor_parallel_size=2,
                         vllm_version="0.19.0", max_model_len=8192, gpu_memory_utilization=0.95), what_ifs=False)
    assert 1.5 <= r.memory.non_torch_gib < 2.09  # the workspace; the NCCL growth is not sized
    assert round(r.memory.weights_gib_per_gpu, 2) == 67.80  # "Model loading took 67.80 GiB" (allocator blocks)
    assert 3.04 < r.memory.available_kv_cache_gib < 3.04 + 0.8


def test_unquantized_moe_workspace_stays_allocated_through_the_sampler_on_0_14_to_0_21():
    """The modular MoE kernel's workspace lives in vLLM's WorkspaceManager (grown, never freed), so
    on 0.14-0.21 it adds to the dummy sampler's peak: TritonExperts' workspace1 (M, topk, max(N/2, K))
    shared with the output (M, K), and workspace2 (M, topk, max(N, K)), in the model dtype."""
    from kvplan.hardware import find_gpu
    from kvplan.memory import PlanRequest
    from kvplan.memory._resolve import resolve
    from kvplan.memory.budget import moe_workspace_bytes
    from kvplan.models import load_model

    def workspace(model="Qwen/Qwen3-30B-A3B", version="0.19.0", tp=1, tokens=8192):
        config = resolve(PlanRequest(load_model(model), find_gpu("H100"), tensor_parallel_size=tp,
                                     vllm_version=version, max_model_len=8192))
        return moe_workspace_bytes(config, tokens)

    # Qwen3-30B-A3B: top-8 of 128, expert width 768, hidden 2048: both workspaces 8192 x 8 x 2048 x 2 B
    assert workspace() == 2 * 8192 * 8 * 2048 * 2
    # Mixtral at TP 2: top-2, width 14336 / 2: workspace1 8192 x 2 x 7168, workspace2 8192 x 2 x 14336
    assert workspace("mistralai/Mixtral-8x7B-Instruct-v0.1", tp=2) == 8192 * 2 * (7168 + 14336) * 2
    # 0.14-0.17 chunk at 16,384 tokens (the output, M x K, stays inside workspace1 here); 0.18+ do not
    assert workspace(tokens=32768, version="0.17.0") == workspace(tokens=16384, version="0.17.0")
    assert workspace(tokens=32768) == 2 * workspace(tokens=16384)
    assert workspace(version="0.13.0") == 0 and workspace(version="0.22.0") == 0  # per call / not read
    assert workspace("meta-llama/Llama-3.1-8B-Instruct") == 0  # dense
    assert workspace("openai/gpt-oss-20b") == 0  # MXFP4 experts: another kernel, not read


def test_a_0_19_moe_plan_adds_the_workspace_to_the_sampler_peak():
    """llm-d-planner's 0.19.0 run of Qwen3-30B-A3B on one H100 prints a 2.68 GiB torch peak: the
    sampler over 1,024 x 151,936 logits (2.03 GiB) plus the 0.5 GiB MoE workspace and hidden states."""
    from kvplan.hardware import find_gpu
    from kvplan.memory import PlanRequest, plan
    from kvplan.models import load_model

    r = plan(PlanRequest(load_model("Qwen/Qwen3-30B-A3B"), find_gpu("H100"), vllm_version="0.19.0",
                         max_model_len=8192, gpu_memory_utilization=0.95), what_ifs=False)
    assert 2.5 < r.memory.activation_peak_gib < 2.68
    assert abs(r.memory.available_kv_cache_gib - 15.41) < 0.5


def test_gemma_3_keeps_a_second_unscaled_rope_cache_for_its_sliding_layers():
    """gemma3.py (0.19.0): the sliding layers rotate with rope_type "default" at rope_local_base_freq, a
    second get_rope entry beside the full layers' linear x8 one; llm-d-planner's 0.19.0 logs load
    23.31 GiB (12B) and 8.58 GiB (4B), which the second 64 MiB cache brings kvplan to within 0.02."""
    from kvplan.memory.budget import rope_cache_bytes

    gemma3 = load_model("google/gemma-3-12b-it")
    assert rope_cache_bytes(gemma3) == 131072 * 8 * 256 * 2 + 131072 * 256 * 2
    gemma2 = load_model("google/gemma-2-9b-it")  # one rope for every layer
    assert rope_cache_bytes(gemma2) == rope_positions(gemma2) * gemma2.head_dim * 2


def test_siglip_blocks_are_sharded_over_tp_and_the_projector_is_not():
    gemma3 = load_model("google/gemma-3-12b-it")
    vc = gemma3.raw["vision_config"]
    h, inter, n = vc["hidden_size"], vc["intermediate_size"], vc["num_hidden_layers"]
    blocks = n * (4 * h * h + 2 * h * inter + 3 * h + inter)  # linears and their column-parallel biases
    assert params.vision_params(gemma3, 1) - params.vision_params(gemma3, 2) == blocks - blocks // 2
