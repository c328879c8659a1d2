"""The shared tiny-Llama server is real: it streams, counts tokens, and sizes its KV cache as computed."""

from __future__ import annotations

import math

import pytest

from tests.vllm_server import (
    Metrics,
    expected_kv_line_tokens,
    parse_kv_lines,
    post_json,
    scrape_metrics,
    stream_sse,
)
from tests.vllm_server.fixtures import SHARED

SHARED_KVCACHE_GIB = int(SHARED.env_dict["VLLM_CPU_KVCACHE_SPACE"])
SHARED_MAX_MODEL_LEN = int(SHARED.arg("--max-model-len"))

pytestmark = pytest.mark.vllm

CPU_DEFAULT_BLOCK_SIZE = 128  # vLLM CPU build default (not printed at start-up; see /metrics)


def test_chat_completion_streams_tokens(tiny_llama_server):
    body = {
        "model": tiny_llama_server.served_model_name,
        "messages": [{"role": "user", "content": "Count to ten."}],
        "max_tokens": 16,
        "min_tokens": 16,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream_options": {"include_usage": True},
    }
    content_chunks = []
    usage = None
    finish = None
    for ev in stream_sse(tiny_llama_server.base_url, "/v1/chat/completions", body, timeout=60):
        for ch in ev.get("choices") or []:
            delta = ch.get("delta") or {}
            if delta.get("content"):
                content_chunks.append(delta["content"])
            finish = ch.get("finish_reason") or finish
        usage = ev.get("usage") or usage
    assert len(content_chunks) >= 4, f"expected several SSE chunks with content, got {content_chunks!r}"
    assert usage is not None and usage["completion_tokens"] == 16
    assert finish == "length"


def test_generation_tokens_counter_moves_by_usage(tiny_llama_server):
    url = tiny_llama_server.base_url
    before = scrape_metrics(url).value("vllm:generation_tokens_total")
    r = post_json(
        url,
        "/v1/completions",
        {
            "model": tiny_llama_server.served_model_name,
            "prompt": "The quick brown fox",
            "max_tokens": 37,
            "min_tokens": 37,
            "ignore_eos": True,
            "temperature": 0.0,
        },
        timeout=60,
    )
    generated = r["usage"]["completion_tokens"]
    assert generated == 37
    after = scrape_metrics(url).value("vllm:generation_tokens_total")
    assert after - before == generated


def test_kv_cache_line_matches_space_and_shape(tiny_llama_server, tiny_llama_model):
    spec = tiny_llama_model.spec
    # bytes per token = layers x kv_heads x 2 (K,V) x head_dim x dtype bytes (float32 KV: --dtype float32)
    bytes_per_token = spec.num_layers * spec.num_kv_heads * 2 * spec.head_dim * 4
    assert bytes_per_token == 2 * 2 * 2 * 64 * 4 == spec.kv_bytes_per_token("float32")
    space = SHARED_KVCACHE_GIB * 1024**3  # VLLM_CPU_KVCACHE_SPACE is in GiB
    block_bytes = CPU_DEFAULT_BLOCK_SIZE * bytes_per_token
    num_blocks = space // block_bytes
    L = SHARED_MAX_MODEL_LEN
    exp_tokens = int(num_blocks / math.ceil(L / CPU_DEFAULT_BLOCK_SIZE) * L)
    exp_conc = num_blocks / math.ceil(L / CPU_DEFAULT_BLOCK_SIZE)
    assert (exp_tokens, exp_conc) == expected_kv_line_tokens(num_blocks, CPU_DEFAULT_BLOCK_SIZE, L)

    lines = parse_kv_lines(tiny_llama_server.log_text())
    assert len(lines) == 1, lines
    kv = lines[0]
    assert kv.device == "CPU"
    assert kv.max_model_len == L
    assert kv.tokens == exp_tokens, kv.line
    assert kv.concurrency == pytest.approx(round(exp_conc, 2)), kv.line
    expected = f"CPU KV cache size: {exp_tokens:,} tokens, Maximum concurrency for {L:,} tokens per request: {exp_conc:.2f}x"
    assert expected in kv.line

    # /metrics agrees: block size, number of blocks, bytes.
    info = Metrics.parse(tiny_llama_server.metrics_text()).series("vllm:cache_config_info")
    assert len(info) == 1
    labels = info[0][0]
    assert int(labels["block_size"]) == CPU_DEFAULT_BLOCK_SIZE
    assert int(labels["num_gpu_blocks"]) == num_blocks
    assert int(labels["kv_cache_memory_bytes"]) == space
