"""Fixes whose predicted effect is a re-plan (planned.LogPlanner): each flag change is run through
kvplan.memory.plan with the log's flags and measured KV memory, and the effect quotes the plan's
KV tokens, blocks and concurrency. fixes.py falls back to the log's own arithmetic when there is
no planner (model unknown, no measured KV memory, or a plan that does not reproduce the log).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ...errors import UsageError
from ...hardware import GIB
from ...memory import PlanResult
from dataclasses import replace

from .model import COSTS, Fix
from .planned import BASIS_PLAN, BASIS_RULE, LogPlanner

#: coverage(length) -> (share of requests that fit, label) from --requests, or None.
Coverage = Optional[Callable[[int], tuple[float, str]]]
UTIL_TARGET = 0.95
MAX_UTIL = 0.98


def missing_from_log(util: Optional[float], total: Optional[float]) -> str:
    """What the log leaves out of the utilisation arithmetic, naming what it does show."""
    if util is not None and not total:
        return (f"the log shows gpu_memory_utilization={util:g} but not the GPU's total memory: pass --gpu, or the "
                "full start-up log")
    if util is None and total:
        return "the log does not show the gpu_memory_utilization used: pass the full start-up log"
    return "the log names neither the GPU's total memory nor the utilisation used: pass --gpu and the full start-up log"


def ranked(fixes: list[Fix]) -> tuple[Fix, ...]:
    """By evidence, then cost: a fix whose premise the log does not show (``Fix.premise``: e.g.
    requests with n > 1 when none is logged) after every fix the log supports; within each, the
    cheapest first (model.COSTS). The sort is stable, so equal ranks keep their order."""
    return tuple(sorted(fixes, key=lambda f: (bool(f.premise), COSTS.index(f.cost))))


def shorter_context_cost(coverage: Coverage, max_len: int, length: int) -> tuple[str, str]:
    """(cost, price) of lowering max_model_len to ``length``: vLLM then refuses every request
    longer than it (HTTP 400), so it costs capacity, named as the lengths given up; it is free only
    when the user's request log shows every request fits (model.COSTS; preflight's
    whatif.priced prices the same change the same way)."""
    if length >= max_len:
        return "free", ""
    if coverage is not None and coverage(length)[0] >= 1.0:
        return "free", ""
    return "capacity", f"max_model_len {max_len:,} → {length:,}: longer requests are refused"


def cover(coverage: Coverage, length: int) -> str:
    if coverage is None:
        return ""
    share, _ = coverage(length)
    return f"; fits {share * 100:.1f}% of your requests"


def _fix(change: str, effect: str, cost: str, r: Optional[PlanResult] = None, **extra: Any) -> Fix:
    nums: dict[str, Any] = {}
    if r is not None:
        nums = {"kv_cache_tokens": r.kv.kv_cache_tokens, "num_gpu_blocks": r.kv.num_gpu_blocks,
                "max_concurrency": round(r.kv.max_concurrency, 2), "max_model_len": r.flags.max_model_len,
                "starts": r.startup.ok}
    nums.update(extra)
    return Fix(change, effect, cost, tuple(nums.items()), BASIS_PLAN if r is not None else BASIS_RULE)


def _outcome(r: PlanResult) -> str:
    L = r.flags.max_model_len
    if r.startup.ok:
        return f"{r.kv.kv_cache_tokens:,} KV tokens, {r.kv.max_concurrency:.2f}x concurrency at {L:,} tokens"
    fit = r.startup.max_fitting_model_len
    return (f"{r.kv.kv_cache_tokens:,} KV tokens, still short of one {L:,}-token request"
            + (f" (largest max_model_len {fit:,})" if fit else ""))


def _try(fn: Callable[[], PlanResult]) -> Optional[PlanResult]:
    try:
        return fn()
    except UsageError:
        return None


def _block_floor(n: int, block: int) -> int:
    return max(block, n // block * block)


def kv_too_small(p: LogPlanner, max_len: int, args: dict[str, Any], util: Optional[float],
                 coverage: Coverage = None) -> tuple[Fix, ...]:
    base = p.replan(max_model_len=max_len)
    fixes: list[Fix] = []
    fit = base.startup.max_fitting_model_len
    block = base.kv.block_size
    lengths: list[tuple[int, str]] = []
    if fit > 0:
        lengths.append((fit, "starts"))
        p99 = getattr(coverage, "p99", None) if coverage is not None else None
        if p99 and 0 < p99 < fit:
            lengths.append((min(fit, -(-int(p99) // block) * block), "covers P99 of your requests"))
        quarter = _block_floor(fit // 4, block)
        if 1024 <= quarter < fit:
            lengths.append((quarter, "a quarter of the largest length"))
    for length, why in lengths:
        r = p.replan(max_model_len=length)
        cost, price = shorter_context_cost(coverage, max_len, length)
        fixes.append(replace(_fix(f"--max-model-len {length}", f"{why}: plan gives {_outcome(r)}{cover(coverage, length)}",
                                  cost, r), price=price))
    fixes.extend(_more_memory(p, base, max_len, args, util))
    fixes.extend(_fp8(p, args, max_len))
    fixes.extend(_more_gpus(p, args, max_len))
    return ranked(fixes)


def _more_memory(p: LogPlanner, base: PlanResult, max_len: Optional[int], args: dict[str, Any],
                 util: Optional[float]) -> list[Fix]:
    explicit = args.get("kv_cache_memory_bytes")
    if isinstance(explicit, int) and explicit > 0:
        # An explicit KV size replaces the utilisation budget: the smallest size that starts.
        need = _smallest_start(p, max_len)
        if need is None:
            return []
        r = p.replan(need - p.kv_bytes, max_model_len=max_len)
        return [_fix(f"--kv-cache-memory-bytes {need}", f"plan: {_outcome(r)} ({need / explicit:.1f}x the "
                     f"{explicit:,} bytes set now)", "free", r, kv_cache_memory_bytes=need)]
    if p.request.device == "cpu":
        return [Fix("a larger --kv-cache-memory-bytes (or VLLM_CPU_KVCACHE_SPACE)", "vLLM's CPU backend sizes its KV "
                    "cache from these, in host memory", "free", (), BASIS_RULE)]
    if util is not None and util >= UTIL_TARGET:
        return []
    if util is None or not p.total_bytes:
        return [Fix(f"--gpu-memory-utilization {UTIL_TARGET}", "more KV memory: each +0.01 adds 1% of the GPU's memory "
                    f"({missing_from_log(util, p.total_bytes)})", "free", (), BASIS_RULE)]
    extra = p.bytes_for(UTIL_TARGET - util) or 0
    r = p.replan(extra, gpu_memory_utilization=UTIL_TARGET, max_model_len=max_len)
    added = r.kv.num_gpu_blocks - base.kv.num_gpu_blocks
    return [_fix(f"--gpu-memory-utilization {UTIL_TARGET}", f"+{extra / GIB:.2f} GiB of KV cache adds {added:,} blocks: "
                 f"plan gives {_outcome(r)}", "free", r, extra_kv_gib=round(extra / GIB, 2), added_blocks=added)]


def _smallest_start(p: LogPlanner, max_len: Optional[int]) -> Optional[int]:
    """The fewest KV bytes (whole blocks) with which the plan starts at ``max_len``."""
    bpb = p.baseline.kv.bytes_per_block
    if bpb <= 0:
        return None
    lo, hi = max(p.kv_bytes, 0) // bpb, max(p.kv_bytes, 0) // bpb + 1
    while not p.replan(hi * bpb - p.kv_bytes, max_model_len=max_len).startup.ok:
        lo, hi = hi, hi * 2
        if hi > 1 << 24:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if p.replan(mid * bpb - p.kv_bytes, max_model_len=max_len).startup.ok:
            hi = mid
        else:
            lo = mid
    return hi * bpb


def more_kv(p: LogPlanner, args: dict[str, Any], util: Optional[float]) -> list[Fix]:
    """More KV cache on the same replica, re-planned: fp8 entries, a higher utilisation."""
    return _fp8(p, args, None) + _more_memory(p, p.baseline, None, args, util)


def _fp8(p: LogPlanner, args: dict[str, Any], max_len: Optional[int]) -> list[Fix]:
    if "fp8" in str(args.get("kv_cache_dtype", "auto")) or p.request.device != "cuda":
        return []
    r = _try(lambda: p.replan(kv_cache_dtype="fp8", max_model_len=max_len))
    if r is None:
        return []
    base = p.replan(max_model_len=max_len)
    ratio = r.kv.kv_cache_tokens / base.kv.kv_cache_tokens if base.kv.kv_cache_tokens else 0.0
    return [_fix("--kv-cache-dtype fp8", f"8-bit KV entries: plan gives {_outcome(r)} ({ratio:.2f}x the tokens)",
                 "accuracy", r)]


def _more_gpus(p: LogPlanner, args: dict[str, Any], max_len: Optional[int]) -> list[Fix]:
    tp = p.request.tensor_parallel_size
    tp2 = tp * 2
    if p.request.model.num_attention_heads % tp2 or p.request.device != "cuda":
        return []
    explicit = isinstance(args.get("kv_cache_memory_bytes"), int)
    freed = 0 if explicit else p.weights_freed(tensor_parallel_size=tp2)
    r = _try(lambda: p.replan(freed, tensor_parallel_size=tp2, max_model_len=max_len))
    if r is None:
        return []
    return [_fix(f"--tensor-parallel-size {tp2}", f"{tp2} GPUs: each holds 1/{tp2} of the KV heads and "
                 f"{freed / GIB:.2f} GiB less weights (activations assumed unchanged): plan gives {_outcome(r)}",
                 "hardware", r, tensor_parallel_size=tp2, freed_gib=round(freed / GIB, 2))]


def no_blocks(p: LogPlanner, util: Optional[float], args: dict[str, Any]) -> tuple[Fix, ...]:
    fixes: list[Fix] = []
    if util is not None and p.total_bytes:
        step = int(round(util * 100)) + 1
        for pct in range(step, int(MAX_UTIL * 100) + 1):
            u = pct / 100
            r = p.replan(p.bytes_for(u - util) or 0, gpu_memory_utilization=u)
            if r.startup.ok:
                fixes.append(_fix(f"--gpu-memory-utilization {u:.2f}", f"the smallest utilisation that starts: "
                                  f"{r.memory.available_kv_cache_gib:.2f} GiB of KV cache, plan gives {_outcome(r)}",
                                  "free", r, gpu_memory_utilization=u))
                break
    else:
        fixes.append(Fix(f"--gpu-memory-utilization {UTIL_TARGET}", f"a larger budget "
                         f"({missing_from_log(util, p.total_bytes)})", "free", (), BASIS_RULE))
    if not args.get("enforce_eager"):
        fixes.append(Fix("--enforce-eager", "frees the CUDA-graph memory (slower decode)", "throughput", (), BASIS_RULE))
    if not args.get("quantization") and p.request.model.quantization is None and p.request.device == "cuda":
        freed = _try(lambda: p.replan(quantization="fp8"))
        if freed is not None:
            gain = int((p.baseline.memory.weights_gib_per_gpu - freed.memory.weights_gib_per_gpu) * GIB)
            r = p.replan(gain, quantization="fp8")
            fixes.append(_fix("--quantization fp8 (or an FP8 checkpoint)", f"weights per GPU "
                              f"{p.baseline.memory.weights_gib_per_gpu:.1f} -> {freed.memory.weights_gib_per_gpu:.1f} GiB: "
                              f"plan gives {_outcome(r)}", "accuracy", r, freed_gib=round(gain / GIB, 2)))
    fixes.extend(_more_gpus(p, args, None))
    return ranked(fixes)


def preemption(p: LogPlanner, args: dict[str, Any], util: Optional[float], peak_running: Optional[int]) -> tuple[Fix, ...]:
    base = p.baseline
    fixes: list[Fix] = []
    cap = int(base.kv.max_concurrency)
    L = base.flags.max_model_len
    if cap >= 1 and (peak_running is None or peak_running > cap):
        fixes.append(_fix(f"--max-num-seqs {cap}", f"plan: the KV cache holds {base.kv.kv_cache_tokens:,} tokens = "
                          f"{base.kv.max_concurrency:.2f} requests of {L:,} tokens; at most {cap} run at once, the rest "
                          "wait instead of being preempted", "throughput", base, max_num_seqs=cap))
    else:
        fixes.append(Fix("--max-num-seqs (lower)", "fewer requests share the KV cache, so none is evicted", "throughput",
                         (), BASIS_RULE))
    fixes.extend(_fp8(p, args, None))
    fixes.extend(_more_memory(p, base, None, args, util))
    return ranked(fixes)


def too_long(p: LogPlanner, limit: int, requested: int, coverage: Coverage = None) -> tuple[Fix, ...]:
    fixes = [Fix("truncate prompts / lower max_tokens in the client", f"requests stay within {limit:,} tokens", "free",
                 (), BASIS_RULE)]
    block = p.baseline.kv.block_size
    want = -(-requested // block) * block
    r = p.replan(max_model_len=want)
    if r.startup.ok:
        effect, cost = f"plan gives {_outcome(r)}", "free"
    elif r.startup.error_kind == "max_model_len_above_derived":
        effect, cost = f"vLLM refuses it: {r.startup.error}", "hardware"
    else:
        effect, cost = f"the KV cache is too small for it: {_outcome(r)}; more KV memory first", "hardware"
    fixes.append(_fix(f"--max-model-len {want}", effect + cover(coverage, want), cost, r))
    return ranked(fixes)


def oom(p: LogPlanner, kind: str, args: dict[str, Any], util: Optional[float]) -> list[Fix]:
    """The planner-backed part of an OOM's fixes: what a smaller prefill batch and a lower
    utilisation cost in activations and KV blocks."""
    fixes: list[Fix] = []
    base = p.baseline
    if kind == "prefill":
        mnbt = base.flags.max_num_batched_tokens
        half = max(512, mnbt // 2)
        r = p.replan(max_num_batched_tokens=half)
        if r.memory.activation_peak_gib < base.memory.activation_peak_gib or not p.estimated:
            fixes.append(_fix(f"--max-num-batched-tokens {half}", f"halves the prefill batch ({mnbt:,} tokens): the "
                              f"plan's activation peak {base.memory.activation_peak_gib:.2f} -> "
                              f"{r.memory.activation_peak_gib:.2f} GiB per GPU", "throughput", r,
                              max_num_batched_tokens=half, activation_peak_gib=round(r.memory.activation_peak_gib, 2)))
    if p.estimated and not base.startup.ok:
        # vLLM died before it could say so, but the plan shows the configuration cannot start anyway:
        # those fixes come first, and a lower utilisation (less KV memory) is not one of them.
        fixes.extend(_plan_says(p, base, args))
    if util is not None and p.total_bytes:
        lower = round(util - 0.05, 2)
        r = p.replan(-(p.bytes_for(0.05) or 0), gpu_memory_utilization=lower)
        lost = base.kv.num_gpu_blocks - r.kv.num_gpu_blocks
        lost_tokens = base.kv.kv_cache_tokens - r.kv.kv_cache_tokens
        if r.startup.ok or base.startup.ok:
            fx = _fix(f"--gpu-memory-utilization {lower:.2f}", f"leaves {0.05 * p.total_bytes / GIB:.2f} GiB more "
                      f"outside vLLM's budget for activations and graphs; the KV cache loses {lost:,} blocks: plan "
                      f"gives {_outcome(r)}", "capacity" if lost > 0 else "free", r, gpu_memory_utilization=lower)
            fixes.append(replace(fx, price=f"−{lost_tokens:,} KV tokens ({lost:,} blocks)" if lost > 0 else ""))
    return fixes


def _plan_says(p: LogPlanner, base: PlanResult, args: dict[str, Any]) -> list[Fix]:
    """A failing baseline's own ways out: the largest length that starts, the smallest layout, fp8 KV."""
    out: list[Fix] = []
    s = base.startup
    L = base.flags.max_model_len
    if s.suggested_max_model_len and s.suggested_max_model_len < L:
        r = p.replan(max_model_len=s.suggested_max_model_len)
        if r.startup.ok:
            lost = f"max_model_len {L:,} → {s.suggested_max_model_len:,}"
            top = p.replan(gpu_memory_utilization=MAX_UTIL)
            util_note = (f"even at --gpu-memory-utilization {MAX_UTIL} it does not fit, so a lower utilisation only "
                         "makes it worse" if not top.startup.ok else
                         f"at --gpu-memory-utilization {MAX_UTIL} it would ({_outcome(top)})")
            out.append(replace(_fix(f"--max-model-len {s.suggested_max_model_len}",
                                    f"past the OOM, the plan says {L:,} tokens cannot start on this layout: "
                                    f"{(s.error or '').split(' Based on')[0]} ({util_note}); the largest length that "
                                    f"starts: {_outcome(r)}", "capacity", r), price=lost))
    fit = s.fits_with
    if fit is not None and fit.found:
        gpus = fit.gpus_per_replica
        r = p.replan(tensor_parallel_size=fit.tensor_parallel_size, pipeline_parallel_size=fit.pipeline_parallel_size)
        out.append(replace(_fix(f"--tensor-parallel-size {fit.tensor_parallel_size}"
                                + (f" --pipeline-parallel-size {fit.pipeline_parallel_size}"
                                   if fit.pipeline_parallel_size > 1 else ""),
                                f"the smallest layout that starts at max_model_len {L:,} ({gpus} GPUs): plan gives "
                                f"{_outcome(r)}", "hardware", r), price=f"{gpus} GPUs instead of "
                           f"{base.parallel.gpus_per_replica}"))
    out.extend(f for f in _fp8(p, args, L) if dict(f.numbers).get("starts"))
    return out
