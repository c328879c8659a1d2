"""The sections a measured run (``kvplan bench``) and a predicted run (``kvplan simulate``) share,
typed once: :class:`LatencyStats` (one latency's percentiles), :class:`RequestCounts`,
:class:`TokenCounts` and :class:`Throughput`. ``BenchResult`` and ``SimResult`` compose them (each
adds the fields only it has, in a subclass), so a prediction and a measurement compare field by
field, and every reader of either names the same attributes.

Each section is a frozen dataclass that also reads as the JSON mapping it writes (``section["p99"]``,
``dict(section)``, in the result file's key order), so the file format is the sections' own.

Latencies follow ``vllm bench serve``: percentiles interpolate linearly between order statistics
(:func:`kvplan.quantiles.percentile`, as ``numpy.percentile``), rounded to the microsecond.
"""
from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Iterator, Optional, Sequence

from ..quantiles import COMPILED, percentiles, weighted_percentiles

#: the percentiles every latency reports, and the tail one a simulated run adds
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0))
TAIL = ("p999", 99.9)
#: from this many (value, count) pairs, select the percentiles' order statistics when compiled
_SELECT_FROM = 20_000


def _r(x: Optional[float], nd: int = 6) -> Optional[float]:
    return None if x is None else round(x, nd)


class Section(Mapping):
    """A typed section that reads as its JSON mapping: :attr:`KEYS` in the file's order (a
    subclass lists its own fields where the file has them)."""

    KEYS: ClassVar[tuple[str, ...]] = ()

    def keys_written(self) -> tuple[str, ...]:
        return self.KEYS or tuple(f.name for f in fields(self))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.keys_written()}

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys_written():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_written())

    def __len__(self) -> int:
        return len(self.keys_written())


@dataclass(frozen=True, eq=False)
class LatencyStats(Section):
    """One latency's distribution over a run's requests (seconds): p50 ... p99 (and p99.9 for a
    simulated run, ``tail``), max, mean, count. No observation: every statistic None, count 0."""

    p50: Optional[float]
    p90: Optional[float]
    p95: Optional[float]
    p99: Optional[float]
    max: Optional[float]
    mean: Optional[float]
    count: int
    p999: Optional[float] = None
    tail: bool = False  # whether the file has p999

    def keys_written(self) -> tuple[str, ...]:
        return ("p50", "p90", "p95", "p99") + (("p999",) if self.tail else ()) + ("max", "mean", "count")

    @classmethod
    def of(cls, samples: Sequence[float], *, tail: bool = False) -> "LatencyStats":
        """The statistics of plain samples (in any order: a million need not be sorted)."""
        samples = samples if isinstance(samples, list) else list(samples)
        wanted = PERCENTILES + ((TAIL,) if tail else ())
        return cls.of_percentiles(samples, percentiles(samples, [p for _, p in wanted]), tail=tail)

    @classmethod
    def of_percentiles(cls, samples: Sequence[float], raw: Sequence[Optional[float]], *,
                       tail: bool = False) -> "LatencyStats":
        """:meth:`of` given the samples' unrounded percentiles (``raw``: :data:`PERCENTILES`, then the
        tail's when ``tail``), for a caller that needs them itself; the mean is an exact sum, the
        same in any order."""
        wanted = PERCENTILES + ((TAIL,) if tail else ())
        pct = {k: _r(v) for (k, _), v in zip(wanted, raw)}
        return cls(**pct, max=_r(max(reversed(samples))) if samples else None,  # (sorted's last of equals)
                   mean=_r(math.fsum(samples) / len(samples)) if samples else None, count=len(samples), tail=tail)

    @classmethod
    def of_weighted(cls, pairs: Sequence[tuple[float, int]]) -> "LatencyStats":
        """The same statistics over (value, count) pairs, as if each value were repeated count times
        (numpy's linear interpolation on the expanded, sorted array); with the tail."""
        # by value only: the percentiles read values at cumulative counts, which do not depend on
        # the order of equal values, and the mean is an exact sum (sorting floats is faster than
        # comparing tuples: a step log has one pair per step)
        value, count = operator.itemgetter(0), operator.itemgetter(1)
        if COMPILED and len(pairs) >= _SELECT_FROM:
            # the same order statistics selected, not sorted (kvplan.quantiles, compiled); the mean
            # is an exact sum of the same products, the same in any order
            wanted = PERCENTILES + (TAIL,)
            n, points, highest, total = weighted_percentiles(list(pairs), [p for _, p in wanted])
            pct = {key: _r(v) for (key, _), v in zip(wanted, points)}
            return cls(**pct, max=_r(highest), mean=_r(total / n), count=n, tail=True)
        items = sorted(pairs, key=operator.itemgetter(0))  # counts are >= 1
        if not items:
            return cls(None, None, None, None, None, None, 0, None, tail=True)
        # (maps, not generators: a step log has one pair per step)
        cum = list(itertools.accumulate(map(count, items)))  # cum[j] = index after the last copy of items[j]
        n = cum[-1]

        def at(k: int) -> float:
            return items[bisect.bisect_right(cum, k)][0]

        pct = {}
        for key, p in PERCENTILES + (TAIL,):
            pos = (n - 1) * p / 100.0
            lo = int(math.floor(pos))
            hi = min(lo + 1, n - 1)
            a, b = at(lo), at(hi)
            pct[key] = _r(a + (b - a) * (pos - lo))
        mean = math.fsum(map(operator.mul, map(value, items), map(count, items))) / n
        return cls(**pct, max=_r(items[-1][0]), mean=_r(mean), count=n, tail=True)


@dataclass(frozen=True, eq=False)
class RequestCounts(Section):
    """How the run's requests ended: all of them, those that completed (``ok``), those that did not."""

    total: int
    ok: int
    failed: int
    error_rate: Optional[float]


@dataclass(frozen=True, eq=False)
class TokenCounts(Section):
    """The prompt and output tokens of the completed requests."""

    input_total: int
    output_total: int


@dataclass(frozen=True, eq=False)
class Throughput(Section):
    """Per second of the run's window (the first send to the last completion)."""

    window_s: Optional[float]
    requests_per_s: Optional[float]
    output_tokens_per_s: Optional[float]
    input_tokens_per_s: Optional[float]

    @staticmethod
    def rate(count: float, window: Optional[float]) -> Optional[float]:
        """``count`` per second of ``window``, rounded as the files write it (None without a window)."""
        return _r(count / window) if window else None
