"""Linear-interpolation percentiles (numpy's default, and so ``vllm bench serve``'s), in pure Python.

A neutral module: ``kvplan bench`` summarises measured latencies and ``kvplan simulate`` predicted
ones with the same rule, so the two compare number for number (``kvplan.bench.stats`` re-exports it).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence


def percentile(sorted_xs: Sequence[float], p: float) -> Optional[float]:
    """Linear-interpolation percentile (numpy's default) of already sorted values."""
    n = len(sorted_xs)
    if n == 0:
        return None
    if n == 1:
        return float(sorted_xs[0])
    pos = (n - 1) * p / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return float(sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * frac)
