"""``SimResult``: one simulated run, with the keys of ``kvplan bench``'s result where the quantity is
the same (``requests.*``, ``tokens.*``, ``latency_s.{ttft,tpot,itl,e2e}.*``, ``throughput.*``), so a
prediction and a measurement compare field by field (docs/sim.md has the schema).

Latencies follow ``vllm bench serve`` / ``kvplan bench``: TTFT = first token - arrival, E2E = last
token - arrival, TPOT = (E2E - TTFT) / (output tokens - 1), ITL = every gap between consecutive
tokens of a request, queue = first scheduled - arrival. Percentiles interpolate linearly
(:func:`kvplan.quantiles.percentile`). The sections bench has too are its types
(:mod:`kvplan.runs.sections`), with the engine's fields added. ITL samples are kept as (gap, count) pairs - one pair per
step for the requests that decoded back to back - so a million-request run stays small.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from ..runs.sections import LatencyStats, RequestCounts, Throughput, TokenCounts

SCHEMA_VERSION = 1
LATENCY_KEYS = ("ttft", "tpot", "itl", "e2e", "queue")


def summarize(xs: Sequence[float]) -> LatencyStats:
    """{p50, p90, p95, p99, p999, max, mean, count} of plain samples."""
    return LatencyStats.of(xs, tail=True)


def summarize_weighted(pairs: Sequence[tuple[float, int]]) -> LatencyStats:
    """The same summary over (value, count) pairs, as if each value were repeated count times."""
    return LatencyStats.of_weighted(pairs)


@dataclass(frozen=True, eq=False)
class SimRequests(RequestCounts):
    """bench's request counts, and what only the engine knows: why the others did not complete."""

    completed: int
    rejected: int  # refused by the engine (too long for max_model_len or the KV cache)
    unfinished: int  # still running when the trace ended
    preempted_requests: int
    goodput: Optional[int]  # requests within every per-request SLO limit (None without a latency SLO)
    goodput_ratio: Optional[float]

    KEYS = ("total", "ok", "completed", "failed", "rejected", "unfinished", "error_rate", "preempted_requests",
            "goodput", "goodput_ratio")


@dataclass(frozen=True, eq=False)
class SimTokens(TokenCounts):
    """bench's token counts (``prompt`` and ``output`` name them again, as vLLM bench does), and
    the engine's: prompt tokens computed, found in the prefix cache, and recomputed after preemption."""

    prompt: int
    output: int
    prompt_computed: int
    prefix_cache_hit_tokens: int
    recomputed: int


@dataclass(frozen=True, eq=False)
class SimThroughput(Throughput):
    total_tokens_per_s: Optional[float]
    goodput_requests_per_s: Optional[float]


@dataclass(frozen=True)
class SimResult:
    """One simulated run. Sections are JSON-ready; :meth:`to_dict` is the file format."""

    meta: Mapping[str, Any]
    config: Mapping[str, Any]
    requests: SimRequests
    tokens: SimTokens
    latency_s: Mapping[str, LatencyStats]
    throughput: SimThroughput
    preemptions: int
    rejected: int
    rejected_reasons: Mapping[str, int]
    kv_cache: Mapping[str, Any]
    engine: Mapping[str, Any]
    timeline: tuple[Mapping[str, Any], ...]
    first_token_order: tuple[int, ...]
    saturation: Mapping[str, Any]
    profile: Mapping[str, Any]
    trace: Mapping[str, Any]
    checks: tuple[Mapping[str, Any], ...] = ()
    per_request: Optional[tuple[Mapping[str, Any], ...]] = None
    samples: Mapping[str, Sequence[float]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    bench: Mapping[str, Any] = field(default_factory=dict)  # vllm bench serve's figures (its result JSON keys)
    fleet: Mapping[str, Any] = field(default_factory=dict)  # data parallel: the replicas and their balancer

    @property
    def passed(self) -> bool:
        return all(c["passed"] for c in self.checks)

    @property
    def state(self) -> str:
        """The verdict in one word, for every renderer: ``no_slo``; ``met``; ``not_judged`` (every
        SLO passes on this trace, but its backlog could not be judged: too short); ``missed``."""
        if not self.checks:
            return "no_slo"
        failed = {c["name"] for c in self.checks if not c["passed"]}
        if not failed:
            return "met"
        return "not_judged" if failed == {"saturation_judged"} else "missed"

    def metric(self, key: str) -> Optional[float]:
        """``ttft_p99`` -> the value; ``error_rate`` / ``goodput_ratio`` too (SLO keys)."""
        if key == "error_rate":
            return self.requests.get("error_rate")
        if key == "goodput_ratio":
            return self.requests.get("goodput_ratio")
        metric, _, stat = key.partition("_")
        return (self.latency_s.get(metric) or {}).get(stat)

    def to_dict(self) -> dict:
        d = {"schema_version": SCHEMA_VERSION, "kind": "kvplan.simulate", **dict(self.meta),
             "config": dict(self.config), "trace": dict(self.trace),
             "verdict": {"passed": self.passed, "state": self.state, "checks": [dict(c) for c in self.checks]},
             "requests": dict(self.requests), "tokens": dict(self.tokens),
             "latency_s": {k: dict(v) for k, v in self.latency_s.items()},
             "throughput": dict(self.throughput), "preemptions": self.preemptions, "rejected": self.rejected,
             "rejected_reasons": dict(self.rejected_reasons), "kv_cache": dict(self.kv_cache),
             "engine": dict(self.engine), "saturation": dict(self.saturation),
             "timeline": [dict(t) for t in self.timeline], "first_token_order": list(self.first_token_order),
             "profile": dict(self.profile), "samples": {k: list(v) for k, v in self.samples.items()},
             "notes": list(self.notes), "bench": dict(self.bench)}
        if self.fleet:
            d["fleet"] = dict(self.fleet)
        if self.per_request is not None:
            d["per_request"] = [dict(r) for r in self.per_request]
        return d
