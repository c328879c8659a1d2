"""``SimResult``: one simulated run, with the keys of ``kvplan bench``'s result where the quantity is
the same (``requests.*``, ``tokens.*``, ``latency_s.{ttft,tpot,itl,e2e}.*``, ``throughput.*``), so a
prediction and a measurement compare field by field (docs/sim.md has the schema).

Latencies follow ``vllm bench serve`` / ``kvplan bench``: TTFT = first token - arrival, E2E = last
token - arrival, TPOT = (E2E - TTFT) / (output tokens - 1), ITL = every gap between consecutive
tokens of a request, queue = first scheduled - arrival. Percentiles interpolate linearly
(:func:`kvplan.quantiles.percentile`). ITL samples are kept as (gap, count) pairs - one pair per
step for the requests that decoded back to back - so a million-request run stays small.
"""
from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from ..quantiles import percentile

SCHEMA_VERSION = 1
STATS = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9))
LATENCY_KEYS = ("ttft", "tpot", "itl", "e2e", "queue")


def _r(x: Optional[float], nd: int = 6) -> Optional[float]:
    return None if x is None else round(x, nd)


def summarize(xs: Sequence[float]) -> dict:
    """{p50, p90, p95, p99, p999, max, mean, count} of plain samples."""
    s = sorted(xs)
    out = {k: _r(percentile(s, p)) for k, p in STATS}
    out["max"] = _r(s[-1]) if s else None
    out["mean"] = _r(math.fsum(s) / len(s)) if s else None
    out["count"] = len(s)
    return out


def summarize_weighted(pairs: Sequence[tuple[float, int]]) -> dict:
    """The same summary over (value, count) pairs, as if each value were repeated count times
    (numpy's linear interpolation on the expanded, sorted array)."""
    items = sorted(pairs)  # the engine only records counts >= 1
    out: dict[str, Any] = {}
    if not items:
        out.update({k: None for k, _ in STATS})
        out.update({"max": None, "mean": None, "count": 0})
        return out
    counts = [c for _, c in items]
    cum = list(itertools.accumulate(counts))  # cum[j] = index after the last copy of items[j]
    n = cum[-1]

    def at(k: int) -> float:
        return items[bisect.bisect_right(cum, k)][0]

    for key, p in STATS:
        pos = (n - 1) * p / 100.0
        lo = int(math.floor(pos))
        hi = min(lo + 1, n - 1)
        a, b = at(lo), at(hi)
        out[key] = _r(a + (b - a) * (pos - lo))
    out["max"] = _r(items[-1][0])
    out["mean"] = _r(math.fsum(v * c for v, c in items) / n)
    out["count"] = n
    return out


@dataclass(frozen=True)
class SimResult:
    """One simulated run. Sections are JSON-ready; :meth:`to_dict` is the file format."""

    meta: Mapping[str, Any]
    config: Mapping[str, Any]
    requests: Mapping[str, Any]
    tokens: Mapping[str, Any]
    latency_s: Mapping[str, Mapping[str, Any]]
    throughput: Mapping[str, Any]
    preemptions: int
    rejected: int
    rejected_reasons: Mapping[str, int]
    kv_cache: Mapping[str, Any]
    engine: Mapping[str, Any]
    timeline: tuple[Mapping[str, Any], ...]
    first_token_order: tuple[int, ...]
    saturation: Mapping[str, Any]
    profile: Mapping[str, Any]
    trace: Mapping[str, Any]
    checks: tuple[Mapping[str, Any], ...] = ()
    per_request: Optional[tuple[Mapping[str, Any], ...]] = None
    samples: Mapping[str, Sequence[float]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    bench: Mapping[str, Any] = field(default_factory=dict)  # vllm bench serve's figures (its result JSON keys)
    fleet: Mapping[str, Any] = field(default_factory=dict)  # data parallel: the replicas and their balancer

    @property
    def passed(self) -> bool:
        return all(c["passed"] for c in self.checks)

    def metric(self, key: str) -> Optional[float]:
        """``ttft_p99`` -> the value; ``error_rate`` / ``goodput_ratio`` too (SLO keys)."""
        if key == "error_rate":
            return self.requests.get("error_rate")
        if key == "goodput_ratio":
            return self.requests.get("goodput_ratio")
        metric, _, stat = key.partition("_")
        return (self.latency_s.get(metric) or {}).get(stat)

    def to_dict(self) -> dict:
        d = {"schema_version": SCHEMA_VERSION, "kind": "kvplan.simulate", **dict(self.meta),
             "config": dict(self.config), "trace": dict(self.trace),
             "verdict": {"passed": self.passed, "checks": [dict(c) for c in self.checks]},
             "requests": dict(self.requests), "tokens": dict(self.tokens),
             "latency_s": {k: dict(v) for k, v in self.latency_s.items()},
             "throughput": dict(self.throughput), "preemptions": self.preemptions, "rejected": self.rejected,
             "rejected_reasons": dict(self.rejected_reasons), "kv_cache": dict(self.kv_cache),
             "engine": dict(self.engine), "saturation": dict(self.saturation),
             "timeline": [dict(t) for t in self.timeline], "first_token_order": list(self.first_token_order),
             "profile": dict(self.profile), "samples": {k: list(v) for k, v in self.samples.items()},
             "notes": list(self.notes), "bench": dict(self.bench)}
        if self.fleet:
            d["fleet"] = dict(self.fleet)
        if self.per_request is not None:
            d["per_request"] = [dict(r) for r in self.per_request]
        return d
