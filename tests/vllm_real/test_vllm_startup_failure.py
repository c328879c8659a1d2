"""A KV cache too small for --max-model-len makes vLLM's start-up fail with its own error text."""

from __future__ import annotations

import re

import pytest

from tests.vllm_server.fixtures import KV_TOO_SMALL

pytestmark = pytest.mark.vllm

BLOCK_SIZE = 128  # CPU default


def test_too_small_kv_cache_fails_startup(kv_too_small_exit, tiny_llama_model):
    res = kv_too_small_exit
    max_model_len = int(KV_TOO_SMALL.arg("--max-model-len"))
    kv_bytes = int(KV_TOO_SMALL.arg("--kv-cache-memory-bytes"))
    block_bytes = BLOCK_SIZE * tiny_llama_model.spec.kv_bytes_per_token("float32")  # 128 x 2,048 B = 256 KiB
    assert kv_bytes // block_bytes == 4  # 512 tokens, far below 2048

    assert res.returncode != 0, res.log_text[-3000:]
    log = res.log_text
    assert f"To serve at least one request with the model's max seq len ({max_model_len})" in log, log[-3000:]
    # vLLM holds one block back (the null block) before estimating: (4 - 1) blocks x 128 tokens.
    expected_len = (kv_bytes // block_bytes - 1) * BLOCK_SIZE
    m = re.search(r"the estimated maximum model length is (\d+)\.", log)
    assert m, log[-3000:]
    assert int(m.group(1)) == expected_len == 384
    assert "RuntimeError: Engine core initialization failed" in log
    # The KV line is printed only once the cache is created: never reached here.
    assert "KV cache size:" not in log
    # Nothing of that run is left (API server, EngineCore, worker: all seen, all reaped).
    assert len(res.pids) >= 2, res.pids
    assert res.leftover_pids == ()
