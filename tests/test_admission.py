"""Start-up checks: vLLM's own error texts, the suggested length, and auto-fit."""
from __future__ import annotations

import pytest

from kvplan.errors import UsageError
from plan_helpers import GIB, GPT_OSS_120B, LLAMA2_70B, run_plan

BPB = 1_310_720  # Llama-2-70B TP 4, block 16


def test_kv_cache_too_small_gives_vllms_text_and_suggestion():
    r = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=4, max_model_len=4096,
                 kv_cache_memory_bytes=100 * BPB + 123)
    assert not r.startup.ok
    assert r.startup.error_kind == "max_model_len_too_large"
    # check_memory = available − one block = 99 blocks (+123 B) → 99 × 16 = 1584 tokens fit.
    assert r.startup.suggested_max_model_len == 1584
    assert r.startup.error.startswith(
        "To serve at least one request with the model's max seq len (4096), (0.31 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (0.12 GiB). Based on the available memory, the "
        "estimated maximum model length is 1584.")
    assert "--max-model-len 1584" in r.serve_command


def test_older_version_text_has_the_typo_and_no_null_block():
    r = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=4, max_model_len=4096,
                 kv_cache_memory_bytes=100 * BPB + 123, vllm_version="0.15")
    assert "models's max seq len" in r.startup.error
    assert r.startup.suggested_max_model_len == 1600  # no block held back before 0.27


def test_no_memory_for_blocks():
    r = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=4, kv_cache_memory_bytes=BPB // 2)
    assert r.startup.error_kind == "no_kv_memory"
    assert r.startup.error.startswith("No available memory for the cache blocks.")


def test_weights_do_not_fit_estimate():
    # 128 GiB of weights on an 80 GiB GPU: vLLM dies loading them (CUDA OOM), before any KV sizing
    r = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=1)
    assert not r.startup.ok and r.startup.error_kind == "weights_oom"
    assert r.memory.available_kv_cache_gib < 0


def test_tp_must_divide_heads():
    r = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=3, kv_cache_memory_bytes=20 * GIB)
    assert r.startup.error == "Total number of attention heads (64) must be divisible by tensor parallel size (3)."


def test_max_len_above_derived():
    r = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=4, max_model_len=8192)
    assert r.startup.error_kind == "max_model_len_above_derived"
    assert r.startup.error.startswith("User-specified max_model_len (8192) is greater than the derived "
                                      "max_model_len (max_position_embeddings=4096.0 or model_max_length=None")
    assert "--max-model-len 4096" in r.serve_command
    # Before 0.12 the derived length printed as an int, and 0.6–0.10.1 had the shorter text.
    old = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=4, max_model_len=8192, vllm_version="0.6.4")
    assert old.startup.error == (
        "User-specified max_model_len (8192) is greater than the derived max_model_len (max_position_embeddings=4096 "
        "or model_max_length=None in model's config.json). This may lead to incorrect model outputs or CUDA errors. "
        "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    assert not [row for row in r.capacity_table if row.max_model_len == 8192][0].fits


def test_free_memory_below_requested_budget():
    r = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=4, gpu_memory_utilization=1.0)
    assert r.startup.error_kind == "free_memory"
    assert r.startup.error.startswith("Free memory on device cuda:0 (")


def test_auto_fit_max_model_len():
    r = run_plan(GPT_OSS_120B, "H100", max_model_len=-1, kv_cache_memory_bytes=2 * GIB)
    assert r.startup.ok
    assert r.flags.max_model_len == r.startup.max_fitting_model_len < 131_072


def test_bad_flags_are_usage_errors():
    with pytest.raises(UsageError):
        run_plan(LLAMA2_70B, "A100-80GB", gpu_memory_utilization=1.5)
    with pytest.raises(UsageError):
        run_plan(LLAMA2_70B, "A100-80GB", kv_cache_dtype="fp4-magic")
    with pytest.raises(UsageError):
        run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=0)


def test_capacity_table_consistent_with_blocks():
    r = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=4, kv_cache_memory_bytes=30 * GIB)
    for row in r.capacity_table:
        blocks_per_req = -(-row.max_model_len // 16)
        assert row.max_concurrency == pytest.approx(24_576 / blocks_per_req, abs=1e-4)
