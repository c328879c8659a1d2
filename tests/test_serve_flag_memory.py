"""LoRA, speculative decoding, CPU offload, swap space and chunked prefill change exactly the plan terms
vLLM changes, by the sizes read from its source (kvplan.memory.lora, spec_decode, offload; the figures
below are written out from the tensor shapes in vLLM's code, not computed by the code under test)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvplan.errors import UsageError
from kvplan.hardware import GIB, find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.memory.budget import SAMPLER_NATIVE_TRITON_BYTES_PER_LOGIT
from kvplan.memory.spec_decode import parse_speculative_config
from kvplan.models import load_model
from plan_helpers import DEEPSEEK_V3, model

LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"  # H 4096, kv 8 x 128, I 14336, 32 layers, vocab 128256
H, KV, I, V, L = 4096, 1024, 14336, 128256, 32


def _plan(version="0.19", spec=None, gpu="H100", **kw):
    return plan(PlanRequest(spec or load_model(LLAMA8B), find_gpu(gpu), vllm_version=version, **kw), what_ifs=False)


def _lora_elements_019(r: int, m: int = 1) -> int:
    """Llama-3.1-8B's stacked LoRA buffers on one rank (TP 1), 0.19.0 shapes: per decoder layer the q/k/v
    slices (A r x H each, B out x r), o (A r x H, B H x r), gate/up (2 x A r x H, 2 x B I x r), down
    (A r x I, B H x r); the embedding (A V x r, B H x r) and the logits processor (A r x H, B V x r)."""
    per_layer = (3 * r * H + (H + 2 * KV) * r) + (r * H + H * r) + (2 * r * H + 2 * I * r) + (r * I + H * r)
    return m * (L * per_layer + (V * r + H * r) + (r * H + V * r))


def test_lora_buffers_are_the_stacked_a_and_b_of_every_module_at_max_rank():
    base, lora = _plan(), _plan(enable_lora=True, max_loras=4, max_lora_rank=64)
    expected = _lora_elements_019(64, 4) * 2  # bf16
    assert lora.memory.lora_gib == pytest.approx(expected / GIB, abs=1e-4)
    # the weights, the KV layout and (sampler-bound profile) the activation peak do not move
    assert lora.memory.weights_gib_per_gpu == base.memory.weights_gib_per_gpu
    assert lora.kv.bytes_per_block == base.kv.bytes_per_block
    assert lora.memory.activation_peak_gib == base.memory.activation_peak_gib
    # 0.19 subtracts no CUDA-graph estimate, so the KV memory falls by exactly the buffers
    delta = base.memory.available_kv_cache_bytes - lora.memory.available_kv_cache_bytes
    assert delta == expected
    assert lora.flags.lora.cudagraph_cases == 2


def test_lora_up_to_0_11_reserves_the_extra_vocabulary():
    r, extra = 16, 256
    lora = _plan("0.11", enable_lora=True)
    per_layer = (3 * r * H + (H + 2 * KV) * r) + (r * H + H * r) + (2 * r * H + 2 * I * r) + (r * I + H * r)
    embedding = (V + extra) * r + H * r + extra * H
    logits = r * H + 128512 * r + extra * H  # ceil((V + 256) / 256) * 256 rows
    base_vocab = 256 * H + 256 * H  # embedding grows by 256 rows; LM head padded to 256 (128,256 + 256 rows)
    expected = (L * per_layer + embedding + logits + base_vocab) * 2
    assert lora.memory.lora_gib == pytest.approx(expected / GIB, abs=1e-4)
    assert lora.flags.lora.extra_vocab == 256
    assert lora.flags.lora.cudagraph_cases == 1


def test_lora_doubles_the_cuda_graph_estimate_where_vllm_captures_with_and_without_it():
    base, lora = _plan("0.21"), _plan("0.21", enable_lora=True)
    assert lora.memory.cudagraph_gib > base.memory.cudagraph_gib
    from kvplan.memory.budget import GRAPH_BASE_BYTES, GRAPH_PER_LAYER_BYTES, cudagraph_capture_sizes

    n = len(cudagraph_capture_sizes(base.flags.max_num_seqs))
    per_graph = GRAPH_BASE_BYTES + GRAPH_PER_LAYER_BYTES * L
    assert (lora.memory.cudagraph_gib - base.memory.cudagraph_gib) * GIB == pytest.approx(2 * per_graph * n, abs=2e5)


def test_lora_config_errors_are_vllms():
    r = _plan(enable_lora=True, max_loras=4, max_cpu_loras=2)
    assert r.startup.error_kind == "lora_config" and "max_cpu_loras (2) must be >= max_loras (4)" in r.startup.error
    r = _plan("0.11", enable_lora=True, max_lora_rank=1)
    assert "max_lora_rank (1) must be one of" in r.startup.error
    assert _plan("0.19", enable_lora=True, max_lora_rank=1).startup.ok
    r = _plan("0.9.2", engine="v0", enable_lora=True, cpu_offload_gb=1)
    assert r.startup.error == "V0 LoRA does not support CPU offload, please use V1."


def test_lora_host_cache_holds_max_cpu_loras_whole_adapters():
    r = _plan(enable_lora=True, max_loras=2, max_cpu_loras=8, max_lora_rank=16, tensor_parallel_size=2)
    whole = _lora_elements_019(16) * 2  # unsharded: what the checkpoint holds at rank 16
    assert r.flags.lora.adapter_gib == pytest.approx(whole / GIB, abs=1e-3)
    assert r.memory.host.lora_cache_gib == pytest.approx(8 * whole / GIB, abs=1e-3)


def _eagle_head_bytes() -> int:
    """One Llama-3.1-8B decoder layer (q/o H x H, k/v H x 1024, gate/up/down 3 x H x I, two norms) plus
    fc (2H -> H), bf16: llama_eagle.py (0.19.0); embedding and LM head shared with the target."""
    layer = 2 * H * H + 2 * H * KV + 3 * H * I + 2 * H
    return (layer + 2 * H * H) * 2


def test_eagle_adds_its_head_one_kv_layer_and_the_rejection_sampler_profile():
    spec = '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'
    base, r = _plan(), _plan(speculative_config=spec)
    assert r.memory.draft_weights_gib == pytest.approx(_eagle_head_bytes() / GIB, abs=1e-4)
    page = 16 * KV * 2 * 2  # 16 tokens x (K + V) x 8 heads x 128 x bf16 on one layer
    assert base.kv.bytes_per_block == L * page and r.kv.bytes_per_block == (L + 1) * page
    assert r.flags.speculative.kv_layers == 1 and r.flags.speculative.lookahead_tokens == 3
    # the profile's sampler phase: 1,024 rows x vocabulary at the rejection sampler's 22 B per logit
    # (2 x 2 B logits + 4 B raw_logits + 14 B Triton sampler, 0.19.0) instead of the sampler's 14 B
    rows = base.flags.max_num_seqs
    delta = (r.memory.activation_peak_gib - base.memory.activation_peak_gib) * GIB
    assert delta == pytest.approx(rows * V * (22 - SAMPLER_NATIVE_TRITON_BYTES_PER_LOGIT), rel=1e-3)


def test_rejection_sampler_of_0_11_sorts_the_target_logits():
    base = _plan("0.11")
    r = _plan("0.11", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    rows = base.flags.max_num_seqs
    # 0.11.0: the sampler's logits (2) and the target logits (2) held, torch.sort of the bf16 target
    # logits (values 2 + indices 8 + reverse indices 8 + CUB alternates 2 + 8): 32 B against FlashInfer's 14
    delta = (r.memory.activation_peak_gib - base.memory.activation_peak_gib) * GIB
    assert delta == pytest.approx(rows * V * (32 - 14), rel=1e-3)
    assert r.memory.draft_weights_gib == 0 and r.kv.bytes_per_block == base.kv.bytes_per_block
    assert r.flags.speculative.lookahead_tokens == 0


def test_eagle3_head_keeps_its_own_draft_vocabulary_lm_head():
    r = _plan(speculative_config={"method": "eagle3", "num_speculative_tokens": 2})
    layer = 2 * H * H + 2 * H * KV + 3 * H * I + 2 * H
    qkv_twice = H * H + 2 * H * KV  # q/k/v take the 2H-wide input
    head = layer + qkv_twice + 3 * H * H + 2 * H + 32000 * H
    assert r.memory.draft_weights_gib == pytest.approx((head * 2 + 32000 * 8) / GIB, abs=1e-4)
    assert any("32,000-token draft vocabulary" in n for n in r.notes)


def test_mtp_adds_one_mla_layer_and_keeps_its_own_lm_head_before_0_19():
    spec = model(DEEPSEEK_V3, "deepseek-v3")
    new = _plan("0.19", spec=spec, gpu="H200", tensor_parallel_size=8, speculative_config={"method": "mtp"})
    old = _plan("0.14", spec=spec, gpu="H200", tensor_parallel_size=8, speculative_config={"method": "mtp"})
    base = _plan("0.19", spec=spec, gpu="H200", tensor_parallel_size=8)
    assert new.flags.speculative.kv_layers == 1 and new.flags.speculative.num_speculative_tokens == 1
    assert new.kv.bytes_per_block == base.kv.bytes_per_block // 61 * 62
    head = -(-129280 // 64) * 64 // 8 * 7168 * 2  # the vocabulary-parallel LM head on one of 8 ranks, bf16
    assert (old.memory.draft_weights_gib - new.memory.draft_weights_gib) * GIB == pytest.approx(head, rel=1e-3)


def test_draft_models_follow_the_versions_rules():
    draft = load_model("meta-llama/Llama-3.2-1B-Instruct")
    cfg = parse_speculative_config({"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4})
    from dataclasses import replace

    cfg = replace(cfg, draft=draft)
    ok = _plan("0.19", speculative_config=cfg)
    assert ok.flags.speculative.method == "draft_model" and ok.flags.speculative.kv_layers == draft.num_layers
    refused = _plan("0.14", speculative_config=cfg)
    assert refused.startup.error_kind == "speculative_config"
    assert "draft model is not supported yet" in refused.startup.error
    assert _plan("0.9.2", speculative_config=cfg).engine == "V0"


def test_speculative_config_is_checked_like_vllms_parser():
    with pytest.raises(UsageError, match="unknown key"):
        parse_speculative_config('{"methd": "eagle"}')
    with pytest.raises(UsageError, match="not JSON"):
        parse_speculative_config("{method: eagle}")
    with pytest.raises(UsageError, match="num_speculative_tokens"):
        parse_speculative_config({"method": "eagle", "num_speculative_tokens": 0})
    with pytest.raises(UsageError, match="unsupported speculative method"):
        _plan(speculative_config={"method": "lookahead", "num_speculative_tokens": 2})


def test_cpu_offload_moves_whole_parameters_in_layer_order_until_the_limit():
    base, r = _plan(), _plan(cpu_offload_gb=2)
    moved = r.memory.cpu_offload_gib * GIB
    largest_param = 2 * H * I * 2  # gate_up_proj, bf16
    assert 2 * GIB <= moved < 2 * GIB + largest_param
    assert r.memory.weights_gib_per_gpu == pytest.approx(base.memory.weights_gib_per_gpu - r.memory.cpu_offload_gib,
                                                         abs=1e-3)
    assert r.memory.available_kv_cache_gib == pytest.approx(base.memory.available_kv_cache_gib + moved / GIB,
                                                            abs=1e-3)
    assert r.memory.host.cpu_offload_gib == r.memory.cpu_offload_gib


def test_v0_copies_an_offloaded_layer_back_for_every_forward():
    v1, v0 = _plan("0.8.5", cpu_offload_gb=2), _plan("0.8.5", engine="v0", cpu_offload_gb=2)
    assert v1.memory.cpu_offload_gib == v0.memory.cpu_offload_gib
    v0_base = _plan("0.8.5", engine="v0")
    # V0's peak is the forward's when a whole layer (0.44 GiB in bf16) comes back: more than without offload
    assert v0.memory.activation_peak_gib >= v0_base.memory.activation_peak_gib


def test_v0_swap_space_sets_the_cpu_blocks_and_is_checked_against_host_memory():
    r = _plan("0.6.4", swap_space=8)
    assert r.kv.log_lines[0].endswith(f"# CPU blocks: {8 * GIB // r.kv.bytes_per_block}")
    assert r.memory.host.swap_space_gib == 8
    big = _plan("0.6.4", swap_space=64, tensor_parallel_size=2, host_memory_bytes=128 * GIB)
    assert big.startup.error_kind == "swap_space"
    assert big.startup.error.startswith("Too large swap space. 128.00 GiB out of the 128.00 GiB total CPU memory")
    assert _plan("0.19", swap_space=64, host_memory_bytes=64 * GIB).startup.ok  # removed in 0.18


def test_chunked_prefill_switch_per_version():
    off = _plan("0.19", enable_chunked_prefill=False, max_model_len=32768)
    on = _plan("0.19", max_model_len=32768)
    assert on.flags.max_num_batched_tokens == 8192 and off.flags.max_num_batched_tokens == 32768
    assert not off.flags.chunked_prefill
    forced = _plan("0.11", enable_chunked_prefill=False, max_model_len=32768)
    assert forced.flags.max_num_batched_tokens == 8192 and forced.flags.chunked_prefill
    # V0 chunks above 32K by itself, but not with LoRA (0.8.5 _set_default_args_v0)
    assert _plan("0.8.5", engine="v0", max_model_len=65536).flags.max_num_batched_tokens == 2048
    lora = _plan("0.8.5", engine="v0", max_model_len=65536, enable_lora=True)
    assert lora.flags.max_num_batched_tokens == 65536 and not lora.flags.chunked_prefill


def test_serve_command_and_renderers_carry_the_flags():
    from kvplan.report.registry import render

    r = plan(PlanRequest(load_model(LLAMA8B), find_gpu("H100"), vllm_version="0.19", enable_lora=True, max_loras=2,
                         speculative_config={"method": "eagle3", "num_speculative_tokens": 3}, cpu_offload_gb=1))
    assert "--enable-lora" in r.serve_argv and "--max-loras" in r.serve_argv
    assert '{"method":"eagle3","num_speculative_tokens":3}' in r.serve_argv
    md = render("plan", "markdown", r)
    assert "| LoRA adapters |" in md and "| draft model |" in md and "Host memory per GPU worker" in md
    d = r.to_dict()
    assert d["memory"]["lora_gib"] > 0 and d["flags"]["speculative"]["method"] == "eagle3"


def test_v0_does_not_charge_a_draft_model_and_runs_out_of_memory_when_it_does_not_fit():
    """V0 0.6.5+ sizes the KV cache without the draft weights it holds (vLLM issue #9995, PR #14067):
    a 7B draft at TP 4 beside Qwen2.5-32B at 0.9 of an A100-40GB leaves no room for them."""
    from dataclasses import replace

    cfg = replace(parse_speculative_config({"model": "Qwen/Qwen2.5-7B-Instruct", "num_speculative_tokens": 5}),
                  draft=load_model("Qwen/Qwen2.5-7B-Instruct"))
    kw = dict(spec=load_model("Qwen/Qwen2.5-32B-Instruct"), gpu="A100-40GB", tensor_parallel_size=4,
              max_model_len=1000, speculative_config=cfg)
    base = _plan("0.7.3", engine="v0", spec=kw["spec"], gpu="A100-40GB", tensor_parallel_size=4, max_model_len=1000)
    r = _plan("0.7.3", engine="v0", gpu_memory_utilization=0.9, **kw)
    assert r.memory.draft_weights_gib > 3  # on the GPU, in the breakdown ...
    assert r.memory.available_kv_cache_gib == pytest.approx(base.memory.available_kv_cache_gib, abs=0.01)  # ... uncharged
    assert r.startup.error_kind == "oom_uncharged"
    assert _plan("0.7.3", engine="v0", gpu_memory_utilization=0.8, **kw).startup.ok


def test_a_public_lora_log_loads_the_lora_tensors_with_the_weights_and_sizes_the_kv_cache():
    """Fixture 302 (vLLM 0.8.2 V1, Llama-3.1-8B, --max-loras 2 --max-lora-rank 16 on a 40 GB A100):
    "Model loading took 15.1749 GB" counts the LoRA tensors, and 148,096 tokens = 9,256 blocks."""
    from kvplan.hardware import find_gpu
    from kvplan.memory.startup_log import parse_startup_log

    log = parse_startup_log((Path(__file__).parent / "fixtures" / "vllm_logs" /
                             "302-llama31-8b-a100-40gb-v1-0.8.2-lora.log").read_text())
    flags = dict(vllm_version=log.vllm_version, gpu_memory_utilization=log.gpu_memory_utilization)
    lora = dict(enable_lora=True, max_loras=2, max_lora_rank=16, max_cpu_loras=12)
    gpu = find_gpu("A100-SXM4-40GB")
    r = plan(PlanRequest(load_model("meta-llama/Llama-3.1-8B-Instruct"), gpu, **flags, **lora), what_ifs=False)
    bare = plan(PlanRequest(load_model("meta-llama/Llama-3.1-8B-Instruct"), gpu, **flags), what_ifs=False)
    logged_kv = log.kv_cache_tokens // 16 * r.kv.bytes_per_block / GIB
    assert abs(r.memory.loaded_gib - log.model_loading_gib) < 0.01
    assert abs(r.memory.available_kv_cache_gib - logged_kv) < 0.05
    assert bare.memory.available_kv_cache_gib - logged_kv > 0.15  # the LoRA term is what closes the gap


def test_public_speculative_runs_kept_as_figures_are_scored_with_the_flags_own_effect():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from plan_accuracy_flags import FLAG_RUNS, flag_rows

    rows = {r["log"]: r for r in flag_rows()}
    assert set(rows) == {run["name"] for run in FLAG_RUNS} and all(r["set"] == "flags" for r in rows.values())
    ngram = rows["vllm-lab:spec_ngram_ngram_r570_v018"]
    assert ngram["flag_effect_logged_gib"] == ngram["flag_effect_kvplan_gib"] == 0  # n-gram at 8 seqs: nothing
    eagle3 = rows["slo-lab:w1 q4b_eagle3"]
    assert abs(eagle3["weights_gib"] - eagle3["log_weights_gib"]) < 0.02  # the derived EAGLE-3 head: 0.41 GiB
    assert eagle3["flag_effect_kvplan_gib"] < eagle3["flag_effect_logged_gib"] < 0


def test_v2_model_runner_by_version_architecture_and_method():
    """VllmConfig.use_v2_model_runner without the environment variable (read in 0.22.0-0.33.0)."""
    from kvplan.memory.semantics import semantics

    def v2(version, arch="Qwen3ForCausalLM", method=None, **kw):
        flags = {"moe": False, "quantized": False, "hybrid": False, **kw}
        return semantics(version).v2_model_runner((arch,), spec_method=method, **flags)

    assert not v2("0.21") and v2("0.22") and not v2("0.22", quantized=True) and v2("0.24", quantized=True)
    assert v2("0.24", "LlamaForCausalLM") and not v2("0.25", "LlamaForCausalLM") and not v2("0.28")
    assert v2("0.28", "DeepseekV2ForCausalLM") and v2("0.29", "LlamaForCausalLM")
    assert v2("0.24", method="eagle3") and not v2("0.24", method="ngram") and not v2("0.29", method="draft_model")
    assert v2("0.33", method="ngram") and not v2("0.33", method="suffix")


def test_the_v2_runner_profiles_no_rejection_sampler_and_until_0_28_no_cuda_graphs():
    """0.24.0's V2 runner (Qwen3 is a default architecture there): profile_run samples with the plain
    sampler, profile_cudagraph_memory returns 0; 0.28.0 runs Qwen3 on the V1 runner again."""
    qwen3 = load_model("Qwen/Qwen3-8B")
    eagle3 = {"method": "eagle3", "model": "head", "num_speculative_tokens": 2}
    base, spec = (_plan("0.24", qwen3, speculative_config=s) for s in (None, eagle3))
    assert base.memory.cudagraph_gib == spec.memory.cudagraph_gib == 0
    assert spec.memory.activation_peak_gib == base.memory.activation_peak_gib
    v1_base, v1_spec = (_plan("0.28", qwen3, speculative_config=s) for s in (None, eagle3))
    assert v1_base.memory.cudagraph_gib > 0 and v1_spec.memory.activation_peak_gib > v1_base.memory.activation_peak_gib
