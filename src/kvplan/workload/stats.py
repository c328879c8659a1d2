"""Exact distributions of token counts, kept in bounded memory.

Token counts are small integers, so a distribution is stored as ``value → count``: its size grows
with the number of *distinct* lengths (at most the context length), not with the number of
records. That is what lets ``kvplan lengths`` read logs of any size with flat memory and still
give exact percentiles, exact coverage counts and exact block-rounding waste.

Percentiles use the nearest-rank rule: P99 is the smallest value that at least 99% of the
records are less than or equal to. It is always an observed value, so "P99 = 1,234" means
99% of requests really had 1,234 tokens or fewer.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Iterable, Optional

PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9))


class Hist:
    """A mutable exact histogram of non-negative integers (the accumulation side)."""

    __slots__ = ("counts", "total", "sum")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0
        self.sum = 0

    def add(self, value: int, n: int = 1) -> None:
        self.counts[value] = self.counts.get(value, 0) + n
        self.total += n
        self.sum += value * n

    def freeze(self) -> "Dist":
        items = sorted(self.counts.items())
        values = tuple(v for v, _ in items)
        cum: list[int] = []
        running = 0
        for _, n in items:
            running += n
            cum.append(running)
        return Dist(values, tuple(cum), self.sum)


@dataclass(frozen=True)
class Dist:
    """An immutable exact distribution: sorted distinct values and cumulative counts."""

    values: tuple[int, ...]
    cum: tuple[int, ...]
    sum: int

    @property
    def count(self) -> int:
        return self.cum[-1] if self.cum else 0

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else 0.0

    @property
    def max(self) -> int:
        return self.values[-1] if self.values else 0

    @property
    def min(self) -> int:
        return self.values[0] if self.values else 0

    def quantile(self, pct: float) -> int:
        """Nearest-rank percentile (pct in 0..100): the smallest value covering pct% of records."""
        if not self.count:
            return 0
        rank = max(1, math.ceil(pct / 100.0 * self.count - 1e-9))
        return self.values[bisect.bisect_left(self.cum, rank)]

    def count_le(self, limit: int) -> int:
        """How many values are ≤ limit."""
        i = bisect.bisect_right(self.values, limit)
        return self.cum[i - 1] if i else 0

    def count_gt(self, limit: int) -> int:
        return self.count - self.count_le(limit)

    def items(self) -> Iterable[tuple[int, int]]:
        prev = 0
        for v, c in zip(self.values, self.cum):
            yield v, c - prev
            prev = c

    def mean_of(self, fn) -> float:
        """Mean of fn(value) over the distribution (fn is applied once per distinct value)."""
        if not self.count:
            return 0.0
        return sum(fn(v) * n for v, n in self.items()) / self.count

    def summary(self) -> "Percentiles":
        return Percentiles(count=self.count, mean=round(self.mean, 2), min=self.min,
                           **{name: self.quantile(p) for name, p in PERCENTILES}, max=self.max)

    def histogram(self, bins: int = 40, upper: Optional[int] = None) -> "Histogram":
        """Equal-width bins from 0 to ``upper`` (default: max); values above land in the last bin."""
        if not self.count:
            return Histogram((), ())
        top = max(upper if upper is not None else self.max, 1)
        width = max(1, math.ceil((top + 1) / bins))
        edges = tuple(i * width for i in range(bins + 1))
        counts = [0] * bins
        for v, n in self.items():
            counts[min(v // width, bins - 1)] += n
        return Histogram(edges, tuple(counts))


@dataclass(frozen=True)
class Percentiles:
    count: int
    mean: float
    min: int
    p50: int
    p90: int
    p95: int
    p99: int
    p999: int
    max: int


@dataclass(frozen=True)
class Histogram:
    """Bin i holds values in [edges[i], edges[i+1]); the last bin also holds everything above."""

    edges: tuple[int, ...]
    counts: tuple[int, ...]


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple if multiple > 0 else value


def empty_summary() -> Percentiles:
    return Percentiles(0, 0.0, 0, 0, 0, 0, 0, 0, 0)
