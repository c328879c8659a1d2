"""Percentiles and bootstrap confidence intervals, in pure Python (no numpy on the core path).

Percentiles interpolate linearly between order statistics, as ``numpy.percentile`` does (and so
``vllm bench serve``), so numbers compare across tools.

The bootstrap of a quantile needs no resampling loop: the k-th order statistic of a resample
of n values is ``x[ceil(n·U)]`` with ``U ~ Beta(k, n-k+1)`` (the k-th of n uniforms), so each
replicate costs one beta draw instead of n. Quantiles for the bootstrap use the nearest rank
``k = ceil(q·n)``.
"""
from __future__ import annotations

import math
import random
from typing import Optional, Sequence

from ..quantiles import percentile

PCTS = (50, 90, 95, 99)


def summarize(xs: Sequence[float]) -> dict:
    """{p50, p90, p95, p99, max, mean, count} (None values when there is no observation)."""
    s = sorted(xs)
    out = {f"p{p}": _r(percentile(s, p)) for p in PCTS}
    out["max"] = _r(s[-1]) if s else None
    out["mean"] = _r(math.fsum(s) / len(s)) if s else None
    out["count"] = len(s)
    return out


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 6)


def bootstrap_quantile(sorted_xs: Sequence[float], q: float, n_boot: int, rng: random.Random) -> list[float]:
    """``n_boot`` bootstrap replicates of the q-quantile (nearest rank) of ``sorted_xs``."""
    n = len(sorted_xs)
    if n == 0:
        return []
    k = min(n, max(1, math.ceil(q * n)))
    out = []
    for _ in range(n_boot):
        u = rng.betavariate(k, n - k + 1)
        out.append(sorted_xs[min(n - 1, max(0, math.ceil(n * u) - 1))])
    return out


def diff_ci(base: Sequence[float], cur: Sequence[float], q: float, n_boot: int = 2000, seed: int = 0,
            level: float = 0.95) -> Optional[tuple[float, float, float]]:
    """(point, lo, hi) of the relative change (cur − base) / base of the q-quantile, with a
    bootstrap confidence interval; None when either side has no data or base is 0."""
    b, c = sorted(base), sorted(cur)
    if not b or not c:
        return None
    pb, pc = percentile(b, q * 100), percentile(c, q * 100)
    if not pb:
        return None
    rng = random.Random(seed)
    rb = bootstrap_quantile(b, q, n_boot, rng)
    rc = bootstrap_quantile(c, q, n_boot, rng)
    rel = sorted((y - x) / x for x, y in zip(rb, rc) if x > 0)
    if not rel:
        return None
    alpha = (1 - level) / 2
    return (pc - pb) / pb, percentile(rel, alpha * 100), percentile(rel, (1 - alpha) * 100)


def subsample(xs: Sequence[float], cap: int, seed: int = 0) -> list[float]:
    """At most ``cap`` values, uniformly chosen (seeded), to keep result files small."""
    if len(xs) <= cap:
        return list(xs)
    return random.Random(seed).sample(list(xs), cap)
