"""Put kvplan's numbers next to the ones a real vLLM start-up log printed.

vLLM prints the available KV memory rounded to 0.01 GiB (10 MiB), so a plan built from that
figure can land a few blocks off. The comparison therefore reports the range of block counts the
printed figure allows, and then recomputes tokens and concurrency from the log's own block count
(where the log reveals it) to check vLLM's arithmetic exactly.
"""
from __future__ import annotations

from dataclasses import replace

from .planner import PlanRequest, plan
from .result import PlanResult
from .startup_log import StartupLog


def blocks_from_log(log: StartupLog, result: PlanResult, req: PlanRequest) -> int | None:
    """The block count the log states or implies. V0 prints it; V1 prints tokens and concurrency,
    from which the count is recovered by replaying candidates until both figures match."""
    if log.num_gpu_blocks is not None:
        return log.num_gpu_blocks
    bpr, L = result.kv.blocks_per_request, result.kv.max_concurrency_for_tokens
    if not bpr:
        return None
    if log.kv_cache_tokens is not None:
        if result.kv.kv_cache_tokens and result.kv.num_gpu_blocks:
            guess = round(log.kv_cache_tokens * result.kv.num_gpu_blocks / result.kv.kv_cache_tokens)
        else:
            guess = round(log.kv_cache_tokens * bpr / L)
    elif log.max_concurrency is not None:
        guess = round(log.max_concurrency * bpr)
    else:
        return None
    for n in sorted(range(max(guess - 4, 1), guess + 5), key=lambda n: abs(n - guess)):
        r = plan(replace(req, num_gpu_blocks_override=n, kv_cache_memory_bytes=None), what_ifs=False)
        if log.kv_cache_tokens is not None and r.kv.kv_cache_tokens != log.kv_cache_tokens:
            continue
        if log.max_concurrency is not None and f"{r.kv.max_concurrency:.2f}" != f"{log.max_concurrency:.2f}":
            continue
        return n
    return None


def kv_bytes_from_blocks(log: StartupLog, result: PlanResult, req: PlanRequest) -> int | None:
    """KV memory per GPU that the log's own block count implies (blocks × bytes per block), for a
    log that counted its blocks or tokens but printed no GiB figure (0.7-0.8's V1 engine; V0 logs
    cut above the profiling line). None when the log has a GiB figure, no count, or several
    pipeline stages (each stage's memory is then unknown)."""
    if log.available_kv_gib or result.parallel.pipeline_parallel_size > 1:
        return None
    blocks = blocks_from_log(log, result, req)
    return blocks * result.kv.bytes_per_block if blocks and result.kv.bytes_per_block else None


def compare_with_log(result: PlanResult, req: PlanRequest, log: StartupLog) -> PlanResult:
    measured: dict = {
        "log": log.path,
        "vllm_version": log.vllm_version,
        "available_kv_cache_gib": min(log.available_kv_gib) if log.available_kv_gib else None,
        "num_gpu_blocks": log.num_gpu_blocks,
        "kv_cache_tokens": log.kv_cache_tokens,
        "max_concurrency": log.max_concurrency,
        "concurrency_len": log.concurrency_len,
        "model_loading_gib": log.model_loading_gib,
        "cudagraph_estimate_gib": log.cudagraph_estimate_gib,
        "errors": list(log.errors),
    }
    stages = result.parallel.pipeline_parallel_size
    per_stage = log.available_kv_per_stage(result.parallel.tensor_parallel_size, stages)
    bpbs = result.kv.bytes_per_block_per_stage
    rng = log.available_kv_range()
    if per_stage is not None:
        half = int(0.005 * (1 << 30))
        measured["num_gpu_blocks_range"] = [min((a - half) // b for a, b in zip(per_stage, bpbs)),
                                            min((a + half) // b for a, b in zip(per_stage, bpbs))]
    elif rng and bpbs:
        measured["num_gpu_blocks_range"] = [rng[0] // bpbs[0], rng[1] // bpbs[0]]
    implied = blocks_from_log(log, result, req)
    measured["num_gpu_blocks_implied"] = implied
    if implied:
        # Replay the start-up with exactly the log's block count: tokens and concurrency must match.
        replay = plan(replace(req, num_gpu_blocks_override=implied, kv_cache_memory_bytes=None), what_ifs=False)
        measured["replayed_log_lines"] = list(replay.kv.log_lines)
        measured["replayed_kv_cache_tokens"] = replay.kv.kv_cache_tokens
        measured["replayed_max_concurrency"] = replay.kv.max_concurrency
        if log.kv_cache_tokens is not None:
            measured["tokens_match"] = replay.kv.kv_cache_tokens == log.kv_cache_tokens
        if log.max_concurrency is not None:
            measured["concurrency_match"] = f"{replay.kv.max_concurrency:.2f}" == f"{log.max_concurrency:.2f}"
        if rng:
            measured["blocks_within_rounding"] = measured["num_gpu_blocks_range"][0] <= implied <= \
                measured["num_gpu_blocks_range"][1]
    return replace(result, measured=measured)
