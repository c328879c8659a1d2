"""Fixes with predicted effects, computed by kvplan's own plan: every proposed flag change is
re-planned with :func:`kvplan.memory.plan` (vLLM's accounting), and measured against the real
traffic with :func:`kvplan.workload.traffic_fit` / ``coverage_at`` when a request log was given.
Nothing here estimates by hand: a fix whose plan does not start says so."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ..errors import UsageError
from ..ops.doctor.model import Fix


def replan(req, **changes):
    """The plan with ``changes`` applied (None when the flags are not plannable at all)."""
    from ..memory import plan

    try:
        return plan(replace(req, **changes), what_ifs=False)
    except UsageError:
        return None


def fit_at_mix(plan_result, lengths) -> Optional[float]:
    """Requests of the log's length mix the plan's KV cache holds (traffic_fit), or None."""
    if lengths is None or not plan_result.startup.ok:
        return None
    from ..workload.traffic import traffic_fit

    return traffic_fit(plan_result, lengths).requests_fit_at_mix


def gpu_memory_fraction(r) -> float:
    """What vLLM will hold on the most loaded GPU, as a fraction of it: the non-KV terms, the KV
    cache it allocates, and what sits outside the budget (CUDA context; 0.11+)."""
    m = r.memory
    used = m.non_kv_gib + m.kv_cache_used_gib + m.preexisting_gib
    return used / m.total_gib_per_gpu if m.total_gib_per_gpu else 0.0


def plan_effect(r, lengths=None) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """One line a reader can check with `kvplan plan`, and its numbers."""
    if r is None:
        return "kvplan cannot plan these flags", ()
    if not r.startup.ok:
        return f"vLLM still refuses to start: {(r.startup.error or r.startup.error_kind or '')[:240]}", \
            (("starts", False),)
    L = r.flags.max_model_len
    nums: list[tuple[str, Any]] = [("starts", True), ("max_model_len", L), ("kv_cache_tokens", r.kv.kv_cache_tokens),
                                   ("max_concurrency", round(r.kv.max_concurrency, 2))]
    text = (f"starts; KV cache {r.kv.kv_cache_tokens:,} tokens = {r.kv.max_concurrency:.1f}x concurrency at "
            f"{L:,} tokens")
    if r.flags.device != "cpu":
        frac = gpu_memory_fraction(r)
        text += f"; GPU memory {frac:.1%}"
        nums.append(("gpu_memory_fraction", round(frac, 4)))
    if lengths is not None:
        from ..workload.finalize import coverage_at

        mix = fit_at_mix(r, lengths)
        cov = coverage_at(lengths, L)
        text += (f"; {mix:,.0f} requests of the log's length mix fit; at {L:,} tokens "
                 f"{cov.rejected_share:.2%} of requests rejected, {cov.clamped_share:.2%} clamped")
        nums += [("requests_fit_at_mix", mix), ("rejected_share", cov.rejected_share),
                 ("clamped_share", cov.clamped_share)]
    return text, tuple(nums)


def priced(before, after) -> tuple[str, str]:
    """(cost category, price) of going from plan ``before`` to plan ``after``, in the plans' own
    numbers: a fix that removes KV cache is never "free"."""
    if before is None or after is None or not after.startup.ok:
        return "free", ""
    b, a = before.kv.kv_cache_tokens, after.kv.kv_cache_tokens
    gpus_b, gpus_a = before.parallel.total_gpus, after.parallel.total_gpus
    parts = []
    if gpus_a > gpus_b:
        parts.append(f"+{gpus_a - gpus_b} GPU(s)")
    if before.startup.ok and a < b:
        parts.append(f"−{b - a:,} KV tokens per replica (−{(b - a) / b:.0%} of {b:,})" if b else "")
    shorter = before.startup.ok and after.flags.max_model_len < before.flags.max_model_len  # longer requests refused
    if shorter:
        parts.append(f"max_model_len {before.flags.max_model_len:,} → {after.flags.max_model_len:,}")
    category = "hardware" if gpus_a > gpus_b else ("capacity" if before.startup.ok and a < b or shorter else "free")
    return category, "; ".join(p for p in parts if p)


def plan_fix(req, change: str, changes: dict, lengths=None, cost: str = "free", prefix: str = "") -> Optional[Fix]:
    r = replan(req, **changes)
    if r is None:
        return None
    effect, nums = plan_effect(r, lengths)
    category, price = priced(replan(req), r)
    if cost == "free":
        cost = category  # a "free" flag change that gives up KV cache costs capacity
    return Fix(change, (prefix + effect) if prefix else effect, cost, nums, basis="plan", price=price)


def leaves_headroom(r) -> bool:
    """plan_memory's rule for a re-planned fix: the one headroom rule of kvplan.memory
    (PlanResult.headroom), the same that kvplan plan warns with."""
    return r.flags.device == "cpu" or r.headroom is None or r.headroom.ok


def what_if_fixes(plan_result, req, lengths=None, memory_limit: Optional[float] = None,
                  within_budget: bool = False) -> list[Fix]:
    """kvplan plan's own what-ifs (fp8 KV cache, TP x 2, utilisation 0.95), re-planned at the
    same max_model_len and measured against the traffic. With ``memory_limit`` (a share of the
    GPU), a what-if whose peak would exceed it is not proposed; with ``within_budget``, one that
    would fail plan_memory's rule (:func:`leaves_headroom`)."""
    cost = {"kv_cache_dtype": "accuracy", "tensor_parallel_size": "hardware", "gpu_memory_utilization": "free"}
    # (plan_fix prices each: a "free" change that gives up KV cache becomes "capacity")
    out = []
    for w in plan_result.what_if:
        if not w.ok:
            continue
        fx = plan_fix(req, w.change, dict(w.flags), lengths,
                      cost=next((cost[k] for k in w.flags if k in cost), "free"))
        if fx is None:
            continue
        frac = dict(fx.numbers).get("gpu_memory_fraction")
        if memory_limit is not None and frac is not None and frac > memory_limit:
            continue
        if within_budget:
            r = replan(req, **dict(w.flags))
            if r is not None and not leaves_headroom(r):
                continue
        out.append(fx)
    return out


def doctor_planner(req, plan_result):
    """The doctor's re-planner (ops.doctor.planned.LogPlanner) for this plan, so the doctor's own
    fixes (preemption, OOM) predict their effect with kvplan plan instead of log arithmetic."""
    from ..ops.doctor.planned import LogPlanner

    total = req.gpu.memory_bytes if req.device == "cuda" else None
    return LogPlanner(request=req, baseline=plan_result, kv_bytes=int(plan_result.memory.available_kv_cache_bytes),
                      total_bytes=total, label=f"{plan_result.model.id}, vLLM {plan_result.vllm_semantics} rules")


def within_memory_limit(fixes, req, limit: Optional[float] = None) -> tuple[Fix, ...]:
    """Drop a fix that raises --gpu-memory-utilization so far that plan_memory would not pass:
    less than the estimate's error band left outside vLLM's budget (``limit``: a share of the GPU
    the peak must stay under instead)."""
    from ..memory.borderline import error_band_bytes

    out = []
    for f in fixes:
        if req.device == "cuda" and f.change.startswith("--gpu-memory-utilization "):
            try:
                util = float(f.change.split()[1])
            except (IndexError, ValueError):
                util = None
            r = replan(req, gpu_memory_utilization=util) if util is not None else None
            if r is not None:
                peak = gpu_memory_fraction(r)
                cap = limit if limit is not None else 1 - error_band_bytes(req.gpu.memory_bytes) / req.gpu.memory_bytes
                if peak > cap:
                    continue
        out.append(f)
    return tuple(out)
