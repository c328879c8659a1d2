"""One replica's simulation inside a sweep, and the fleet's metrics from its replicas.

A task is (configuration, data-parallel size, replica k): the replica simulates requests k, k+DP,
k+2·DP, … of the trace. Its outcome keeps each completed request's TTFT, TPOT and E2E (not the
whole result: outcomes cross process boundaries), so the fleet's percentiles and its goodput are
computed over every request of the trace exactly as for a single replica. ITL is per token; the
fleet's ITL percentile is the largest of its replicas' (an upper bound; exact when DP = 1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ..quantiles import percentile

LATENCY_STATS = ("p50", "p90", "p95", "p99", "p999", "max", "mean")
_PCTS = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9))


@dataclass(frozen=True)
class ShareOutcome:
    total: int
    completed: int
    rejected: int
    failed: int
    output_tokens: int
    start_s: float  # first arrival
    end_s: float  # last completion
    ttft: tuple[float, ...]
    tpot: tuple[Optional[float], ...]  # None: one output token
    e2e: tuple[float, ...]
    itl: dict  # the replica's ITL percentiles
    preemptions: int


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


def summarize(xs: Sequence[float]) -> dict:
    s = sorted(xs)
    out: dict[str, Optional[float]] = {name: percentile(s, p) for name, p in _PCTS}
    out["max"] = s[-1] if s else None
    out["mean"] = math.fsum(s) / len(s) if s else None
    return {k: (None if v is None else round(v, 6)) for k, v in out.items()}


def combine_shares(shares: Sequence[ShareOutcome]) -> Fleet:
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
    if len(shares) == 1:
        itl = dict(shares[0].itl)
    latency = {"ttft": summarize(ttft), "tpot": summarize([x for x in tpot if x is not None]),
               "itl": itl, "e2e": summarize(e2e)}
    return Fleet(
        total=sum(s.total for s in shares), completed=sum(s.completed for s in shares),
        rejected=sum(s.rejected for s in shares), failed=sum(s.failed for s in shares),
        output_tokens=sum(s.output_tokens for s in shares), window_s=window, ttft=ttft, tpot=tpot, e2e=e2e,
        latency=latency, preemptions=sum(s.preemptions for s in shares),
    )


def simulate_share(task: tuple, shared: dict[str, Any]) -> ShareOutcome:
    """Run in a worker: simulate replica ``k`` of ``dp`` on its round-robin share of the trace."""
    from . import simulate

    _index, request, plan_result, profile, dp, k = task
    shares = shared.setdefault("_shares", {})
    if dp not in shares:
        from .tune_space import split_round_robin

        shares[dp] = split_round_robin(shared["trace"], dp)
    trace = shares[dp][k]
    result = simulate(request, trace, profile=profile, plan_result=plan_result)
    return outcome_of(result, trace)


def outcome_of(result, trace) -> ShareOutcome:
    """The compact outcome of one SimResult."""
    d = result.to_dict()
    req = d["requests"]
    per = d.get("per_request") or []
    ttft, tpot, e2e = [], [], []
    ends = []
    for r in per:
        if r.get("ttft") is None or r.get("e2e") is None:
            continue
        ttft.append(r["ttft"])
        e2e.append(r["e2e"])
        tpot.append(r.get("tpot"))
        ends.append(r.get("finish_s", r.get("arrival_s", 0.0) + r["e2e"]))
    start = trace.requests[0].arrival_s if trace.requests else 0.0
    return ShareOutcome(
        total=req["total"], completed=req["completed"], rejected=req.get("rejected", 0),
        failed=req.get("failed", 0), output_tokens=d["tokens"]["output"], start_s=start,
        end_s=max(ends) if ends else start, ttft=tuple(ttft), tpot=tuple(tpot), e2e=tuple(e2e),
        itl=dict(d["latency_s"]["itl"]), preemptions=int(d.get("preemptions", 0)),
    )
