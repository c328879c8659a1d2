"""kvplan's one Prometheus parser: ``/metrics`` text -> :class:`MetricsSnapshot`, deltas between two
snapshots, and quantiles from histogram buckets.

Parsing goes through ``prometheus_client``'s text parser (the reference implementation of the
format). A scrape is never trusted to be clean: when the parser rejects the text (a truncated
body, a stray line) the text is re-parsed one sample line at a time, bad lines are counted in
``MetricsSnapshot.bad_lines`` and everything readable is kept.

vLLM renamed several metrics across versions; :data:`ALIASES` maps one stable key to every name
it has had (newest first), so callers ask ``snap.get("kv_cache_usage")`` and learn which name the
server used (:func:`resolve`) or that none was present.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping, Optional

from ..memory import vllm_metrics as VM

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]

#: stable key -> every exposed name it has had, newest first: vLLM's names and renames are one table,
#: kvplan.memory.vllm_metrics (alerts and watch use it too)
ALIASES: Mapping[str, tuple[str, ...]] = VM.ALIASES
GAUGE_KEYS = VM.keys_of(VM.GAUGE)
COUNTER_KEYS = VM.keys_of(VM.COUNTER)
HISTOGRAM_KEYS = VM.keys_of(VM.HISTOGRAM)
_SUFFIXES = ("_bucket", "_count", "_sum")


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets ``((le, count), ...)`` sorted by ``le`` (the last is +Inf), plus sum/count."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def quantile(self, q: float) -> Optional[float]:
        return histogram_quantile(q, self.buckets)

    def mean(self) -> Optional[float]:
        return self.sum / self.count if self.count > 0 else None

    def bucket_bounds(self, value: float) -> tuple[float, float]:
        """The (lower, upper] bucket that holds ``value``."""
        lower = 0.0
        for le, _ in self.buckets:
            if value <= le:
                return lower, le
            lower = le
        return lower, math.inf


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape. ``series`` maps (sample name, sorted labels) to value; ``types`` maps family
    names to their declared type; ``t`` is the monotonic time of the scrape, when known."""

    series: Mapping[SeriesKey, float]
    types: Mapping[str, str] = field(default_factory=dict)
    t: Optional[float] = None
    bad_lines: int = 0

    def names(self) -> set[str]:
        return {name for name, _ in self.series}

    def value(self, name: str, **labels: str) -> Optional[float]:
        """Sum of every series called ``name`` whose labels include ``labels``; None if none."""
        found = [v for (n, lab), v in self.series.items() if n == name and _match(lab, labels)]
        return math.fsum(found) if found else None

    def histogram(self, name: str, **labels: str) -> Optional[Histogram]:
        """The histogram ``name`` (family name, without _bucket), summed over matching series."""
        by_le: dict[float, float] = {}
        total = count = 0.0
        seen = False
        for (n, lab), v in self.series.items():
            if not _match(lab, labels):
                continue
            if n == name + "_bucket":
                le = _le(lab)
                if le is not None:
                    by_le[le] = by_le.get(le, 0.0) + v
                    seen = True
            elif n == name + "_sum":
                total += v
            elif n == name + "_count":
                count += v
                seen = True
        if not seen:
            return None
        return Histogram(tuple(sorted(by_le.items())), total, count)

    def resolve(self, key: str) -> Optional[str]:
        """The exposed name this server uses for a stable key of :data:`ALIASES` (None: absent)."""
        names = self.names()
        for name in ALIASES[key]:
            if name in names or name + "_count" in names or name + "_bucket" in names:
                return name
        return None

    def get(self, key: str) -> Optional[float]:
        name = self.resolve(key)
        return None if name is None else self.value(name)

    def get_histogram(self, key: str) -> Optional[Histogram]:
        name = self.resolve(key)
        return None if name is None else self.histogram(name)

    def absent(self, keys: Iterable[str] = tuple(ALIASES)) -> list[str]:
        return [k for k in keys if self.resolve(k) is None]


def _match(lab: Labels, want: Mapping[str, str]) -> bool:
    if not want:
        return True
    d = dict(lab)
    return all(d.get(k) == str(v) for k, v in want.items())


def _le(lab: Labels) -> Optional[float]:
    for k, v in lab:
        if k == "le":
            try:
                return float(v)
            except ValueError:
                return None
    return None


# --------------------------------------------------------------------------- parsing
def parse_metrics(text: str, t: Optional[float] = None, prefixes: Optional[tuple[str, ...]] = None) -> MetricsSnapshot:
    """Parse Prometheus text exposition. ``prefixes`` keeps only samples whose names start with
    one of them (a cheap line filter before the parser, so a frequent scrape stays cheap)."""
    from prometheus_client.parser import text_string_to_metric_families

    if prefixes:
        text = "\n".join(ln for ln in text.splitlines() if _keep(ln, prefixes)) + "\n"
    series: dict[SeriesKey, float] = {}
    types: dict[str, str] = {}
    bad = 0
    try:
        _collect(text_string_to_metric_families(text), series, types)
    except Exception:  # noqa: BLE001 - the parser raises ValueError, IndexError, …; fall back line by line
        series.clear()
        types.clear()
        header: list[str] = []
        for line in text.splitlines():
            s = line.strip()
            if not s:
                continue
            if s.startswith("#"):
                parts = s.split()
                if len(parts) >= 4 and parts[1] == "TYPE":
                    header = [s]
                continue
            try:
                _collect(text_string_to_metric_families("\n".join(header + [s]) + "\n"), series, types)
            except Exception:  # noqa: BLE001
                bad += 1
    return MetricsSnapshot(MappingProxyType(series), MappingProxyType(types), t, bad)


def _keep(line: str, prefixes: tuple[str, ...]) -> bool:
    if line.startswith("# "):
        parts = line.split(None, 3)
        return len(parts) >= 3 and parts[2].startswith(prefixes)
    return line.startswith(prefixes)


def _collect(families, series: dict[SeriesKey, float], types: dict[str, str]) -> None:
    for fam in families:
        if fam.type != "unknown" or fam.name not in types:
            types.setdefault(fam.name, fam.type)
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue  # creation timestamps, not values
            value = float(s.value)
            if math.isnan(value):
                continue
            series[(s.name, tuple(sorted(s.labels.items())))] = value


# --------------------------------------------------------------------------- deltas & quantiles
def counter_delta(before: Optional[float], after: Optional[float]) -> Optional[float]:
    """Increase of a counter; a decrease means the server restarted (counter reset), so the
    increase since the reset is ``after`` itself (Prometheus' ``increase`` rule)."""
    if after is None:
        return None
    if before is None:
        return after
    return after - before if after >= before else after


def delta(a: MetricsSnapshot, b: MetricsSnapshot) -> dict[str, float]:
    """Per-series increase from ``a`` to ``b`` for every counter and histogram series (summed over
    labels other than ``le``), keyed by sample name (``…_total``, ``…_bucket{le}`` as ``name|le``,
    ``…_sum``, ``…_count``). Gauges are not deltas and are left out."""
    out: dict[str, float] = {}
    for name in sorted(b.names()):
        kind = _kind(name, b.types)
        if kind not in ("counter", "histogram"):
            continue
        if name.endswith("_bucket"):
            ha = a.histogram(name[: -len("_bucket")]) if a is not None else None
            hb = b.histogram(name[: -len("_bucket")])
            before = dict(ha.buckets) if ha else {}
            for le, v in hb.buckets if hb else ():
                d = counter_delta(before.get(le), v)
                out[f"{name}|{_fmt_le(le)}"] = d if d is not None else 0.0
            continue
        d = counter_delta(a.value(name) if a is not None else None, b.value(name))
        if d is not None:
            out[name] = d
    return out


def histogram_delta(a: Optional[Histogram], b: Optional[Histogram]) -> Optional[Histogram]:
    """The observations made between two scrapes of one histogram (reset-aware)."""
    if b is None:
        return None
    if a is None or b.count < a.count:
        return b
    before = dict(a.buckets)
    buckets = tuple((le, max(0.0, v - before.get(le, 0.0))) for le, v in b.buckets)
    return Histogram(buckets, b.sum - a.sum, b.count - a.count)


def histogram_quantile(q: float, buckets: tuple[tuple[float, float], ...]) -> Optional[float]:
    """Prometheus' ``histogram_quantile``: linear interpolation inside the bucket holding rank
    ``q·count``; the +Inf bucket answers with the highest finite bound. None without observations."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank and count > prev_count:
            if math.isinf(le):
                return prev_le
            # Clamped: float rounding must not push the answer past the bucket's own bound.
            return min(le, prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count))
        prev_le, prev_count = le, count
    finite = [le for le, _ in buckets if not math.isinf(le)]
    return finite[-1] if finite else None


def _kind(name: str, types: Mapping[str, str]) -> str:
    if name in types:
        return types[name]
    for suffix in ("_total",) + _SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            return types[name[: -len(suffix)]]
    return "unknown"


def _fmt_le(le: float) -> str:
    return "+Inf" if math.isinf(le) else repr(le)
