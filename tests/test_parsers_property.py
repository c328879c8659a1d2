"""Property-based tests (hypothesis) for kvplan's parsers: they never crash on garbage, and they
find the figures wherever vLLM's lines sit among other output."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from kvplan.errors import UsageError
from kvplan.memory.startup_log import parse_startup_log
from kvplan.models import spec_from_config

PREFIXES = st.sampled_from(["", "INFO 07-09 09:47:45 [gpu_worker.py:233] ",
                            "(VllmWorker rank=3 pid=19834) INFO 07-09 09:47:45 [gpu_worker.py:233] ",
                            "(EngineCore_DP0 pid=1094) INFO 11-30 12:00:00 [kv_cache_utils.py:1234] ",
                            "2026-11-30T10:00:00.000Z stdout F "])


@settings(max_examples=examples(300), deadline=None)
@given(st.text())
def test_log_parser_never_crashes_on_text(text):
    parse_startup_log(text)


@settings(max_examples=examples(200), deadline=None)
@given(st.binary())
def test_log_parser_never_crashes_on_bytes(data):
    parse_startup_log(data.decode("utf-8", errors="replace"))


@settings(max_examples=examples(200), deadline=None)
@given(prefix=PREFIXES, tokens=st.integers(1, 10**9), length=st.integers(1, 10**7),
       conc=st.floats(0, 10**5, allow_nan=False), noise=st.lists(st.text(), max_size=5),
       gib=st.floats(-100, 1000, allow_nan=False))
def test_log_parser_finds_figures_among_noise(prefix, tokens, length, conc, noise, gib):
    lines = list(noise) + [
        f"{prefix}Available KV cache memory: {gib:.2f} GiB",
        f"{prefix}GPU KV cache size: {tokens:,} tokens, Maximum concurrency for {length:,} tokens per request: "
        f"{conc:.2f}x",
    ] + list(noise)
    log = parse_startup_log("\n".join(lines))
    assert log.kv_cache_tokens == tokens
    assert log.concurrency_len == length
    assert log.max_concurrency == float(f"{conc:.2f}")
    assert float(f"{gib:.2f}") in log.available_kv_gib


@settings(max_examples=examples(100), deadline=None)
@given(st.text(max_size=2000))
def test_log_parser_survives_truncation(text):
    full = ("INFO Available KV cache memory: 12.13 GiB\nINFO GPU KV cache size: 807,792 tokens\n"
            "INFO Maximum concurrency for 1,024 tokens per request: 788.86x\n" + text)
    for cut in range(0, len(full), max(1, len(full) // 20)):
        parse_startup_log(full[:cut])


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                       lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
                       max_leaves=30)


@settings(max_examples=examples(300), deadline=None)
@given(st.dictionaries(st.sampled_from([
    "model_type", "hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "vocab_size",
    "head_dim", "intermediate_size", "sliding_window", "layer_types", "kv_lora_rank", "rope_scaling",
    "max_position_embeddings", "num_local_experts", "quantization_config", "text_config", "torch_dtype"]), JSONISH))
def test_config_parser_fails_only_with_usage_errors(cfg):
    try:
        spec_from_config(json.loads(json.dumps(cfg)), "fuzz.json")
    except UsageError as exc:
        assert "fuzz.json" in str(exc)
