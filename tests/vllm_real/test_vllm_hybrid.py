"""A Gemma-3 style model (sliding-window + full-attention layers) on vLLM's CPU build: the
hybrid KV cache's size line, computed from first principles."""

from __future__ import annotations

import math

import pytest

from tests.vllm_server import Metrics, parse_kv_lines, post_json
from tests.vllm_server.fixtures import GEMMA3_HYBRID

pytestmark = pytest.mark.vllm

MAX_MODEL_LEN = 2048
KV_GIB = 1
BLOCK = 128  # CPU default


def test_hybrid_sliding_window_kv_line(gemma3_server, gemma3_model):
    assert GEMMA3_HYBRID.arg("--max-model-len") == str(MAX_MODEL_LEN)
    assert GEMMA3_HYBRID.env_dict["VLLM_CPU_KVCACHE_SPACE"] == str(KV_GIB)
    srv = gemma3_server
    spec = gemma3_model.spec
    assert spec.config["layer_types"] == ["sliding_attention", "full_attention"]
    window = spec.config["sliding_window"]

    # Two KV cache groups (one layer each) share one block pool; a block holds one layer's page.
    page = BLOCK * spec.num_kv_heads * 2 * spec.head_dim * 4  # float32
    num_blocks = (KV_GIB * 1024**3) // page
    info = Metrics.parse(srv.metrics_text()).series("vllm:cache_config_info")[0][0]
    assert int(info["num_gpu_blocks"]) == num_blocks == 8192

    # Blocks one max-length request needs: full layer ceil(L/B); sliding layer
    # ceil(min(window - 1 + max_num_batched_tokens, L) / B) + 1, where max_num_batched_tokens is
    # 2048 (the CPU API-server default).
    max_num_batched_tokens = 2048
    full = math.ceil(MAX_MODEL_LEN / BLOCK)
    sliding = math.ceil(min(window - 1 + max_num_batched_tokens, MAX_MODEL_LEN) / BLOCK) + 1
    conc = num_blocks / (full + sliding)
    kv = parse_kv_lines(srv.log_text())
    assert len(kv) == 1
    assert kv[0].tokens == int(conc * MAX_MODEL_LEN) == 508_400, kv[0].line
    assert kv[0].concurrency == pytest.approx(round(conc, 2))

    r = post_json(
        srv.base_url,
        "/v1/completions",
        {
            "model": srv.served_model_name,
            "prompt": list(range(1000, 1600)),
            "max_tokens": 24,
            "min_tokens": 24,
            "ignore_eos": True,
        },
    )
    assert r["usage"] == {**r["usage"], "prompt_tokens": 600, "completion_tokens": 24}
