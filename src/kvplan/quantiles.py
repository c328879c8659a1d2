"""Linear-interpolation percentiles (numpy's default, and so ``vllm bench serve``'s), in pure Python.

A neutral module: ``kvplan bench`` summarises measured latencies and ``kvplan simulate`` predicted
ones with the same rule, so the two compare number for number (``kvplan.bench.stats`` re-exports it).
"""
from __future__ import annotations

import math
from typing import Final, Optional, Sequence


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


#: Below this many values sorting them is as quick as selecting (and interpreted, always quicker).
_SELECT_FROM: Final = 20_000
#: Whether this module runs compiled (``scripts/build_native.py``): selection pays only then.
COMPILED = not __file__.endswith(".py")


def percentiles(values: Sequence[float], ps: Sequence[float]) -> list[Optional[float]]:
    """``percentile(sorted(values), p)`` for each ``p``: the same floats (the same two order
    statistics and the same arithmetic), without sorting a large sample when compiled."""
    n = len(values)
    if n < _SELECT_FROM or not COMPILED:
        s = sorted(values)
        return [percentile(s, p) for p in ps]
    ranks: list[int] = []
    for p in ps:
        lo = int(math.floor((n - 1) * p / 100.0))
        ranks.append(lo)
        ranks.append(min(lo + 1, n - 1))
    at = values_at_ranks(list(values), ranks)
    out: list[Optional[float]] = []
    for i, p in enumerate(ps):
        pos = (n - 1) * p / 100.0
        lo = int(math.floor(pos))
        a, b = at[2 * i], at[2 * i + 1]
        out.append(float(a + (b - a) * (pos - lo)))
    return out


def weighted_percentiles(pairs: list[tuple[float, int]], ps: Sequence[float]) -> tuple[int, list[float], float, float]:
    """Of (value, count) pairs (each value repeated count >= 1 times; at least one pair): the count,
    the percentiles ``ps`` (linear, numpy's), the largest value and the exact sum of value x count,
    in linear time (:func:`weighted_values_at_ranks`)."""
    n = 0
    highest = pairs[0][0]
    products: list[float] = []
    for v, c in pairs:
        n += c
        products.append(v * c)
        if v >= highest:  # (the last of equal values: the sorted order's last)
            highest = v
    ranks: list[int] = []
    for p in ps:
        lo = int(math.floor((n - 1) * p / 100.0))
        ranks.append(lo)
        ranks.append(min(lo + 1, n - 1))
    at = weighted_values_at_ranks(pairs, ranks)
    out: list[float] = []
    for i, p in enumerate(ps):
        pos = (n - 1) * p / 100.0
        a, b = at[2 * i], at[2 * i + 1]
        out.append(a + (b - a) * (pos - int(math.floor(pos))))
    return n, out, highest, math.fsum(products)


def order_statistic(values: Sequence[float], rank: int) -> float:
    """``sorted(values)[rank]``, selected without sorting a large sample when compiled."""
    if len(values) < _SELECT_FROM or not COMPILED:
        return sorted(values)[rank]
    return values_at_ranks(list(values), [rank])[0]


class _Bins:
    """Bins of magnitude over [lowest, highest]: value v goes to bin min(int((v - lowest) * scale),
    last). Subtraction, multiplication by a positive number and truncation never reverse an order,
    so every value in a bin is at most every value in a later one."""

    def __init__(self, lowest: float, highest: float, items: int) -> None:
        bins = max(1, min(1 << 16, items // 8))
        span = highest - lowest
        scale = bins / span if span > 0 and math.isfinite(span) else 0.0
        if not math.isfinite(scale):  # a subnormal span: one bin (then sorted)
            scale = 0.0
        self.lowest = lowest
        self.scale = scale
        self.last = bins - 1

    def of(self, v: float) -> int:
        b = int((v - self.lowest) * self.scale)
        return b if b < self.last else self.last

    def wanted(self, where: list[tuple[int, int]]) -> list[bool]:
        """Which bins hold a wanted rank (``where``: :func:`_locate`'s)."""
        flags = [False] * (self.last + 1)
        for b, _ in where:
            flags[b] = True
        return flags


#: a bin holding more values than this is split again (a concentrated sample puts most of its
#: values in a few bins of the range)
_SORT_UP_TO: Final = 4096


def values_at_ranks(values: list[float], ranks: Sequence[int]) -> list[float]:
    """``sorted(values)[k]`` for each rank ``k`` (0-based), in linear time: one pass counts the
    values per bin of magnitude, a second keeps the values of the bins holding a wanted rank, and
    only those are sorted (or, when many, selected from the same way)."""
    lowest, highest = _extremes(values)
    if not highest > lowest:  # all equal: sorting keeps them in place (0.0 and -0.0 included)
        return [values[k] for k in ranks]
    bins = _Bins(lowest, highest, len(values))
    per_bin = [0] * (bins.last + 1)
    for v in values:
        per_bin[bins.of(v)] += 1
    where = _locate(per_bin, ranks)
    wanted = bins.wanted(where)
    kept: dict[int, list[float]] = {b: [] for b, _ in where}
    for v in values:
        b = bins.of(v)
        if wanted[b]:
            kept[b].append(v)
    out: list[float] = []
    for b, k in where:
        lst = kept[b]
        if len(lst) > _SORT_UP_TO and len(lst) < len(values):
            out.append(values_at_ranks(lst, [k])[0])
        else:
            lst.sort()
            out.append(lst[k])
    return out


def weighted_values_at_ranks(pairs: list[tuple[float, int]], ranks: Sequence[int]) -> list[float]:
    """:func:`values_at_ranks` of (value, count) pairs, each value repeated ``count`` (>= 1) times."""
    lowest, highest = _extremes([v for v, _ in pairs])
    if not highest > lowest:  # all equal: the expanded order is the pairs' own
        return [_expanded_at(pairs, k) for k in ranks]
    bins = _Bins(lowest, highest, len(pairs))
    per_bin = [0] * (bins.last + 1)
    for v, c in pairs:
        per_bin[bins.of(v)] += c
    where = _locate(per_bin, ranks)
    wanted = bins.wanted(where)
    kept: dict[int, list[tuple[float, int]]] = {b: [] for b, _ in where}
    for pair in pairs:
        b = bins.of(pair[0])
        if wanted[b]:
            kept[b].append(pair)
    out: list[float] = []
    for b, k in where:
        lst = kept[b]
        if len(lst) > _SORT_UP_TO and len(lst) < len(pairs):
            out.append(weighted_values_at_ranks(lst, [k])[0])
            continue
        lst.sort(key=_first)
        out.append(_expanded_at(lst, k))
    return out


def _extremes(values: list[float]) -> tuple[float, float]:
    """(smallest, largest) in one pass."""
    lowest = highest = values[0]
    for v in values:
        if v < lowest:
            lowest = v
        elif v > highest:
            highest = v
    return lowest, highest


def _first(pair: tuple[float, int]) -> float:
    return pair[0]


def _expanded_at(pairs: list[tuple[float, int]], k: int) -> float:
    """The value at position ``k`` of the pairs expanded in their order."""
    seen = 0
    for v, c in pairs:
        seen += c
        if seen > k:
            return v
    raise IndexError(k)


def _locate(per_bin: list[int], ranks: Sequence[int]) -> list[tuple[int, int]]:
    """(bin, rank within the bin) of each rank, given the count per bin."""
    order = sorted(range(len(ranks)), key=lambda i: ranks[i])
    where: list[tuple[int, int]] = [(0, 0)] * len(ranks)
    b, before = 0, 0
    for i in order:
        k = ranks[i]
        while before + per_bin[b] <= k:
            before += per_bin[b]
            b += 1
        where[i] = (b, k - before)
    return where
