"""Service-level objectives and their judge: the ``--slo`` syntax shared by ``kvplan bench`` (gates
on a measured run), ``kvplan simulate`` / ``tune`` / ``preflight`` (gates on a predicted run) and the
ops thresholds, and the one place that decides whether a run meets them: :func:`judge` (one
:class:`Check` per SLO), :meth:`Slo.met`, and goodput (:func:`goodput_limits`, :func:`count_good`).
A neutral module so that no layer has to import another to read ``ttft_p99=2s``."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

from .errors import UsageError

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|min|h)?\s*$")


def parse_seconds(text: str, what: str) -> float:
    """'2s', '500ms', '1.5', '3m' -> seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise UsageError(f"{what}: cannot read {text!r} as a duration (e.g. 2s, 500ms, 3m)")
    scale = {"ms": 1e-3, "s": 1.0, None: 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}[m.group(2)]
    return float(m.group(1)) * scale


#: SLO keys: latency metrics with a percentile, or rates.
SLO_METRICS = ("ttft", "tpot", "itl", "e2e")
SLO_STATS = ("p50", "p90", "p95", "p99", "max", "mean")


@dataclass(frozen=True)
class Slo:
    """One gate: ``metric`` (e.g. ``ttft_p99``, ``error_rate``) must be ≤ ``limit`` (seconds for
    latencies, a fraction for ``error_rate``; ``goodput_ratio`` / ``min_*`` are lower bounds)."""

    key: str
    limit: float

    @property
    def lower_bound(self) -> bool:
        return self.key in LOWER_BOUNDS

    def met(self, value: Optional[float]) -> bool:
        """Whether ``value`` meets the gate (no value never does)."""
        return value is not None and (value >= self.limit if self.lower_bound else value <= self.limit)


#: the keys whose limit is a floor, not a ceiling
LOWER_BOUNDS = ("goodput_ratio",)

#: the per-request latencies goodput judges (vLLM's ``--goodput``: TTFT, TPOT, E2E)
GOODPUT_METRICS = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class Check:
    """One verdict on a run: ``name`` (an SLO key, or a rule of the run such as ``run_complete``)
    passed or not, with the value judged and its limit."""

    name: str
    passed: bool
    value: Any = None
    limit: Any = None
    note: str = ""

    @property
    def ratio(self) -> float:
        """How far from the limit: <= 1 passes (a floor, ``goodput_ratio``, inverted); no value is
        infinitely far."""
        if self.value is None:
            return math.inf
        if self.name in LOWER_BOUNDS:
            return self.limit / self.value if self.value > 0 else (0.0 if self.limit == 0 else math.inf)
        if self.limit <= 0:
            return 1.0 if self.value <= 0 else math.inf
        return self.value / self.limit

    def to_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "value": self.value, "limit": self.limit, "note": self.note}


def value_of(key: str, *, latency: Mapping[str, Mapping[str, Optional[float]]], error_rate: Optional[float],
             goodput_ratio: Optional[float]) -> Optional[float]:
    """The value of a run that an SLO key names: a latency statistic (``ttft_p99``: ``latency``'s
    ``ttft.p99``), the error rate or the goodput ratio."""
    if key == "error_rate":
        return error_rate
    if key == "goodput_ratio":
        return goodput_ratio
    metric, _, stat = key.partition("_")
    return (latency.get(metric) or {}).get(stat)


def judge(slos: Sequence[Slo], *, latency: Mapping[str, Mapping[str, Optional[float]]],
          error_rate: Optional[float], goodput_ratio: Optional[float]) -> tuple[Check, ...]:
    """One :class:`Check` per SLO for a run (measured or predicted): what every command that gates
    a run calls. A value the run does not have fails ("no data to judge")."""
    out = []
    for s in slos:
        value = value_of(s.key, latency=latency, error_rate=error_rate, goodput_ratio=goodput_ratio)
        out.append(Check(s.key, s.met(value), value, s.limit, "" if value is not None else "no data to judge"))
    return tuple(out)


def goodput_limits(slos: Sequence[Slo]) -> dict[str, float]:
    """Per-request limits: the tightest one given for each of TTFT, TPOT and E2E (the limit of
    ``ttft_p99`` applies to each request's TTFT, as vLLM's ``--goodput``)."""
    limits: dict[str, float] = {}
    for s in slos:
        metric = s.key.split("_")[0]
        if metric in GOODPUT_METRICS:
            limits[metric] = min(s.limit, limits.get(metric, math.inf))
    return limits


def count_good(limits: Mapping[str, float],
               requests: Iterable[tuple[Optional[float], Optional[float], Optional[float]]]) -> int:
    """Completed requests, as (TTFT, TPOT, E2E), whose own latencies all meet ``limits`` (a latency
    a request does not have, such as the TPOT of a one-token output, cannot fail it). Failed
    requests are never good: the caller passes completed ones only."""
    lt, lp, le = limits.get("ttft", math.inf), limits.get("tpot", math.inf), limits.get("e2e", math.inf)
    good = 0
    for ttft, tpot, e2e in requests:
        if (ttft is None or ttft <= lt) and (tpot is None or tpot <= lp) and (e2e is None or e2e <= le):
            good += 1
    return good


def parse_slo(text: Optional[str]) -> tuple[Slo, ...]:
    """``ttft_p99=2s,e2e_p99=10s,error_rate=0`` -> SLOs. Unknown keys are usage errors."""
    if not text:
        return ()
    out: list[Slo] = []
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep:
            raise UsageError(f"--slo: {part!r} is not KEY=VALUE (e.g. ttft_p99=2s)")
        if key in ("error_rate", "goodput_ratio"):
            try:
                v = float(value.strip().rstrip("%")) / (100.0 if value.strip().endswith("%") else 1.0)
            except ValueError:
                raise UsageError(f"--slo {key}: cannot read {value!r} as a fraction") from None
            if not 0.0 <= v <= 1.0:
                raise UsageError(f"--slo {key}: must be between 0 and 1 (or 0%..100%), got {value!r}")
            out.append(Slo(key, v))
            continue
        metric, _, stat = key.partition("_")
        if metric not in SLO_METRICS or stat not in SLO_STATS:
            raise UsageError(f"--slo: unknown key {key!r}; use {{{','.join(SLO_METRICS)}}}_{{{','.join(SLO_STATS)}}}, "
                             "error_rate or goodput_ratio")
        out.append(Slo(key, parse_seconds(value, f"--slo {key}")))
    return tuple(out)
