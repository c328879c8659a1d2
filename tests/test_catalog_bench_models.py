"""The models the published vLLM benchmarks use (issue 15), added to the catalog: KV bytes per
token by hand (layers x 2 (K and V) x KV heads x head_dim x 2 bytes of bf16) and the parameter
counts against the published ones."""
from __future__ import annotations

import pytest

from kvplan.memory import PlanRequest, plan
from kvplan.hardware import find_gpu
from kvplan.models import load_model


@pytest.mark.parametrize("name,layers,kv_heads,head_dim", [
    ("Qwen/Qwen2-7B-Instruct", 28, 4, 128),       # 57,344 B
    ("qwen2-72b", 80, 8, 128),                     # 327,680 B
    ("Qwen/Qwen2.5-32B", 64, 8, 128),              # 262,144 B
    ("glm-4.5-air", 46, 8, 128),                   # 188,416 B: the MTP layer has no cache without speculation
    ("seed-oss-36b", 64, 8, 128),                  # 262,144 B
])
def test_kv_bytes_per_token_by_hand(name, layers, kv_heads, head_dim):
    res = plan(PlanRequest(model=load_model(name), gpu=find_gpu("H100"), max_model_len=4096), what_ifs=False)
    assert res.kv.bytes_per_token_logical == layers * 2 * kv_heads * head_dim * 2


@pytest.mark.parametrize("name,published,rel", [
    ("Qwen/Qwen2-7B-Instruct", 7.62e9, 0.002),   # model card 7.6B (safetensors total 7,615,616,512)
    ("qwen2-72b", 72.7e9, 0.002),                # model card 72.7B
    ("Qwen/Qwen2.5-32B", 32.76e9, 0.002),        # safetensors total 32,763,876,352
    ("glm-4.5-air", 106e9, 0.01),                # model card: 106B total
    ("seed-oss-36b", 36.15e9, 0.01),             # model card: 36B (36.15B in its safetensors index)
])
def test_parameter_counts_match_the_published_ones(name, published, rel):
    spec = load_model(name)
    from kvplan.models.params import count_params

    assert count_params(spec) == pytest.approx(published, rel=rel)


def test_glm_4_5_air_is_moe_with_one_dense_layer_and_12b_active():
    spec = load_model("zai-org/GLM-4.5-Air")
    kinds = [type(layer.mlp).__name__ for layer in spec.layers]
    assert kinds[0] == "DenseMLP" and set(kinds[1:]) == {"MoEMLP"}
    from kvplan.models.params import active_params

    # model card: 12B active; kvplan counts the embedding and LM head in the active figure too
    assert active_params(spec) - 2 * 151552 * 4096 == pytest.approx(12e9, rel=0.02)


@pytest.mark.parametrize("name,layers,per_layer_bytes", [
    ("deepseek-v3.1", 61, 576 * 2),                 # MLA latent 512 + rope 64, bf16
    ("kimi-k2", 61, 576 * 2),
    ("deepseek-v3.2", 61, 576 * 2 + 128 + 4),       # + the indexer's K: 128 fp8 values + one fp32 scale
    ("glm-4.5", 92, 2 * 8 * 128 * 2),
    ("glm-4.6", 92, 2 * 8 * 128 * 2),
    ("qwen3-coder-480b", 62, 2 * 8 * 128 * 2),
    ("qwen3-30b-a3b-instruct-2507", 48, 2 * 4 * 128 * 2),
    ("qwen3-235b-a22b-instruct-2507-fp8", 94, 2 * 4 * 128 * 2),
    ("minimax-m2", 62, 2 * 8 * 128 * 2),
    ("hunyuan-a13b", 32, 2 * 8 * 128 * 2),
    ("nemotron-3-nano", 6, 2 * 2 * 128 * 2),        # only the 6 attention layers hold per-token KV
    ("granite-4.0-h-small", 4, 2 * 8 * 128 * 2),    # 4 attention layers among 36 Mamba-2 ones
])
def test_more_kv_bytes_per_token_by_hand(name, layers, per_layer_bytes):
    res = plan(PlanRequest(model=load_model(name), gpu=find_gpu("H200"), tensor_parallel_size=8, max_model_len=4096),
               what_ifs=False)
    assert res.kv.bytes_per_token_logical == layers * per_layer_bytes


@pytest.mark.parametrize("name,published,rel", [
    ("deepseek-v3.1", 671e9, 0.003),
    ("kimi-k2", 1.04e12, 0.02),
    ("qwen3-coder-480b", 480e9, 0.002),
    ("qwen3-30b-a3b-instruct-2507", 30.5e9, 0.003),
    ("qwen3-235b-a22b-thinking-2507", 235e9, 0.002),
    ("glm-4.5", 355e9, 0.01),
    ("minimax-m2", 230e9, 0.01),
    ("ernie-4.5-21b", 21.8e9, 0.01),
    ("hunyuan-a13b", 80e9, 0.01),
    ("nemotron-3-nano", 31.6e9, 0.002),
    ("granite-4.0-h-small", 32.2e9, 0.005),
])
def test_more_parameter_counts(name, published, rel):
    from kvplan.models.params import count_params

    assert count_params(load_model(name)) == pytest.approx(published, rel=rel)


def test_nemotron_h_mamba2_state_by_hand():
    # vLLM mamba2_state_shape: conv (4 - 1) x (64*64 + 2*8*128) bf16, temporal 64 x 64 x 128 in
    # float32 (mamba_ssm_cache_dtype from the config); at TP 2 every term halves (8 groups divide)
    from kvplan.memory.kv_specs import KVDtype, kv_spec_for

    spec = load_model("nemotron-3-nano")
    mamba = next(layer.mixer for layer in spec.layers if layer.mixer.kind == "linear")
    kv = KVDtype("auto", 2)
    assert kv_spec_for(mamba, 1, 16, kv).page_size_bytes == 3 * 6144 * 2 + 64 * 64 * 128 * 4
    assert kv_spec_for(mamba, 2, 16, kv).page_size_bytes == 3 * 3072 * 2 + 32 * 64 * 128 * 4
    mixers = "".join("M" if layer.mixer.kind == "linear" else "*" for layer in spec.layers)
    assert mixers.count("M") == 23 and mixers.count("*") == 6
    from kvplan.models.params import active_params

    assert active_params(spec) == pytest.approx(3.6e9, rel=0.01)  # model card: 3.6B with the embeddings


def test_granite_hybrid_mamba2_from_a_config(tmp_path):
    import json

    cfg = {"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "hidden_size": 1536,
           "num_hidden_layers": 4, "num_attention_heads": 12, "num_key_value_heads": 4, "vocab_size": 1000,
           "intermediate_size": 512, "num_local_experts": 8, "num_experts_per_tok": 2, "shared_intermediate_size": 1024,
           "layer_types": ["mamba", "mamba", "mamba", "attention"], "mamba_n_heads": 48, "mamba_d_head": 64,
           "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4, "max_position_embeddings": 4096,
           "torch_dtype": "bfloat16"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    spec = load_model(str(p))
    from kvplan.memory.kv_specs import KVDtype, kv_spec_for

    m = spec.layers[0].mixer
    # n_groups 1 at TP 2: extended to 2 groups (extra_groups_for_head_shards)
    assert kv_spec_for(m, 2, 16, KVDtype("auto", 2)).page_size_bytes == \
        3 * ((48 * 64 + 2 * 2 * 128) // 2) * 2 + 24 * 64 * 128 * 2
    assert spec.layers[3].mixer.kind == "full" and spec.layers[0].mlp.shared_intermediate_size == 1024


@pytest.mark.parametrize("name,params", [("amd/Llama-3.1-70B-Instruct-FP8-KV", 70.55e9),
                                         ("amd/Llama-3.1-405B-Instruct-FP8-KV", 405.85e9)])
def test_amd_quark_fp8_checkpoints_weigh_one_byte_per_linear_weight(name, params):
    spec = load_model(name)
    assert spec.quantization.method == "fp8"
    res = plan(PlanRequest(model=spec, gpu=find_gpu("MI300X"), tensor_parallel_size=8, max_model_len=8192,
                           kv_cache_dtype="fp8"), what_ifs=False)
    from kvplan.models.params import count_params

    assert count_params(spec) == pytest.approx(params, rel=0.002)
    # about 1 byte per parameter over 8 GPUs, the bf16 embedding and LM head on top
    assert res.memory.weights_gib_per_gpu * 2**30 == pytest.approx(params / 8, rel=0.06)
    assert res.kv.bytes_per_token_logical == len(spec.layers) * 2 * 8 * 128 * 1


@pytest.mark.parametrize("name,layers,text_params,rel", [
    # KV: layers x 2 x 8 KV heads x 128 x 2 B (bf16 KV: the FP8 checkpoint quantizes weights only)
    ("mistralai/Ministral-3-3B-Instruct-2512", 26, 3.4e9, 0.01),    # model card: 3.4B language model (tied)
    ("ministral-3-8b", 34, 8.4e9, 0.011),                            # model card: 8.4B language model
    ("ministral-3-14b", 40, 13_506_073_600, 0.0),                    # the BF16 config's exact text count
])
def test_ministral_3_plans_with_fp8_weights_and_bf16_kv(name, layers, text_params, rel):
    from kvplan.models.params import count_params

    spec = load_model(name)
    assert spec.quantization.method == "fp8" and spec.quantization.weight_block is None  # per-tensor scales
    assert count_params(spec, include_vision=False) == pytest.approx(text_params, rel=rel)
    res = plan(PlanRequest(model=spec, gpu=find_gpu("MI300X")), what_ifs=False)
    assert res.startup.ok and res.flags.max_model_len == 262_144  # the 256k context of the model card
    assert res.kv.bytes_per_token_logical == layers * 2 * 8 * 128 * 2
    # one byte per linear weight; embedding, LM head (untied 8B/14B) and the 0.4B vision tower in
    # bf16; plus the RoPE cos/sin cache over 262,144 positions
    from kvplan.memory.budget import rope_cache_bytes

    h, v = spec.hidden_size, spec.vocab_size
    linear = count_params(spec, include_vision=False) - v * h * (1 if spec.tie_word_embeddings else 2)
    from kvplan.memory._resolve import resolve
    from kvplan.memory.allocator import rounding_bytes

    from kvplan.models.params import vision_params

    # the model card's 0.4B vision encoder, plus Mistral-3's projector (norm, patch merger, linear_1/_2)
    assert vision_params(spec) == pytest.approx(0.407e9 + 1024 * 4 * 1024 + 1024 * h + h * h, rel=0.01)
    expect = linear + 2 * v * h * (1 if spec.tie_word_embeddings else 2) + 2 * vision_params(spec) \
        + rope_cache_bytes(spec, 2)
    # and the blocks the caching allocator hands out for them (kvplan.memory.allocator): under 1 %
    blocks = rounding_bytes(resolve(PlanRequest(model=spec, gpu=find_gpu("MI300X"))).weights[0].tensor_bytes)
    assert 0 <= blocks < 0.01 * expect
    expect += blocks
    assert res.memory.weights_gib_per_gpu * 2**30 == pytest.approx(expect, rel=0.003)
