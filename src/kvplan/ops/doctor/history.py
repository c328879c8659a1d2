"""``kvplan doctor --prometheus URL --since 6h``: diagnose a vLLM deployment from Prometheus' history.

The input source is Prometheus' HTTP API (kvplan.ops.prom); the findings are the history ones of
:data:`kvplan.ops.doctor.model.FINDING_IDS` (KV near full with waiting requests, preemption bursts,
latency tails, GPU memory outside vLLM's budget growing, restarts), each with the time ranges
where it held as evidence. Counter totals come from the raw counter values ``query_range`` returns
(the newest sample at or before each step), summed step to step with resets handled as
Prometheus' ``increase`` does -- without its extrapolation, so they equal the difference of two
direct ``/metrics`` reads when the range covers both.

The analysis (:func:`analyse`) is a pure function of the series, so it is tested on its own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..prom import history as H
from ..prom.client import PromClient
from ..thresholds import Thresholds
from .model import DoctorReport, Evidence, Finding

MAX_POINTS = 1500  # per series and query: Prometheus refuses more than 11,000
MAX_RANGES = 5  # evidence ranges quoted per finding (the count is in numbers)


@dataclass(frozen=True)
class Points:
    """The series ``analyse`` needs for one deployment, as (unix time, value) lists."""

    kv: list
    waiting: list
    preemptions: list
    requests: list
    prompt_tokens: list
    generation_tokens: list
    e2e_p99: list
    ttft_p99: list
    start_time: list
    gpus: dict  # GPU label string -> (outside-budget MiB points, total MiB points)


def counter_total(points: list) -> tuple[Optional[float], int]:
    """(increase over the points with counter resets handled, number of resets)."""
    if not points:
        return None, 0
    total, resets = 0.0, 0
    for (_, a), (_, b) in zip(points, points[1:]):
        if b < a:
            resets += 1
            total += b  # the counter restarted from 0
        else:
            total += b - a
    return total, resets


def _ev(where: str, w: H.Window, text: str) -> Evidence:
    return Evidence(where, 0, text, H.iso(w.start), H.iso(w.end))


def _dur(w: H.Window) -> str:
    s = w.end - w.start
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def analyse(where: str, p: Points, th: Thresholds, step: float, util: Optional[float]) -> list[Finding]:
    found: list[Finding] = []
    waiting = dict(p.waiting)
    both = [(t, v) for t, v in p.kv if v >= th.kv_cache_usage and waiting.get(t, 0) > 0]
    full = H.windows(both, lambda v: True, step)
    if full:
        for w in full:
            w.numbers["waiting_max"] = max(waiting.get(t, 0) for t, _ in both if w.start <= t <= w.end)
        found.append(Finding(
            "kv_cache_full_with_waiting", "warning",
            f"KV cache at or above {th.kv_cache_usage:.0%} with requests waiting, {len(full)} time(s)",
            tuple(_ev(where, w, f"{_dur(w)}: KV usage max {w.peak:.1%}, waiting max {w.numbers['waiting_max']:g}")
                  for w in full[:MAX_RANGES]),
            (("ranges", len(full)), ("kv_cache_usage_max", round(max(w.peak for w in full), 4)),
             ("waiting_max", max(w.numbers["waiting_max"] for w in full)), ("threshold", th.kv_cache_usage)),
            collect_next=("kvplan plan for this model: --max-model-len, --kv-cache-dtype fp8 or more TP give more KV tokens",)))
    steps = [(b[0], b[1] - a[1] if b[1] >= a[1] else b[1]) for a, b in zip(p.preemptions, p.preemptions[1:])]
    bursts = H.windows(steps, lambda d: d > 0, step)
    if bursts:
        for w in bursts:
            w.numbers["count"] = sum(d for t, d in steps if w.start <= t <= w.end)
        total = sum(w.numbers["count"] for w in bursts)
        found.append(Finding(
            "preemption", "warning", f"{total:g} preemption(s) in {len(bursts)} burst(s): the KV cache ran out mid-generation",
            tuple(_ev(where, w, f"{_dur(w)}: {w.numbers['count']:g} preemption(s)") for w in bursts[:MAX_RANGES]),
            (("preemptions", int(total)), ("bursts", len(bursts)), ("source", "prometheus"))))
    for key, pts, limit in (("e2e_p99", p.e2e_p99, th.e2e_p99), ("ttft_p99", p.ttft_p99, th.ttft_p99)):
        if limit is None:
            continue  # no latency threshold given: there is no default that fits every deployment
        tails = H.windows(pts, lambda v, lim=limit: math.isfinite(v) and v > lim, step)
        if tails:
            found.append(Finding(
                "latency_tail", "warning", f"{key.replace('_', ' ').upper()} above {limit:g} s, {len(tails)} time(s)",
                tuple(_ev(where, w, f"{_dur(w)}: {key} max {w.peak:.3f} s") for w in tails[:MAX_RANGES]),
                (("metric", key), ("threshold_s", limit), ("max_s", round(max(w.peak for w in tails), 4)),
                 ("ranges", len(tails)))))
    for gpu, (outside, totals) in sorted(p.gpus.items()):
        tot = dict(totals)
        over = [(t, v) for t, v in outside if tot.get(t) and v > th.gpu_budget_margin * tot[t]]
        for w in H.windows(over, lambda v: True, step):
            first = next(v for t, v in over if t >= w.start)
            last = next(v for t, v in reversed(over) if t <= w.end)
            minutes = max((w.end - w.start) / 60, 1e-9)
            growing = last > first
            found.append(Finding(
                "gpu_memory_outside_budget", "warning",
                f"{gpu}: {last:,.0f} MiB above vLLM's budget ({util:g} of total)" + (", growing" if growing else ""),
                (_ev(where, w, f"{_dur(w)}: {first:,.0f} -> {last:,.0f} MiB outside the budget"
                               + (f" (+{(last - first) / minutes:,.0f} MiB/min)" if growing and w.end > w.start else "")),),
                (("gpu", gpu), ("outside_budget_mib_first", round(first, 1)), ("outside_budget_mib_last", round(last, 1)),
                 ("outside_budget_mib_max", round(w.peak, 1)), ("growing", growing), ("gpu_memory_utilization", util),
                 # the threshold in the numbers' own unit (MiB), and the share of the total it is
                 ("margin_mib", round(th.gpu_budget_margin * tot[w.start] if w.start in tot else 0.0, 1)),
                 ("margin_share_of_total", th.gpu_budget_margin)),
                collect_next=("nvidia-smi on the host: which process holds the memory outside vLLM",)))
    restarts = [(b[0], b[1]) for a, b in zip(p.start_time, p.start_time[1:]) if b[1] != a[1]]
    reset_at = [b[0] for a, b in zip(p.requests, p.requests[1:]) if b[1] < a[1]]
    seen = {t for t, _ in restarts}
    events = [H.Window(t, t, v, {"how": "process_start_time_seconds changed"}) for t, v in restarts]
    events += [H.Window(t, t, 0.0, {"how": "counters reset"}) for t in reset_at
               if not any(abs(t - s) <= 2 * step for s in seen)]
    if events:
        events.sort(key=lambda w: w.start)
        found.append(Finding(
            "server_restart", "warning", f"the server restarted {len(events)} time(s)",
            tuple(_ev(where, w, w.numbers["how"] + (f" (new start {H.iso(w.peak)})" if w.peak else ""))
                  for w in events[:MAX_RANGES]),
            (("restarts", len(events)),),
            collect_next=("the server log around each restart (kvplan doctor LOG): OOM, a crash or a redeploy",)))
    return found


def _points(res) -> list:
    return [(t, v) for s in res.series[:1] for t, v in s.samples]


def diagnose_prometheus(client: PromClient, sel: H.Selection, start: float, end: float, th: Thresholds = Thresholds(),
                        gpu_memory_utilization: Optional[float] = None, gpu_selector: str = "",
                        vllm_version: Optional[str] = None) -> DoctorReport:
    """Findings for every deployment the selection finds in [start, end]. Raises PromError /
    NoSeriesError when nothing could be read."""
    step = max(1.0, math.ceil((end - start) / MAX_POINTS))
    rate_w = f"{int(max(60, 4 * step))}s"
    deps = H.find_deployments(client, sel, start, end)
    findings: list[Finding] = []
    history: list[dict] = []
    extra = sel.vllm_matchers()
    for dep in deps:
        names = dep.metric_names()
        target = dep.target + ("," + extra if extra else "")
        where = f"prometheus {client.url} {dep.job}/{dep.instance}"
        notes: list[str] = []

        def rng(expr: str) -> list:
            return _points(client.query_range(expr, start, end, step))

        def agg(key: str, how: str = "sum") -> list:
            n = names.get(key)
            if n is None:
                notes.append(f"no {key} series ({' / '.join(H.M.ALIASES[key])}) for {dep.instance}: skipped")
                return []
            return rng(f"{how}({n}{{{target}}})")

        def p99(key: str) -> list:
            n = names.get(key)
            if n is None:
                return []
            return rng(f"histogram_quantile(0.99, sum by (le) (rate({n}_bucket{{{target}}}[{rate_w}])))")

        renamed = {k: v for k, v in names.items() if v and v != H.M.ALIASES[k][0]}
        if renamed:
            notes.append("older vLLM metric names: " + ", ".join(f"{k}={v}" for k, v in sorted(renamed.items())))
        gpus: dict = {}
        gsel = H.gpu_selection(client, dep, gpu_selector, start, end)
        util = None
        if gsel.note:
            notes.append(gsel.note)
        else:
            util, source = H.utilization_of(client, dep, end, gpu_memory_utilization, vllm_version)
            notes.append(f"GPU memory from DCGM ({gsel.how}); vLLM budget {util:g} ({source})")
            g = gsel.matcher
            used, free = f"DCGM_FI_DEV_FB_USED{{{g}}}", f"DCGM_FI_DEV_FB_FREE{{{g}}}"
            outside = client.query_range(f"{used} - {util!r} * ({used} + {free})", start, end, step)
            totals = client.query_range(f"{used} + {free}", start, end, step)
            tot_by = {s.labels: list(s.samples) for s in totals.series}
            for s in outside.series:
                d = dict(s.labels)
                label = f"GPU {d.get('gpu', '?')} on {d.get('Hostname') or d.get('hostname') or d.get('instance', '?')}"
                gpus[label] = (list(s.samples), tot_by.get(s.labels, []))
        pts = Points(agg("kv_cache_usage", "max"), agg("requests_waiting"), agg("preemptions"), agg("request_success"),
                     agg("prompt_tokens"), agg("generation_tokens"), p99("e2e"), p99("ttft"),
                     rng(f"max({H.START}{{{dep.target}}})"), gpus)
        findings.extend(analyse(where, pts, th, step, util))
        totals_out = {}
        for key, series in (("requests", pts.requests), ("prompt_tokens", pts.prompt_tokens),
                            ("generation_tokens", pts.generation_tokens), ("preemptions", pts.preemptions)):
            totals_out[key] = counter_total(series)[0]
        totals_out["kv_cache_usage_max"] = max((v for _, v in pts.kv), default=None)
        totals_out["waiting_max"] = max((v for _, v in pts.waiting), default=None)
        history.append({**dep.to_dict(), "start": H.iso(start), "end": H.iso(end), "step_s": step,
                        "metric_names": names, "totals": totals_out, "notes": notes,
                        "gpu_memory_utilization": util})
    return DoctorReport((f"prometheus {client.url}",), (), tuple(findings), (), 0, tuple(history))
