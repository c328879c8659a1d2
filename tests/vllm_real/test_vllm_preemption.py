"""A bounded burst against a deliberately small KV cache makes vLLM preempt requests."""

from __future__ import annotations

import math

import pytest

from tests.vllm_server import parse_kv_lines, preemption_burst
from tests.vllm_server.fixtures import SMALL_KV

pytestmark = pytest.mark.vllm

BLOCK_SIZE = 32
NUM_BLOCKS = 160
MAX_MODEL_LEN = 2048
# 4 requests x (1000 prompt + 500 output): all 4 prompts fit at once (4 x 32 blocks <= 159 usable),
# but all 4 finished sequences would need 4 x 47 = 188 blocks > 159, so one must be preempted
# (about 270 tokens into decoding). Measured: +1 preemption in 6/6 runs, ~10 s per burst.
N_REQUESTS = 4
PROMPT_TOKENS = 1000
OUTPUT_TOKENS = 500


def test_burst_on_small_kv_cache_preempts(small_kv_server, vllm_servers):
    assert int(SMALL_KV.arg("--max-model-len")) == MAX_MODEL_LEN
    assert int(SMALL_KV.arg("--block-size")) == BLOCK_SIZE
    assert int(SMALL_KV.arg("--num-gpu-blocks-override")) == NUM_BLOCKS
    usable = NUM_BLOCKS - 1  # one null block is held back
    assert N_REQUESTS * math.ceil(PROMPT_TOKENS / BLOCK_SIZE) <= usable
    assert N_REQUESTS * math.ceil((PROMPT_TOKENS + OUTPUT_TOKENS) / BLOCK_SIZE) > usable

    srv = small_kv_server
    kv = parse_kv_lines(srv.log_text())
    assert kv and kv[0].tokens == NUM_BLOCKS * BLOCK_SIZE, kv  # 2048 is a multiple of 32
    seen = srv.processes()
    assert len(seen) >= 2, seen  # API server + EngineCore (+ worker)
    burst = preemption_burst(srv.base_url, N_REQUESTS, PROMPT_TOKENS, OUTPUT_TOKENS, timeout=180)
    assert burst.all_ok, burst.summary()
    assert [r.completion_tokens for r in burst.results] == [OUTPUT_TOKENS] * N_REQUESTS
    assert [r.prompt_tokens for r in burst.results] == [PROMPT_TOKENS] * N_REQUESTS
    assert all(r.chunks > 1 for r in burst.results)
    assert burst.preemptions >= 1, burst.summary()

    # Stop it now (SIGTERM to its process group, SIGKILL after the grace period): every process
    # seen (API server, EngineCore, worker, resource tracker) is gone, by PID.
    vllm_servers.stop(SMALL_KV)
    assert not srv.is_running()
    assert srv.record is not None and srv.record.alive() == [], srv.record.alive()
    assert all(not p.alive() for p in seen)
