"""Alerting thresholds shared by ``kvplan alerts`` (and, later, ``kvplan watch``).

One frozen contract so the Prometheus rules and the live view trip at the same numbers. The
defaults are GPU memory > 90 %, E2E P99 > 2 s, waiting > 10 and any preemption, plus KV-cache
usage and TTFT P99, which a vLLM operator watches first.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

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
    "e2e_p99": ("seconds", "end-to-end latency P99 above this"),
    "ttft_p99": ("seconds", "time to first token P99 above this"),
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
    e2e_p99: float = 2.0
    ttft_p99: float = 1.0
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
