"""Alerting thresholds shared by ``kvplan alerts`` (and, later, ``kvplan watch``).

One frozen contract so the Prometheus rules and the live view trip at the same numbers. The
defaults (GPU memory > 90 %, waiting > 10, any preemption, KV-cache usage > 90 %, 1 % of requests
failing, 5 % aborted) hold on any healthy server. Latency has no such default: a chat answer of
512 tokens takes 16-20 s end to end on a healthy 70B deployment (kvplan simulate), a short
classification 0.3 s, so E2E and TTFT thresholds come from the deployment (:func:`derive_latency`:
the SLO, else the simulated or measured P99 with :data:`LATENCY_MARGIN`), or are not written.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Optional

from ..bench.config import parse_seconds
from ..errors import UsageError

#: key -> (kind, help). ``fraction`` is 0–1 (a trailing % is accepted), ``seconds`` a duration,
#: ``count`` a plain number.
_KINDS = {
    "kv_cache_usage": ("fraction", "KV-cache usage (vllm:kv_cache_usage_perc) above this"),
    "gpu_memory": ("fraction", "GPU memory used / total above this: the plain rule (--gpu-memory-rule plain) and "
                               "kvplan watch; a healthy vLLM holds gpu_memory_utilization of it from start-up"),
    "gpu_budget_margin": ("fraction", "GPU memory used above vLLM's budget (gpu_memory_utilization x total) by more "
                                      "than this fraction of the total"),
    "gpu_headroom": ("fraction", "free GPU memory below this fraction of the total"),
    "e2e_p99": ("seconds", "end-to-end latency P99 above this (no default: from --slo / --simulated, or give it)"),
    "ttft_p99": ("seconds", "time to first token P99 above this (no default: from --slo / --simulated, or give it)"),
    "error_rate": ("fraction", "share of the /v1 requests answered with an HTTP 5xx above this"),
    "aborted": ("fraction", "share of finished requests aborted (clients giving up, timeouts) above this"),
    "waiting": ("count", "requests waiting above this"),
    "preemptions": ("count", "preemptions in the window above this (0: any preemption)"),
    "spec_acceptance": ("fraction", "with --speculative-decoding: draft acceptance rate (accepted / draft tokens) "
                                    "below this; a drafter accepted less often than this mostly costs time"),
}


@dataclass(frozen=True)
class Thresholds:
    kv_cache_usage: float = 0.90
    gpu_memory: float = 0.90
    #: 3 % of the total covers the CUDA context vLLM >= 0.11 does not charge to its budget
    #: (~0.5 GiB) and small allocator slack; 2.4 GiB on an 80 GB GPU
    gpu_budget_margin: float = 0.03
    gpu_headroom: float = 0.02
    #: None: no latency rule (no default fits every deployment; derive_latency gives them)
    e2e_p99: Optional[float] = None
    ttft_p99: Optional[float] = None
    error_rate: float = 0.01
    aborted: float = 0.05
    waiting: float = 10.0
    preemptions: float = 0.0
    #: EAGLE-style drafters accept 0.6-0.8 of their tokens on chat data (EAGLE-3 paper, Li et al. 2025);
    #: below 0.3 the verification work outweighs the tokens gained at k = 3 (kvplan.sim speculative model)
    spec_acceptance: float = 0.3
    #: how long a condition must hold before the rule fires, and the rate window (seconds).
    for_seconds: float = 300.0
    window_seconds: float = 300.0

    def to_dict(self) -> dict:
        return asdict(self)


#: a latency threshold derived from an observed P99 (simulated or measured on a healthy run) sits
#: this far above it: preflight's default load factor (target QPS x 1.5), so the alert fires at
#: the latency the server shows beyond the load it was checked at, not at its everyday tail
LATENCY_MARGIN = 1.5


def derive_latency(th: Thresholds, slo: Optional[dict] = None, observed: Optional[dict] = None,
                   observed_source: str = "the simulated run") -> tuple[Thresholds, tuple[str, ...]]:
    """E2E and TTFT P99 thresholds for the deployment: the SLO's limit, else ``observed`` P99 x
    :data:`LATENCY_MARGIN`; an explicit threshold already in ``th`` is kept. Returns the
    thresholds and one note per key saying where each came from (or why there is none)."""
    changes: dict = {}
    notes: list[str] = []
    for key in ("e2e_p99", "ttft_p99"):
        if getattr(th, key) is not None:
            notes.append(f"{key} {getattr(th, key):g} s: given")
        elif slo and slo.get(key) is not None:
            changes[key] = float(slo[key])
            notes.append(f"{key} {changes[key]:g} s: the SLO")
        elif observed and observed.get(key):
            changes[key] = round(float(observed[key]) * LATENCY_MARGIN, 3)
            notes.append(f"{key} {changes[key]:g} s: {observed_source}'s P99 {observed[key]:g} s x {LATENCY_MARGIN:g}")
        else:
            notes.append(f"{key}: no rule (a latency threshold depends on the deployment's lengths; give --slo, "
                         "--simulated or --thresholds)")
    return (replace(th, **changes) if changes else th), tuple(notes)


def describe() -> dict[str, str]:
    return {k: v[1] for k, v in _KINDS.items()}


def parse_thresholds(text: str | None, base: Thresholds | None = None) -> Thresholds:
    """``e2e_p99=3s,waiting=20,kv_cache_usage=95%,for=2m,window=1m`` -> :class:`Thresholds`.
    Unknown keys and unreadable or negative values are usage errors (exit 2), never ignored."""
    out = base or Thresholds()
    if not text:
        return out
    names = {f.name for f in fields(Thresholds)}
    changes: dict[str, float] = {}
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not raw:
            raise UsageError(f"--thresholds: expected KEY=VALUE, got {part!r}")
        if key in ("for", "window"):
            changes[f"{key}_seconds"] = _positive(parse_seconds(raw, f"--thresholds {key}"), key)
            continue
        if key not in _KINDS or key not in names:
            raise UsageError(f"--thresholds: unknown key {key!r} (known: {', '.join(list(_KINDS) + ['for', 'window'])})")
        kind = _KINDS[key][0]
        if kind == "seconds":
            value = parse_seconds(raw, f"--thresholds {key}")
        else:
            pct = raw.endswith("%")
            try:
                value = float(raw[:-1] if pct else raw)
            except ValueError:
                raise UsageError(f"--thresholds {key}: cannot read {raw!r} as a number") from None
            if pct:
                value /= 100.0
            if value != value or value in (float("inf"), float("-inf")):
                raise UsageError(f"--thresholds {key}: {raw!r} is not a finite number")
            if kind == "fraction" and not 0.0 <= value <= 1.0:
                raise UsageError(f"--thresholds {key}: {raw!r} is not a fraction in [0, 1] (e.g. 0.9 or 90%)")
        if value < 0:
            raise UsageError(f"--thresholds {key}: must not be negative, got {raw!r}")
        changes[key] = value
    return replace(out, **changes)


def _positive(value: float, key: str) -> float:
    if value <= 0:
        raise UsageError(f"--thresholds {key}: must be positive")
    return value
