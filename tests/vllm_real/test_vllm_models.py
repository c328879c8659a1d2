"""The tiny model folders: deterministic, cached by a hash of the spec, real tokenizer + chat template."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.vllm_server import build_model, tiny_llama_spec

pytestmark = pytest.mark.vllm


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_tiny_llama_shape_tokenizer_and_template(tiny_llama_model):
    d = tiny_llama_model.path
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]) == (2, 256, 4)
    assert (cfg["num_key_value_heads"], cfg["head_dim"], cfg["max_position_embeddings"]) == (2, 64, 4096)
    tok = json.loads((d / "tokenizer.json").read_text())
    max_id = max([*tok["model"]["vocab"].values(), *(t["id"] for t in tok.get("added_tokens", []))])
    assert cfg["vocab_size"] == max_id + 1 == tiny_llama_model.vocab_size
    tcfg = json.loads((d / "tokenizer_config.json").read_text())
    assert "{% for message in messages %}" in tcfg["chat_template"]
    assert "auto_map" not in tcfg  # never custom code
    assert (d / "model.safetensors").stat().st_size > 0


def test_model_cache_is_keyed_by_spec(tiny_llama_model):
    again = build_model(tiny_llama_model.spec)
    assert again.path == tiny_llama_model.path and not again.built
    assert tiny_llama_spec().key() == tiny_llama_model.spec.key()
    assert tiny_llama_spec(seed=1).key() != tiny_llama_model.spec.key()
    assert tiny_llama_spec(num_hidden_layers=3).key() != tiny_llama_model.spec.key()


def test_build_is_deterministic(tiny_llama_model, tmp_path):
    fresh = build_model(tiny_llama_model.spec, cache_dir=tmp_path)
    assert fresh.built
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"):
        assert _sha(fresh.path / name) == _sha(tiny_llama_model.path / name), name
