"""Service-level objectives and durations: the ``--slo`` syntax shared by ``kvplan bench`` (gates on
a measured run), ``kvplan simulate`` / ``tune`` (gates on a predicted run) and the ops thresholds.
A neutral module so that no layer has to import another to read ``ttft_p99=2s``."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

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
        return self.key == "goodput_ratio"


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
