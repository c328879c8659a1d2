"""Judging and ordering the configurations of ``kvplan tune``: SLO checks, goodput, the Pareto front.

The SLO checks are ``kvplan bench``'s, applied to the predicted run: a latency key (``ttft_p99``)
gates that percentile of all completed requests, ``error_rate`` counts rejected and failed requests,
``goodput_ratio`` the share of good requests. A request is good when it completed and each of its
own TTFT / TPOT / E2E is within the tightest limit given for that metric (vLLM's ``--goodput``
rule, as bench counts it); rejected requests are never good.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from ..slo import Slo

GOODPUT_METRICS = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class SloCheck:
    key: str
    limit: float
    value: Optional[float]
    passed: bool

    @property
    def ratio(self) -> float:
        """How far from the limit: ≤ 1 passes. Lower bounds (goodput_ratio) are inverted."""
        if self.value is None:
            return math.inf
        if self.key == "goodput_ratio":
            return self.limit / self.value if self.value > 0 else (0.0 if self.limit == 0 else math.inf)
        if self.limit <= 0:
            return 1.0 if self.value <= 0 else math.inf
        return self.value / self.limit

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "limit": self.limit, "value": self.value, "passed": self.passed}


def goodput_limits(slos: Sequence["Slo"]) -> dict[str, float]:
    """Per-request limits: the tightest one given for each of TTFT, TPOT and E2E."""
    limits: dict[str, float] = {}
    for s in slos:
        metric = s.key.split("_")[0]
        if metric in GOODPUT_METRICS:
            limits[metric] = min(s.limit, limits.get(metric, math.inf))
    return limits


def count_good(ttft: Sequence[float], tpot: Sequence[Optional[float]], e2e: Sequence[float],
               limits: Mapping[str, float]) -> int:
    """Completed requests whose own TTFT, TPOT and E2E all meet ``limits`` (a request with one
    output token has no TPOT, which then cannot fail it)."""
    lt, lp, le = limits.get("ttft", math.inf), limits.get("tpot", math.inf), limits.get("e2e", math.inf)
    good = 0
    for a, b, c in zip(ttft, tpot, e2e):
        if a <= lt and c <= le and (b is None or b <= lp):
            good += 1
    return good


def check_slos(slos: Sequence["Slo"], latency: Mapping[str, Mapping[str, Optional[float]]], *,
               error_rate: Optional[float], goodput_ratio: Optional[float]) -> tuple[SloCheck, ...]:
    out = []
    for s in slos:
        if s.key == "error_rate":
            value = error_rate
        elif s.key == "goodput_ratio":
            value = goodput_ratio
        else:
            metric, stat = s.key.split("_", 1)
            value = latency.get(metric, {}).get(stat)
        if value is None:
            out.append(SloCheck(s.key, s.limit, None, False))
        else:
            passed = value >= s.limit if s.lower_bound else value <= s.limit
            out.append(SloCheck(s.key, s.limit, value, passed))
    return tuple(out)


def closeness(checks: Sequence[SloCheck]) -> float:
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
