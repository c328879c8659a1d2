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
