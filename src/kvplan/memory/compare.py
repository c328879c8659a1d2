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


def blocks_from_log(log: StartupLog, result: PlanResult) -> int | None:
    """The block count the log states or implies (V0 prints it; V1 prints tokens and concurrency)."""
    if log.num_gpu_blocks is not None:
        return log.num_gpu_blocks
    if log.max_concurrency is not None and result.kv.blocks_per_request:
        # concurrency = num_blocks / blocks_per_request, printed with 2 decimals
        guess = round(log.max_concurrency * result.kv.blocks_per_request)
        for n in sorted(range(guess - 3, guess + 4), key=lambda n: abs(n - guess)):
            if f"{n / result.kv.blocks_per_request:.2f}" == f"{log.max_concurrency:.2f}":
                return n
    return None


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
    bpb = result.kv.bytes_per_block
    rng = log.available_kv_range()
    if rng and bpb:
        measured["num_gpu_blocks_range"] = [rng[0] // bpb, rng[1] // bpb]
    implied = blocks_from_log(log, result)
    measured["num_gpu_blocks_implied"] = implied
    if implied is not None:
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
