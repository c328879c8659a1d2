"""PyTorch's caching-allocator block rules (kvplan.memory.allocator) and what they do to the
weights vLLM reports."""
from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.memory.allocator import allocated_bytes, rounding_bytes
from kvplan.models import load_model

MIB = 1 << 20
GIB = 1 << 30


def test_a_block_is_split_only_when_more_than_a_mebibyte_would_remain():
    assert allocated_bytes([int(31.5 * MIB)]) == 32 * MIB  # 0.5 MiB left: the whole 32 MiB block
    assert allocated_bytes([259 * MIB]) == 260 * MIB  # exactly 1 MiB left: still not split
    assert allocated_bytes([int(24.5 * MIB)]) == int(24.5 * MIB)  # 1.5 MiB left: split off
    assert allocated_bytes([32 * MIB, 64 * MIB]) == 96 * MIB  # whole 2 MiB multiples count exactly
    assert allocated_bytes([1000]) == 1024  # small requests: rounded to 512 B, packed exactly


def test_free_remainders_are_reused_best_fit():
    # the 1.5 MiB split off the 24.5 MiB weight serves a 1.25 MiB request whole (0.25 MiB would remain)
    assert allocated_bytes([int(24.5 * MIB), int(1.25 * MIB)]) == int(24.5 * MIB) + int(1.5 * MIB)
    # a 5 MiB request takes a 20 MiB segment; the 15 MiB left serves a 14.5 MiB request whole
    assert allocated_bytes([5 * MIB, int(14.5 * MIB)]) == 20 * MIB
    # ... and a 12 MiB request with 3 MiB to spare is split from it
    assert allocated_bytes([5 * MIB, 12 * MIB]) == 17 * MIB


@given(st.lists(st.integers(min_value=1, max_value=600 * MIB), max_size=40))
@example([int(31.5 * MIB)] * 3)
def test_the_allocator_counts_at_least_what_was_asked_and_at_most_a_mebibyte_more_per_large_request(sizes):
    extra = rounding_bytes(sizes)
    large = sum(1 for s in sizes if s > MIB)
    assert 0 <= extra <= large * MIB + len(sizes) * 512


def _weights_gib(model: str, tp: int = 1) -> float:
    return plan(PlanRequest(load_model(model), find_gpu("H100"), tensor_parallel_size=tp, vllm_version="0.19.0",
                            max_model_len=8192), what_ifs=False).memory.weights_gib_per_gpu


def test_model_loading_matches_vllms_logged_figure_where_shapes_are_not_2_mib_multiples():
    # dev logs 25/26 (0.10.1.1) print "Model loading took 14.2488 GiB" for Qwen2-7B: its q/k/v, o,
    # gate/up and down weights are 31.5, 24.5, 259 and 129.5 MiB, 2 MiB more per layer in blocks
    assert abs(_weights_gib("Qwen/Qwen2.5-7B-Instruct") - 14.2488) < 0.0005
    # Llama-3.1-8B's shapes are whole 2 MiB multiples: exactly its parameters, vLLM's 14.9888 GiB
    assert abs(_weights_gib("meta-llama/Llama-3.1-8B-Instruct") - 14.9888) < 0.0005
    # Qwen2.5-72B: llm-d-planner's 0.19.0 runs log 67.80 GiB at TP 2 and 34.01 GiB at TP 4
    assert round(_weights_gib("Qwen/Qwen2.5-72B-Instruct", tp=2), 2) == 67.80
    assert abs(_weights_gib("Qwen/Qwen2.5-72B-Instruct", tp=4) - 34.01) < 0.04


def test_the_cpu_backend_counts_the_tensors_as_they_are():
    spec = load_model("Qwen/Qwen2.5-7B-Instruct")
    cpu = plan(PlanRequest(spec, find_gpu("H100"), device="cpu", kv_cache_memory_bytes=4 * GIB), what_ifs=False)
    cuda = plan(PlanRequest(spec, find_gpu("H100"), kv_cache_memory_bytes=4 * GIB), what_ifs=False)
    assert 0.05 < cuda.memory.weights_gib_per_gpu - cpu.memory.weights_gib_per_gpu < 0.06
