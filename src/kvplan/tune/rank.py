"""Ordering the configurations of ``kvplan tune``: the closest miss, the objective, the Pareto front.

The SLO checks and goodput are :mod:`kvplan.slo`'s (``kvplan bench``'s judge, applied to the
predicted run): a latency key (``ttft_p99``) gates that percentile of all completed requests,
``error_rate`` counts rejected and failed requests, ``goodput_ratio`` the share of good requests.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from ..slo import Check, Slo

def check_dict(check: "Check") -> dict[str, Any]:
    """A row's check as tune's JSON writes it."""
    return {"key": check.name, "limit": check.limit, "value": check.value, "passed": check.passed}


def closeness(checks: Sequence["Check"]) -> float:
    """The worst check's value / limit: ≤ 1 means every SLO is met; the smallest miss is the closest."""
    return max((c.ratio for c in checks), default=0.0)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the non-dominated points when the first coordinate is maximised (throughput per
    GPU) and the second minimised (latency). A point is dominated when another is at least as good
    on both and strictly better on one; equal points are all kept. NaN points are never on it."""
    valid = [(i, x, y) for i, (x, y) in enumerate(points) if not (math.isnan(x) or math.isnan(y))]
    # Sweep by throughput descending (ties: lower latency first): a point is on the front when its
    # latency is below every latency seen at strictly higher throughput, or equal to the best of its
    # own throughput group when that group's best is on the front.
    valid.sort(key=lambda t: (-t[1], t[2], t[0]))
    front: list[int] = []
    best_higher = math.inf  # lowest latency among points with strictly higher throughput
    i = 0
    while i < len(valid):
        j = i
        while j < len(valid) and valid[j][1] == valid[i][1]:
            j += 1
        group_best = valid[i][2]
        if group_best < best_higher:
            front.extend(idx for idx, _, y in valid[i:j] if y == group_best)
        best_higher = min(best_higher, group_best)
        i = j
    return sorted(front)


def rank_key(objective: str, meets: bool, goodput_per_gpu: float, latency: Optional[float], gpus: int,
             miss: float, index: int) -> tuple:
    """Configurations that meet every SLO first, ordered by the objective (ties: lower latency, then
    fewer GPUs, then the order of the space); the others after them, closest miss first."""
    lat = latency if latency is not None else math.inf
    if not meets:
        return (1, miss, -goodput_per_gpu, lat, gpus, index)
    if objective == "min_gpus":
        return (0, gpus, -goodput_per_gpu, lat, 0, index)
    return (0, -goodput_per_gpu, lat, gpus, 0, index)


def pareto_latency_key(slos: Sequence["Slo"]) -> str:
    """The latency of the Pareto front: the first latency percentile the SLOs name, else e2e_p99."""
    for s in slos:
        metric, _, stat = s.key.partition("_")
        if metric in ("ttft", "tpot", "itl", "e2e") and stat:
            return s.key
    return "e2e_p99"
