"""One view of a load run, measured (``kvplan bench``'s result JSON) or simulated
(``kvplan.sim.simulate``'s ``SimResult.to_dict()``): the two share their key names where the
quantity is the same (sim-contract), so this adapter only picks fields, it computes nothing
beyond maxima over a timeline."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


def _max(values) -> Optional[float]:
    vals = [v for v in values if isinstance(v, (int, float))]
    return max(vals) if vals else None


@dataclass(frozen=True)
class LoadRun:
    simulated: bool
    source: str  # "kvplan bench at 75 req/s for 300 s" / "kvplan.sim …"
    requested_rate: Optional[float]
    total: int
    failed: int
    error_rate: Optional[float]
    errors: dict  # class -> count
    error_examples: dict
    latency_s: dict  # metric -> {p50, p90, p99, max, mean, ...}
    completed_rate: Optional[float]  # requests per second completed
    preemptions: Optional[float]
    peak_kv_usage: Optional[float]  # 0-1
    peak_waiting: Optional[float]
    peak_running: Optional[float]
    client_bound: bool = False
    client_bound_reasons: tuple[str, ...] = ()
    partial: bool = False
    stop_reason: str = "completed"
    slo_checks: tuple[dict, ...] = ()  # bench's own SLO checks ({name, passed, value, limit})
    saturation: Any = None
    timeline: tuple[dict, ...] = ()  # {t, kv_usage, running, waiting}
    samples: dict = field(default_factory=dict)  # per-request latencies (bench), for CDFs
    server_notice: Optional[str] = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def mean_e2e(self) -> Optional[float]:
        return (self.latency_s.get("e2e") or {}).get("mean")

    @property
    def saturated(self) -> bool:
        """The run's backlog grows without bound (the simulator's verdict; a measured run has none)."""
        return bool((self.saturation or {}).get("saturated")) if isinstance(self.saturation, dict) else False

    @property
    def replicas(self) -> int:
        """The data-parallel replicas the run was spread over (a simulated fleet's; 1 otherwise)."""
        return int(((self.raw or {}).get("fleet") or {}).get("replicas") or 1)


def from_bench(d: dict, source: str) -> LoadRun:
    srv = d.get("server") or {}
    samples = srv.get("samples") or []
    timeline = tuple({"t": s.get("t"), "kv_usage": s.get("kv_cache_usage"), "running": s.get("requests_running"),
                      "waiting": s.get("requests_waiting")} for s in samples)
    deltas = srv.get("deltas") or {}
    pre = deltas.get("preemptions")
    if pre is None and srv.get("available"):
        pre = sum(s.get("preemptions") or 0 for s in samples) if samples else None
    req = d.get("requests") or {}
    thr = d.get("throughput") or {}
    return LoadRun(
        simulated=False, source=source, requested_rate=(d.get("rate") or {}).get("requested"),
        total=int(req.get("total") or 0), failed=int(req.get("failed") or 0), error_rate=req.get("error_rate"),
        errors=dict(d.get("errors") or {}), error_examples=dict(d.get("error_examples") or {}),
        latency_s=dict(d.get("latency_s") or {}), completed_rate=thr.get("requests_per_s"), preemptions=pre,
        peak_kv_usage=_max(t["kv_usage"] for t in timeline), peak_waiting=_max(t["waiting"] for t in timeline),
        peak_running=_max(t["running"] for t in timeline), client_bound=bool(d.get("client_bound")),
        client_bound_reasons=tuple(d.get("client_bound_reasons") or ()), partial=bool(d.get("partial")),
        stop_reason=str(d.get("stop_reason") or "completed"),
        slo_checks=tuple(c for c in (d.get("verdict") or {}).get("checks", [])
                         if c.get("name") not in ("run_complete", "not_client_bound", "some_requests_ok")),
        timeline=timeline, samples=dict(d.get("samples") or {}),
        server_notice=None if srv.get("available") else (srv.get("notice") or "no server metrics"), raw=d)


def from_sim(d: dict, source: str, requested_rate: Optional[float]) -> LoadRun:
    req = d.get("requests") or {}
    total = int(req.get("total") or 0)
    failed = int(req.get("failed") or 0)  # the simulator's failed includes its rejected requests
    tl = tuple({"t": r.get("t"), "kv_usage": r.get("kv_usage"), "running": r.get("running"),
                "waiting": r.get("waiting")} for r in (d.get("timeline") or []))
    thr = d.get("throughput") or {}
    errors = {f"rejected: {k}": int(n) for k, n in (d.get("rejected_reasons") or {}).items() if n}
    other = failed - sum(errors.values())
    if other > 0:
        errors["failed"] = other
    return LoadRun(
        simulated=True, source=source, requested_rate=requested_rate, total=total, failed=failed,
        error_rate=req.get("error_rate", round(failed / total, 6) if total else None), errors=errors,
        error_examples={},
        latency_s=dict(d.get("latency_s") or {}), completed_rate=thr.get("requests_per_s"),
        preemptions=d.get("preemptions"), peak_kv_usage=_max(t["kv_usage"] for t in tl),
        peak_waiting=_max(t["waiting"] for t in tl), peak_running=_max(t["running"] for t in tl),
        saturation=d.get("saturation"), timeline=tl, samples=dict(d.get("samples") or {}), raw=d)


def slo_value(run: LoadRun, key: str) -> Optional[float]:
    """The value an SLO key names, read from the run (same keys as ``kvplan bench --slo``)."""
    from ..slo import value_of

    return value_of(key, latency=run.latency_s, error_rate=run.error_rate,
                    goodput_ratio=(run.raw.get("goodput") or {}).get("ratio"))


_TOO_LONG_WORDS = ("too_long", "too long", "context length", "max_model_len", "maximum model length",
                   "maximum context")


def too_long_errors(run: LoadRun) -> int:
    """Requests refused for their length (vLLM's HTTP 400 naming the context length, or the
    simulator's prompt_too_long): the lengths check already budgets for these."""
    n = 0
    for cls, count in run.errors.items():
        example = str(run.error_examples.get(cls, "")).lower()
        if "too_long" in cls or (cls == "http_400" and any(w in example for w in _TOO_LONG_WORDS)):
            n += count
    return n
