"""``BenchResult``: the one contract between a run and everything that reads it (terminal summary,
HTML report, JSON file, ``bench compare``). :func:`build_result` computes it from the raw
per-request records; renderers never recompute metrics.

The JSON schema is documented in docs/bench.md (``schema_version`` 1; fields are only added).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from ..runs.sections import LatencyStats, RequestCounts, Throughput, TokenCounts
from ..slo import Check, count_good, goodput_limits, judge
from . import stats
from .client import Record
from .config import BenchConfig

SCHEMA_VERSION = 1
SAMPLE_CAP = 20_000  # per-request latency samples kept in the JSON for `bench compare`
LATENCY_KEYS = ("ttft", "tpot", "itl", "e2e")


@dataclass(frozen=True, eq=False)
class BenchRequests(RequestCounts):
    warmup_excluded: int  # warm-up requests sent before the measured ones
    #: measured requests sent a second time because the server had closed the pooled connection the
    #: first went out on (client.execute): not failures, but a count that should stay near 0
    resent: int = 0


@dataclass(frozen=True, eq=False)
class BenchTokens(TokenCounts):
    usage_missing: int  # completed requests whose server reported no usage
    output_chunks_total: int


@dataclass(frozen=True)
class BenchResult:
    """One run. Every section is plain JSON-ready data; ``to_dict()`` is the file format."""

    meta: Mapping[str, Any]
    config: Mapping[str, Any]
    requests: BenchRequests
    errors: Mapping[str, int]
    error_examples: Mapping[str, str]
    finish_reasons: Mapping[str, int]
    tokens: BenchTokens
    rate: Mapping[str, Any]
    schedule_lag_s: Mapping[str, Any]
    client_bound: bool
    client_bound_reasons: tuple[str, ...]
    client: Mapping[str, Any]
    latency_s: Mapping[str, LatencyStats]
    throughput: Throughput
    goodput: Mapping[str, Any]
    timeline: tuple[Mapping[str, Any], ...]
    server: Mapping[str, Any]
    gpu: Mapping[str, Any]
    samples: Mapping[str, Sequence[float]]
    partial: bool
    stop_reason: str
    checks: tuple[Check, ...] = ()
    records_file: Optional[str] = None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION, "kind": "kvplan.bench", **dict(self.meta),
            "config": dict(self.config), "partial": self.partial, "stop_reason": self.stop_reason,
            "verdict": {"passed": self.passed, "checks": [c.to_dict() for c in self.checks]},
            "requests": dict(self.requests), "errors": dict(self.errors), "error_examples": dict(self.error_examples),
            "finish_reasons": dict(self.finish_reasons), "tokens": dict(self.tokens), "rate": dict(self.rate),
            "schedule_lag_s": dict(self.schedule_lag_s), "client_bound": self.client_bound,
            "client_bound_reasons": list(self.client_bound_reasons), "client": dict(self.client),
            "latency_s": {k: dict(v) for k, v in self.latency_s.items()}, "throughput": dict(self.throughput),
            "goodput": dict(self.goodput), "timeline": [dict(t) for t in self.timeline], "server": dict(self.server),
            "gpu": dict(self.gpu), "samples": {k: list(v) for k, v in self.samples.items()},
            "records_file": self.records_file,
        }


def _rate(n: int, a: Optional[float], b: Optional[float]) -> Optional[float]:
    if n < 2 or a is None or b is None or b <= a:
        return None
    return round((n - 1) / (b - a), 6)


def _timeline(recs: Sequence[Record], end: float) -> tuple[dict, ...]:
    """Per-second client view: requests sent / completed / failed, output tokens, median TTFT and
    E2E of the requests that ended in that second, requests in flight at the second's end."""
    nbins = max(1, int(math.ceil(end)))
    if nbins > 36_000:
        nbins = 36_000  # 10 hours of 1 s bins is plenty for a chart
    rows = [{"t": float(i), "sent": 0, "completed": 0, "failed": 0, "output_tokens": 0, "_ttft": [], "_e2e": []}
            for i in range(nbins)]
    events: list[tuple[float, int]] = []
    for r in recs:
        if r.sent is not None:
            rows[min(nbins - 1, max(0, int(r.sent)))]["sent"] += 1
            events.append((r.sent, 1))
        if r.end is not None:
            row = rows[min(nbins - 1, max(0, int(r.end)))]
            events.append((r.end, -1))
            if r.ok:
                row["completed"] += 1
                row["output_tokens"] += r.output_tokens or 0
                if r.ttft is not None:
                    row["_ttft"].append(r.ttft)
                if r.e2e is not None:
                    row["_e2e"].append(r.e2e)
            else:
                row["failed"] += 1
    events.sort()
    inflight, j = 0, 0
    for i, row in enumerate(rows):
        while j < len(events) and events[j][0] < i + 1:
            inflight += events[j][1]
            j += 1
        row["inflight"] = inflight
        row["ttft_p50"] = stats.percentile(sorted(row.pop("_ttft")), 50)
        row["e2e_p50"] = stats.percentile(sorted(row.pop("_e2e")), 50)
    return tuple(rows)


def _goodput(ok: Sequence[Record], total: int, window: Optional[float], slos: Sequence) -> dict:
    """Requests meeting every per-request latency limit of the SLO (the limit of ``ttft_p99`` is
    applied to each request's TTFT, as vLLM's ``--goodput``); failures never count as good."""
    limits = goodput_limits(slos)
    good = count_good(limits, ((r.ttft, r.tpot, r.e2e) for r in ok))
    return {"limits_s": limits, "requests": good, "ratio": round(good / total, 6) if total else None,
            "requests_per_s": round(good / window, 6) if window else None}


def build_result(cfg: BenchConfig, records: Sequence[Record], *, meta: Mapping[str, Any], server: Mapping[str, Any],
                 gpu: Mapping[str, Any], stop_reason: str, cpu_s: float, wall_s: float,
                 loop_lag: Sequence[float] = ()) -> BenchResult:
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    errors: dict[str, int] = {}
    examples: dict[str, str] = {}
    for r in failed:
        errors[r.error] = errors.get(r.error, 0) + 1
        examples.setdefault(r.error, r.detail or "")
    finish: dict[str, int] = {}
    for r in measured:
        if r.finish_reason:
            finish[r.finish_reason] = finish.get(r.finish_reason, 0) + 1

    sent = sorted(r.sent for r in measured if r.sent is not None)
    sched = sorted(r.scheduled for r in measured if r.sent is not None)
    ends = [r.end for r in measured if r.end is not None]
    window = (max(ends) - sent[0]) if sent and ends and max(ends) > sent[0] else None
    lags = [r.lag for r in measured if r.lag is not None]
    lag = stats.summarize(lags)
    achieved = _rate(len(sent), sent[0] if sent else None, sent[-1] if sent else None)
    scheduled = _rate(len(sched), sched[0] if sched else None, sched[-1] if sched else None)
    requested = cfg.rate if cfg.mode == "open" else (scheduled if cfg.mode == "replay" else None)
    ratio = round(achieved / scheduled, 6) if achieved and scheduled else None

    reasons: list[str] = []
    if cfg.mode in ("open", "replay") and len(lags) >= 2:
        if lag["p50"] is not None and lag["p50"] > cfg.lag_p50_limit_s:
            reasons.append(f"median schedule lag {lag['p50'] * 1e3:.1f} ms > {cfg.lag_p50_limit_s * 1e3:g} ms")
        if lag["p99"] is not None and lag["p99"] > cfg.lag_p99_limit_s:
            reasons.append(f"p99 schedule lag {lag['p99'] * 1e3:.1f} ms > {cfg.lag_p99_limit_s * 1e3:g} ms")
        if ratio is not None and len(sent) >= 10 and ratio < cfg.min_rate_ratio:
            reasons.append(f"achieved rate {achieved:.2f}/s is {ratio:.1%} of the scheduled {scheduled:.2f}/s")
    elif cfg.mode == "closed" and lag["p99"] is not None and lag["p99"] > cfg.lag_p99_limit_s:
        reasons.append(f"p99 send delay {lag['p99'] * 1e3:.1f} ms > {cfg.lag_p99_limit_s * 1e3:g} ms")
    # Late sends have two causes: the client's own CPU is saturated (client-bound: its numbers
    # describe the client), or the host's CPU went to other processes (host contention, e.g. the
    # vLLM server on the same 2 cores: the client was idle, the requests still went out late).
    # The client's CPU time per process tells them apart; the event-loop lag shows the lateness.
    cpu_util = round(cpu_s / wall_s, 4) if wall_s > 0 else None
    cpu_share = cpu_util / max(1, cfg.workers) if cpu_util is not None else None
    loop = stats.summarize(loop_lag)
    contention: list[str] = []
    if reasons and cpu_share is not None and cpu_share < cfg.client_cpu_limit:
        loop_txt = f", event-loop lag p99 {loop['p99'] * 1e3:.1f} ms" if loop["p99"] is not None else ""
        contention = [f"host contention, not the load generator: {'; '.join(reasons)} with the client at "
                      f"{cpu_share:.0%} of a core (limit {cfg.client_cpu_limit:.0%}){loop_txt}: other processes "
                      "took the CPU; latencies are measured from each actual send"]
        reasons = []
    elif reasons and cpu_share is not None:
        reasons.append(f"client CPU {cpu_share:.0%} of a core >= {cfg.client_cpu_limit:.0%}")

    itl_all = [g for r in ok for g in r.itls()]
    lat = {"ttft": LatencyStats.of([r.ttft for r in ok if r.ttft is not None]),
           "tpot": LatencyStats.of([r.tpot for r in ok if r.tpot is not None]),
           "itl": LatencyStats.of(itl_all),
           "e2e": LatencyStats.of([r.e2e for r in ok if r.e2e is not None])}
    in_tok = sum(r.prompt_tokens or 0 for r in ok)
    out_tok = sum(r.output_tokens or 0 for r in ok)
    total = len(measured)
    goodput = _goodput(ok, total, window, cfg.slo)
    end = max([r.end for r in records if r.end is not None] + [0.0])
    timeline = _timeline(records, end)
    samples = {k: [round(v, 6) for v in stats.subsample(vals, SAMPLE_CAP, seed=i)] for i, (k, vals) in enumerate((
        ("ttft", [r.ttft for r in ok if r.ttft is not None]),
        ("tpot", [r.tpot for r in ok if r.tpot is not None]),
        ("e2e", [r.e2e for r in ok if r.e2e is not None]),
        ("itl", itl_all)))}
    partial = stop_reason != "completed"
    checks = [
        Check("run_complete", not partial, stop_reason, "completed",
              "" if not partial else "the run stopped early; results are partial"),
        Check("not_client_bound", not reasons, "; ".join(reasons) or "ok", None,
              "the load generator fell behind its schedule: the numbers describe the client" if reasons else ""),
        Check("some_requests_ok", bool(ok), len(ok), ">0"),
    ]
    error_rate = round(len(failed) / total, 6) if total else None
    if stop_reason == "all_requests_404":
        checks[0] = Check("run_complete", False, stop_reason, "completed",
                          f"the first requests all got HTTP 404 and none succeeded: the server does not serve "
                          f"model {meta.get('model') or cfg.model!r} at {cfg.path} (check --model / --endpoint)")
    if not any(s.key == "error_rate" for s in cfg.slo) and error_rate is not None:
        # Failed requests fail a run by default; --slo error_rate=X sets another limit.
        checks.append(Check("error_rate", error_rate <= cfg.default_error_rate, error_rate, cfg.default_error_rate,
                            "default limit (give --slo error_rate=X to allow some)" if error_rate > cfg.default_error_rate
                            else ""))
    checks += judge(cfg.slo, latency=lat, error_rate=error_rate, goodput_ratio=goodput["ratio"])
    return BenchResult(
        meta=meta, config=cfg.public(),
        requests=BenchRequests(total=total, ok=len(ok), failed=len(failed), error_rate=error_rate,
                               warmup_excluded=len(records) - total,
                               resent=sum(1 for r in records if r.resent and not r.warmup)),
        errors=errors, error_examples=examples, finish_reasons=finish,
        tokens=BenchTokens(input_total=in_tok, output_total=out_tok, usage_missing=sum(1 for r in ok if r.usage_missing),
                           output_chunks_total=sum(r.chunks for r in ok)),
        rate={"requested": requested, "scheduled": scheduled, "achieved": achieved, "achieved_ratio": ratio,
              "mode": cfg.mode},
        schedule_lag_s=lag, client_bound=bool(reasons), client_bound_reasons=tuple(reasons),
        client={"workers": cfg.workers, "cpu_s": round(cpu_s, 3), "wall_s": round(wall_s, 3),
                "cpu_utilization": cpu_util, "cpu_share_per_process": None if cpu_share is None else round(cpu_share, 4),
                "cpu_limit": cfg.client_cpu_limit, "loop_lag_s": loop, "host_contention": bool(contention),
                "host_contention_reasons": contention},
        latency_s=lat,
        throughput=Throughput(window_s=round(window, 6) if window else None,
                              requests_per_s=Throughput.rate(len(ok), window),
                              output_tokens_per_s=Throughput.rate(out_tok, window),
                              input_tokens_per_s=Throughput.rate(in_tok, window)),
        goodput=goodput, timeline=timeline, server=server, gpu=gpu, samples=samples, partial=partial,
        stop_reason=stop_reason, checks=tuple(checks))
