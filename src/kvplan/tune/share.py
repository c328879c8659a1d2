"""One replica's simulation inside a sweep, and the fleet's metrics from its replicas.

A task is (configuration, data-parallel size, replica k): the replica simulates requests k, k+DP,
k+2·DP, … of the trace (round-robin: each replica sees rate / DP). Its outcome keeps each completed
request's TTFT, TPOT and E2E (not the whole result: outcomes cross process boundaries). By default
a sweep simulates replica 0 only - the replicas are alike, and a replica's simulation costs about
as much as the whole trace's (the steps follow the trace's duration, not its request count) - and
scales its throughput by DP; with ``all_replicas`` every replica runs and the fleet's percentiles
and goodput are over every request of the trace. ITL is per token: the fleet's ITL percentile is
then the largest of its replicas' (an upper bound; exact for one replica).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from ..sim.result import summarize

LATENCY_STATS = ("p50", "p90", "p95", "p99", "p999", "max", "mean")


@dataclass(frozen=True)
class ShareOutcome:
    total: int
    completed: int
    rejected: int  # longer than max_model_len, as vLLM rejects them
    failed: int  # every request that did not complete (rejected ones included), as SimResult counts
    output_tokens: int
    start_s: float  # first arrival
    end_s: float  # last completion
    ttft: tuple[float, ...]
    tpot: tuple[Optional[float], ...]  # None: one output token
    e2e: tuple[float, ...]
    itl: dict  # the replica's ITL percentiles
    preemptions: int
    profile: str = ""  # the step-time profile's source
    # What the reuse rule (:mod:`.reuse`) needs to know about the run:
    max_waiting: int = 0  # the waiting queue after a step, at its longest
    kv_peak_blocks: int = 0  # KV blocks in use after a step, at most
    kv_rejections: int = 0  # requests rejected because they could never fit the KV cache
    kv_waits: int = 0  # times a waiting request was held back for want of KV blocks
    saturated: Optional[bool] = None  # the simulator's verdict on the replica's backlog (None: trace too short)
    saturation_reason: str = ""  # the detector's own words (why it could or could not judge)
    #: the verdict weighed the completion ceiling: a burst that fills max_num_seqs and the KV cache,
    #: so it depends on limits the trace itself may never reach (the reuse rule must not assume it)
    ceiling_measured: bool = False
    replicas: int = 1  # the replicas this outcome covers (the whole fleet when the balancer reads their state)


@dataclass(frozen=True)
class Fleet:
    total: int
    completed: int
    rejected: int
    failed: int
    output_tokens: int
    window_s: float
    ttft: tuple[float, ...]
    tpot: tuple[Optional[float], ...]
    e2e: tuple[float, ...]
    latency: dict
    preemptions: int
    saturated: Optional[bool] = None  # True when any replica's backlog grows without bound
    saturation_reason: str = ""  # the first unjudged (or saturated) replica's reason


def combine_shares(shares: Sequence[ShareOutcome]) -> Fleet:
    shares = [s for s in shares if s.replicas] or list(shares)  # a fleet's one outcome stands for every replica
    ttft = tuple(x for s in shares for x in s.ttft)
    tpot = tuple(x for s in shares for x in s.tpot)
    e2e = tuple(x for s in shares for x in s.e2e)
    starts = [s.start_s for s in shares if s.total]
    ends = [s.end_s for s in shares if s.completed]
    window = (max(ends) - min(starts)) if starts and ends else 0.0
    itl: dict[str, Optional[float]] = {}
    for stat in LATENCY_STATS:
        vals = [s.itl.get(stat) for s in shares if s.itl.get(stat) is not None]
        itl[stat] = max(vals) if vals else None
    itl["count"] = sum(s.itl.get("count") or 0 for s in shares)
    if len(shares) == 1:
        itl = dict(shares[0].itl)
    latency = {"ttft": summarize(ttft), "tpot": summarize([x for x in tpot if x is not None]),
               "itl": itl, "e2e": summarize(e2e)}
    return Fleet(
        total=sum(s.total for s in shares), completed=sum(s.completed for s in shares),
        rejected=sum(s.rejected for s in shares), failed=sum(s.failed for s in shares),
        output_tokens=sum(s.output_tokens for s in shares), window_s=window, ttft=ttft, tpot=tpot, e2e=e2e,
        latency=latency, preemptions=sum(s.preemptions for s in shares),
        saturated=True if any(s.saturated for s in shares) else (
            False if all(s.saturated is False for s in shares) else None),
        saturation_reason=next((s.saturation_reason for s in shares if s.saturated is not False),
                               shares[0].saturation_reason if shares else ""),
    )


def simulate_share(task: tuple, shared: dict[str, Any]) -> ShareOutcome:
    """Run in a worker: replica ``k`` of ``dp`` on its share of the trace when the load balancer
    depends on the arrival order only (round-robin, random, vLLM's where it sees no engine
    state: :mod:`kvplan.sim.balancer`); the whole fleet, simulated together, when it reads their state."""
    from ..sim.balancer import assign_blind, assign_static, rule_for
    from ..sim.simulate import _trace_seed, _version_of, simulate
    from ..sim.steptime import default_profile

    _index, request, plan_result, profile, dp, k = task
    trace = shared["trace"]
    lb = shared.get("load_balancer")
    prof = profile or default_profile(request, plan_result)
    rule = rule_for(lb, replicas=dp, vllm_version=_version_of(request), moe=request.model.is_moe,
                    seed=_trace_seed(trace)) if dp > 1 else None
    if rule is not None and not rule.static and not getattr(trace, "max_concurrency", None):
        if k:
            return ShareOutcome(0, 0, 0, 0, 0, 0.0, 0.0, (), (), (), {}, 0, prof.source, replicas=0)
        result = simulate(request, trace, profile=prof, plan_result=plan_result, per_request=True, load_balancer=lb)
        return replace(outcome_of(result, trace), profile=prof.source, replicas=dp)
    shares = shared.setdefault("_shares", {})
    key = (dp, lb)
    if key not in shares:
        if rule is None or getattr(trace, "max_concurrency", None) or rule.kind == "round_robin":
            from .space import split_round_robin

            shares[key] = split_round_robin(trace, dp)
        else:
            reqs = trace.requests
            owner = (assign_blind(rule, [r.arrival_s for r in reqs], dp) if rule.kind == "blind"
                     else assign_static(rule, len(reqs), dp))
            shares[key] = [replace(trace, requests=tuple(r for r, j in zip(reqs, owner) if j == i),
                                   source=f"{trace.source} (replica {i + 1}/{dp}, {rule.balancer})") for i in range(dp)]
    sub = shares[key][k]
    result = simulate(replace(request, data_parallel_size=1), sub, profile=prof, plan_result=plan_result,
                      per_request=True)
    return replace(outcome_of(result, sub), profile=prof.source)


def outcome_of(result, trace) -> ShareOutcome:
    """The compact outcome of one SimResult: each completed request's TTFT and E2E as its
    per-request record gives them (what the client sees), TPOT = (end - first token) / (output
    tokens - 1), as SimResult defines them."""
    ttft, tpot, e2e = [], [], []
    end = None
    for r in result.per_request or ():
        if r["status"] != "completed":
            continue
        f, e, n = r["first_token"], r["end"], r["output_tokens"]
        ttft.append(r["ttft"])
        e2e.append(r["e2e"])
        tpot.append((e - f) / (n - 1) if n > 1 else None)
        end = e if end is None or e > end else end
    req = result.requests
    start = trace.requests[0].arrival_s if trace.requests else 0.0
    kv = result.kv_cache
    peak = math.ceil(float(kv.get("peak_usage") or 0.0) * int(kv.get("usable_blocks") or 0) + 1e-9) + 1
    return ShareOutcome(
        total=req["total"], completed=req["completed"], rejected=req["rejected"], failed=req["failed"],
        output_tokens=result.tokens["output"], start_s=start, end_s=start if end is None else end,
        ttft=tuple(ttft), tpot=tuple(tpot), e2e=tuple(e2e), itl=dict(result.latency_s["itl"]),
        preemptions=int(result.preemptions), max_waiting=int(result.engine.get("max_waiting") or 0),
        kv_peak_blocks=peak, kv_rejections=int(result.rejected_reasons.get("exceeds_kv_cache", 0)),
        kv_waits=int(result.engine.get("kv_waits") or 0),
        saturated=(result.saturation or {}).get("saturated"),
        saturation_reason=str((result.saturation or {}).get("reason") or ""),
        ceiling_measured=(result.saturation or {}).get("ceiling_rps") is not None,
    )
