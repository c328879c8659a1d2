"""vLLM's start-up checks and the exact texts it prints when one fails, per version.

Texts are copied from vLLM's source (shared reference ``vllm-memory-model.md`` §4):
``_check_enough_kv_cache_memory`` (kv_cache_planning.py / kv_cache_utils.py),
``_get_and_verify_max_len`` and ``verify_with_parallel_config`` (config/model.py),
``request_memory`` (v1/worker/utils.py). The part of each text that ``kvplan doctor`` recognises is
a template of :mod:`kvplan.memory.error_texts` (the doctor's patterns are derived from it); the
version-dependent rest is written here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from . import error_texts as et
from .semantics import VllmSemantics

DOCS = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


@dataclass(frozen=True)
class StartupError:
    kind: str  # no_kv_memory | max_model_len_too_large | max_model_len_above_derived | tp_heads | free_memory | weights_oom | kv_cache_oom
    message: str
    suggested_max_model_len: Optional[int] = None


def no_memory_for_cache_blocks(sem: VllmSemantics) -> StartupError:
    v = sem.version
    text = et.NO_BLOCKS.format() + ". Try increasing `gpu_memory_utilization` when initializing the engine"
    if v >= (0, 22):
        text += (" (this flag also controls CPU memory reservation on the CPU backend, despite its name). " + DOCS)
    elif v >= (0, 13):
        text += ". " + DOCS
    else:
        text += "."
    return StartupError("no_kv_memory", text)


def max_model_len_too_large(sem: VllmSemantics, max_model_len: int, needed_bytes: int,
                            available_bytes: int, estimated: int, block_size: int,
                            num_gpu_blocks: int, pp: int = 1) -> StartupError:
    """The texts e0–e4 of docs/vllm-semantics.md §1.3, by version."""
    v = sem.version
    if sem.engine == "V0":
        text = ("The model's " + et.KV_TOO_SMALL_V0.format(max_len=max_model_len,
                                                             tokens=block_size * (num_gpu_blocks // pp))
                + ". Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
                "engine.")
        return StartupError("max_model_len_too_large", text, estimated)
    needed, avail = sem.gib(needed_bytes), sem.gib(available_bytes)
    model_s = "model's" if v >= (0, 22) else "models's"
    head = et.KV_TOO_SMALL.format(model_s=model_s, max_len=max_model_len, needed=needed, available=avail) + "."
    estimate = et.KV_ESTIMATE.format(estimate=estimated) + "."
    if v < (0, 9):  # e0: a concatenation bug drops the estimate
        text = head + " Based on the available memory,  Try increasing `gpu_memory_utilization` or decreasing " \
                      "`max_model_len` when initializing the engine."
        if estimated <= 0:
            text = head + "  Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing " \
                          "the engine."
        return StartupError("max_model_len_too_large", text, estimated)
    if v >= (0, 22):
        tail = (" Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
                "decreasing `max_model_len` when initializing the engine. " + DOCS)
    else:
        tail = " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        if v >= (0, 13):
            tail += " " + DOCS
    if estimated > 0:
        text = head + estimate + tail
    elif v < (0, 14):
        text = head + " " + tail  # e1/e2 leave two spaces when the estimate is empty
    else:
        text = head + tail
    return StartupError("max_model_len_too_large", text, estimated)


def max_model_len_above_derived(sem: VllmSemantics, user_len: int, key: str, derived: float,
                                model_max_length: Optional[int]) -> StartupError:
    mml = model_max_length if model_max_length is not None else "None"
    head = (et.MAX_LEN_ABOVE_DERIVED.format(requested=user_len, key=key, derived=derived)
            + f"{mml} in model's config.json).")
    if sem.long_max_model_len_error_style == "caution":
        tail = (" To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative "
                "position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model "
                "uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA "
                "array out-of-bounds error.")
    elif sem.long_max_model_len_error_style == "env":
        tail = (" This may lead to incorrect model outputs or CUDA errors. To allow overriding this maximum, "
                "set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    else:
        tail = (" This may lead to incorrect model outputs or CUDA errors. Make sure the value is correct and "
                "within the model context size.")
    return StartupError("max_model_len_above_derived", head + tail, int(derived))


def heads_not_divisible(num_heads: int, tp: int) -> StartupError:
    return StartupError("tp_heads", et.TP_NOT_DIVISIBLE.format(what="attention heads", value=num_heads, tp=tp) + ".")


def free_memory_below_requested(sem: VllmSemantics, free: int, total: int, util: float, requested: int,
                                device: str = "cuda:0") -> StartupError:
    if sem.free_memory_error_names_device:
        head = et.FREE_MEMORY.format(device=f" {device}", free=sem.gib(free), total=sem.gib(total), util=util,
                                     requested=sem.gib(requested))
    else:
        head = et.FREE_MEMORY.format(device="", free=round(free / 2**30, 2), total=round(total / 2**30, 2), util=util,
                                     requested=round(requested / 2**30, 2))
    text = head + ". Decrease GPU memory utilization or reduce GPU memory used by other processes."
    return StartupError("free_memory", text)


def weights_do_not_fit(weights_bytes: int, total_bytes: int, preexisting_bytes: int, tp: int, pp: int,
                       device: str = "cuda") -> StartupError:
    """vLLM loads every weight onto the GPU before it profiles memory (``load_model``): weights
    larger than the GPU end in torch's CUDA OOM there, not in a KV-cache message. torch's own text
    names the one tensor it failed on, which kvplan cannot know; this says what it means."""
    gib = 1 << 30
    where = "CUDA" if device == "cuda" else device.upper()
    return StartupError("weights_oom", (
        f"torch.OutOfMemoryError: {where} out of memory while loading the model weights: "
        f"{weights_bytes / gib:.2f} GiB of weights per GPU (TP {tp} × PP {pp}) do not fit in the GPU's "
        f"{total_bytes / gib:.2f} GiB ({preexisting_bytes / gib:.2f} GiB of it already taken by the CUDA context). "
        "vLLM fails in load_model, before it profiles memory or sizes a KV cache."))


def uncharged_oom(uncharged_bytes: int, requested_bytes: int, preexisting_bytes: int, total_bytes: int,
                  label: str) -> StartupError:
    """V0 (0.6.5+) sizes its KV cache to fill ``gpu_memory_utilization`` without charging LoRA buffers
    or draft weights it allocated after measuring the model (VllmSemantics.v0_profile_skips_late_allocations):
    when they do not fit in what the utilisation leaves free, allocating the cache (or the first steps
    after it) runs out of memory (vLLM issues #8731, #9995)."""
    gib = 1 << 30
    return StartupError("oom_uncharged", (
        f"torch.OutOfMemoryError: CUDA out of memory: vLLM {label} (V0) fills {requested_bytes / gib:.2f} GiB "
        f"(gpu_memory_utilization x total) with weights, activations and KV cache without counting "
        f"{uncharged_bytes / gib:.2f} GiB of LoRA / draft-model weights it already holds; with "
        f"{preexisting_bytes / gib:.2f} GiB of CUDA context that is more than the GPU's {total_bytes / gib:.2f} GiB."))


def kv_cache_does_not_fit(kv_bytes: int, non_kv_bytes: int, preexisting_bytes: int, total_bytes: int,
                          source: str) -> StartupError:
    """A KV size given by hand (--kv-cache-memory-bytes, or kvplan's --kv-cache-memory) larger than
    what the GPU has left after the weights, activations, graphs and the CUDA context: vLLM
    allocates the KV tensors as asked (initialize_kv_cache) and torch runs out of memory there."""
    gib = 1 << 30
    left = total_bytes - non_kv_bytes - preexisting_bytes
    flag = "--kv-cache-memory-bytes" if source == "kv_cache_memory" else "--kv-cache-memory"
    head = ("torch.OutOfMemoryError: CUDA out of memory while allocating the KV cache" if source == "kv_cache_memory"
            else "--kv-cache-memory cannot be what vLLM measured")
    return StartupError("kv_cache_oom", (
        f"{head}: {kv_bytes / gib:.2f} GiB of KV cache per GPU ({flag}) with {non_kv_bytes / gib:.2f} GiB of weights, "
        f"activations and CUDA graphs and the {preexisting_bytes / gib:.2f} GiB CUDA context need "
        f"{(kv_bytes + non_kv_bytes + preexisting_bytes) / gib:.2f} GiB; the GPU has {total_bytes / gib:.2f} GiB, "
        f"{max(left, 0) / gib:.2f} GiB left for the KV cache."))


def scheduler_config_errors(max_num_batched_tokens: int, max_num_seqs: int, max_model_len: int,
                            chunked_prefill: bool) -> list[StartupError]:
    """SchedulerConfig._verify_args, the same two checks and texts in every version read (0.6.4,
    0.7.3, 0.8.5, 0.9.2 config.py; 0.10.1.1-0.33.0 config/scheduler.py)."""
    out = []
    if max_num_batched_tokens < max_model_len and not chunked_prefill:
        out.append(StartupError("scheduler_config", et.SCHED_BATCH_BELOW_LEN.format(
            batched=max_num_batched_tokens, max_len=max_model_len) + " and makes vLLM reject longer sequences. "
            "Please increase max_num_batched_tokens or decrease max_model_len."))
    if max_num_batched_tokens < max_num_seqs:
        out.append(StartupError("scheduler_config", et.SCHED_BATCH_BELOW_SEQS.format(
            batched=max_num_batched_tokens, seqs=max_num_seqs)))
    return out


def block_size_refused(block_size: int, sem: VllmSemantics) -> Optional[StartupError]:
    """A ``--block-size`` vLLM refuses on CUDA: argparse's choices before 0.18
    (VllmSemantics.accepted_block_sizes), then the attention backend's kernel sizes
    (FLASH_ATTN: MultipleOf(16), v1/worker/utils.py select_common_block_size)."""
    choices = sem.accepted_block_sizes
    if choices is not None:
        if block_size in choices:
            return None
        return StartupError("block_size", et.BLOCK_SIZE_CHOICE.format(block=block_size,
                                                                      choices=", ".join(map(str, choices))))
    if block_size % 16 == 0:
        return None
    head = et.NO_COMMON_BLOCK_SIZE.format(block=block_size)
    if sem.block_size_error_names_backends:
        return StartupError("block_size", head + " (FLASH_ATTN: [MultipleOf(16)]).")
    return StartupError("block_size", head + ". ")


def largest_fitting_len(needed_for: Callable[[int], int], budget: int, upper: int) -> int:
    """vLLM's binary search: the largest L' in [1, upper] whose KV need fits the budget (0 if none)."""
    if needed_for(1) > budget:
        return 0
    lo, hi = 1, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if needed_for(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo
