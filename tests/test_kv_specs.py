"""Block accounting on the KV specs, checked against vLLM 0.32's own rules and examples
(vllm/v1/kv_cache_interface.py and vllm/v1/core/single_type_kv_cache_manager.py: the docstring
examples of get_num_skipped_tokens and max_admission_blocks_per_request), and the one place every
consumer asks: the planner's groups carry their spec, the simulator and the traffic fit count with it.
"""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.memory.kv_specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SizingContext,
    SlidingWindowSpec,
)
from kvplan.models import load_model
from kvplan.workload.traffic import blocks_for

SHAPE = dict(num_kv_heads=8, head_size=128, head_size_v=128, dtype_bytes=2)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_vllm_sliding_window_docstring_examples():
    # SlidingWindowManager.get_num_skipped_tokens: sliding_window=4, num_computed_tokens=7 -> 4
    spec = SlidingWindowSpec(4, **SHAPE, sliding_window=4)
    assert spec.skipped_tokens(7) == 4
    assert spec.skipped_tokens(3) == 0
    # SlidingWindowSpec.max_admission_blocks_per_request: "+1 because the sliding window may not
    # start from the beginning of the block. E.g. block size 4 and num_token 4 needs two blocks"
    assert spec.max_admission_blocks_per_request(SizingContext(4096, 2048, 1)) == cdiv(4 - 1 + 1, 4) + 1 == 2


@pytest.mark.parametrize("computed,skipped", [(13, 8), (8, 8), (7, 0)])
def test_vllm_chunked_local_docstring_examples(computed, skipped):
    # ChunkedLocalAttentionManager.get_num_skipped_tokens, examples 1-3 (chunk size 8)
    assert ChunkedLocalAttentionSpec(4, **SHAPE, attention_chunk_size=8).skipped_tokens(computed) == skipped


@given(st.integers(1, 64), st.integers(1, 5000), st.integers(0, 5000), st.integers(1, 3000))
def test_sliding_window_holds_what_the_manager_holds(block_size, num_tokens, processed, window):
    """vLLM: cdiv(num_tokens, block_size) block-table entries, of which the first
    get_num_skipped_tokens(processed) // block_size (never more than exist) are the null block."""
    spec = SlidingWindowSpec(block_size, **SHAPE, sliding_window=window)
    entries = cdiv(num_tokens, block_size)
    nulls = min(max(0, processed - window + 1) // block_size, entries)
    assert spec.blocks_held(num_tokens, processed) == entries - nulls


@given(st.integers(1, 64), st.integers(1, 20000), st.integers(1, 8192), st.integers(1, 16384))
def test_admission_is_capped_for_recycling_specs_only(block_size, num_tokens, window, in_flight):
    ctx = SizingContext(16384, 2048, in_flight)
    need = cdiv(num_tokens, block_size)
    full = FullAttentionSpec(block_size, **SHAPE)
    sliding = SlidingWindowSpec(block_size, **SHAPE, sliding_window=window)
    chunked = ChunkedLocalAttentionSpec(block_size, **SHAPE, attention_chunk_size=window)
    assert full.blocks_to_admit(num_tokens, ctx) == need == full.blocks_held(num_tokens, num_tokens)
    assert MLAAttentionSpec(block_size, 1, 576, 0, 1).blocks_to_admit(num_tokens, ctx) == need
    assert sliding.blocks_to_admit(num_tokens, ctx) == min(need, cdiv(min(window - 1 + in_flight, 16384),
                                                                       block_size) + 1)
    assert chunked.blocks_to_admit(num_tokens, ctx) == min(need, cdiv(min(window + in_flight, 16384), block_size))
    # the cap is the plan's blocks per request (startup pool sizing and admission agree)
    assert sliding.max_admission_blocks_per_request(ctx) == sliding.blocks_per_request(ctx)
    assert chunked.max_admission_blocks_per_request(ctx) == chunked.blocks_per_request(ctx)


def test_mamba_state_is_one_block_plus_speculative_ones():
    ctx = SizingContext(8192, 2048, 4096)
    for spec_blocks in (0, 2):
        spec = MambaSpec(544, state_bytes=1 << 20, num_speculative_blocks=spec_blocks)
        assert spec.blocks_held(1, 0) == spec.blocks_held(100_000, 100_000) == 1 + spec_blocks
        assert spec.blocks_to_admit(100_000, ctx) == spec.blocks_per_request(ctx) == 1 + spec_blocks


@pytest.mark.parametrize("model,gpu,tp", [
    ("meta-llama/Llama-2-70b-chat-hf", "A100-80GB", 4), ("gpt-oss-120b", "H100", 1),
    ("google/gemma-3-27b-it", "H100", 2), ("Qwen/Qwen3-Next-80B-A3B-Instruct", "H100", 4),
    ("deepseek-v3", "H200", 8),
])
def test_plan_groups_carry_their_spec(model, gpu, tp):
    r = plan(PlanRequest(load_model(model), find_gpu(gpu), tensor_parallel_size=tp, max_model_len=8192))
    for g in r.kv.groups:
        assert g.spec is not None and g.spec.kind == g.kind
        assert g.spec.blocks_per_request(r.sizing) == g.blocks_per_request  # the sizing the plan used
    assert all("spec" not in g for g in r.to_dict()["kv"]["groups"])  # the JSON is unchanged


def test_traffic_fit_counts_a_sliding_group_as_the_manager_does():
    """gpt-oss-120b: a request of n tokens holds cdiv(n, 16) blocks in the full group and, in the
    sliding (128-token window) group, only the blocks the window still reads (vLLM's rule; before
    the spec counted it, the traffic fit took cdiv(n, 16) + 1 up to the admission cap, 513)."""
    r = plan(PlanRequest(load_model("gpt-oss-120b"), find_gpu("H100"), max_model_len=8192))
    assert [g.kind for g in r.kv.groups] == ["sliding", "full"]
    for n in (1, 100, 127, 128, 129, 1000, 8192):
        sliding = cdiv(n, 16) - max(0, n - 128 + 1) // 16
        assert blocks_for(r, n) == sliding + cdiv(n, 16)
    # 8,192 tokens: the next token reads tokens 8,065-8,191, in blocks 504-511
    assert blocks_for(r, 8192) == 8 + 512
