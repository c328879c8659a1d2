"""Percentiles and confidence intervals of quantiles, in pure Python (no numpy on the core path).

Percentiles interpolate linearly between order statistics, as ``numpy.percentile`` does (and so
``vllm bench serve``), so numbers compare across tools.

The interval of a quantile's change between two runs is one function, :func:`quantile_change_ci`:
distribution-free order-statistic intervals (exact for any distribution and any n; the bootstrap
it replaced was not, for tail quantiles of small samples).
"""
from __future__ import annotations

import math
import random
from typing import Optional, Sequence

from ..quantiles import percentile

PCTS = (50, 90, 95, 99)


def summarize(xs: Sequence[float]) -> dict:
    """{p50, p90, p95, p99, max, mean, count} (None values when there is no observation)."""
    from ..runs.sections import LatencyStats

    return LatencyStats.of(xs).to_dict()


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 6)


def subsample(xs: Sequence[float], cap: int, seed: int = 0) -> list[float]:
    """At most ``cap`` values, uniformly chosen (seeded), to keep result files small."""
    if len(xs) <= cap:
        return list(xs)
    return random.Random(seed).sample(list(xs), cap)


# --------------------------------------------------------------------------- distribution-free
def _binom_cdf_table(n: int, q: float) -> list[float]:
    """P(B <= j) for B ~ Binomial(n, q), j = 0..n (log space: n may be tens of thousands)."""
    if q <= 0 or q >= 1:
        raise ValueError("q must be in (0, 1)")
    lq, l1q = math.log(q), math.log1p(-q)
    lg = math.lgamma(n + 1)
    out, acc = [], 0.0
    for j in range(n + 1):
        acc += math.exp(lg - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lq + (n - j) * l1q)
        out.append(min(1.0, acc))
    return out


def quantile_ci_ranks(n: int, q: float, level: float) -> tuple[Optional[int], Optional[int]]:
    """1-based ranks (l, u) with P(x_(l) <= ξ_q <= x_(u)) >= ``level`` for any continuous
    distribution (ξ_q its true q-quantile): the number of samples below ξ_q is Binomial(n, q), each
    tail gets (1 - level) / 2. None for a side no order statistic can bound at this n (the sample
    is too small for that quantile at that level)."""
    if n <= 0:
        return None, None
    a = (1 - level) / 2
    cdf = _binom_cdf_table(n, q)
    # x_(l) > ξ_q iff fewer than l samples are below ξ_q: P(B <= l-1) <= a
    lo = None
    for l in range(n, 0, -1):
        if cdf[l - 1] <= a:
            lo = l
            break
    # x_(u) < ξ_q iff at least u samples are below it: P(B >= u) = 1 - P(B <= u-1) <= a
    hi = None
    for u in range(1, n + 1):
        if 1 - cdf[u - 1] <= a:
            hi = u
            break
    return lo, hi


def min_count_for_quantile(q: float, level: float) -> int:
    """The smallest n whose distribution-free interval for the q-quantile is bounded on both sides
    at ``level``: (1 - q)^n and q^n both at most (1 - level) / 2."""
    a = (1 - level) / 2
    return max(1, math.ceil(math.log(a) / math.log(max(q, 1 - q)) - 1e-9))


def quantile_change_ci(base: Sequence[float], cur: Sequence[float], q: float,
                       level: float) -> Optional[tuple[float, Optional[float], Optional[float]]]:
    """(point, lo, hi) of the relative change (cur − base) / base of the q-quantile of two
    independent samples of non-negative values (latencies). Each side gets a distribution-free
    order-statistic interval at sqrt(level) (both hold together with probability >= level); the
    change's interval is [cur_lo / base_hi - 1, cur_hi / base_lo - 1]: conservative, and valid for
    tail quantiles at small n, where a bootstrap is not. A side no order statistic bounds is None
    (-100% / unbounded). None when either sample is empty or the baseline's quantile is 0."""
    b, c = sorted(base), sorted(cur)
    if not b or not c:
        return None
    pb, pc = percentile(b, q * 100), percentile(c, q * 100)
    if not pb:
        return None
    side = math.sqrt(level)
    bl, bh = quantile_ci_ranks(len(b), q, side)
    cl, ch = quantile_ci_ranks(len(c), q, side)
    lo = c[cl - 1] / b[bh - 1] - 1 if cl is not None and bh is not None and b[bh - 1] > 0 else None
    hi = c[ch - 1] / b[bl - 1] - 1 if ch is not None and bl is not None and b[bl - 1] > 0 else None
    return (pc - pb) / pb, lo, hi
