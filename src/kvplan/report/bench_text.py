"""Terminal views of ``kvplan bench``: the live progress line while a run goes, the summary after
it, and the ``bench compare`` table. They read the result dict (``BenchResult.to_dict()`` or a
loaded JSON file) and compute nothing themselves."""
from __future__ import annotations

from typing import Optional

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .bench_common import requests_summary


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 1e3:,.1f}"


def _num(x, fmt: str = "{:,.2f}") -> str:
    return "-" if x is None else fmt.format(x)


class ProgressDisplay:
    """A one-panel live view (stderr) refreshed from ``run.Progress`` snapshots."""

    def __init__(self, console: Console, planned_s: Optional[float], target: str):
        self.console = console
        self.planned = planned_s
        self.target = target
        self.live = Live(Text("starting…"), console=console, refresh_per_second=2, transient=True)

    def __enter__(self) -> "ProgressDisplay":
        self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.live.__exit__(*exc)

    def update(self, p) -> None:
        rate = p.sent / p.elapsed if p.elapsed > 0 else 0.0
        t = Table.grid(padding=(0, 2))
        t.add_row("elapsed", f"{p.elapsed:,.1f} s" + (f" / {self.planned:,.0f} s" if self.planned else ""),
                  "target", self.target)
        t.add_row("sent", f"{p.sent:,} ({rate:,.1f}/s)", "in flight", f"{p.sent - p.done:,}")
        t.add_row("ok", f"{p.ok:,}", "failed", Text(f"{p.failed:,}", style="red" if p.failed else ""))
        t.add_row("output tokens", f"{p.output_tokens:,}", "mean lag", f"{_ms(p.mean_lag)} ms")
        s = p.server or {}
        if s:
            kv = s.get("kv_cache_usage")
            t.add_row("server KV", "-" if kv is None else f"{kv:.1%}", "running / waiting",
                      f"{_num(s.get('requests_running'), '{:.0f}')} / {_num(s.get('requests_waiting'), '{:.0f}')}")
        self.live.update(Panel(t, title="kvplan bench", expand=False))


def render_summary(d: dict, console: Optional[Console] = None) -> None:
    c = console or Console()
    v = d["verdict"]
    req = d["requests"]
    rate = d["rate"]
    lag = d["schedule_lag_s"]
    head = Table.grid(padding=(0, 2))
    head.add_row("model", Text(str(d.get("model"))), "mode", str(rate.get("mode")))
    head.add_row("requests", requests_summary(req),
                 "error rate", "-" if req.get("error_rate") is None else f"{req['error_rate']:.2%}")
    head.add_row("rate requested / achieved", f"{_num(rate.get('requested'))} / {_num(rate.get('achieved'))} req/s",
                 "schedule lag p50 / p99", f"{_ms(lag.get('p50'))} / {_ms(lag.get('p99'))} ms")
    thr = d["throughput"]
    head.add_row("throughput", f"{_num(thr.get('requests_per_s'))} req/s, {_num(thr.get('output_tokens_per_s'), '{:,.1f}')} tok/s",
                 "tokens in / out", f"{d['tokens']['input_total']:,} / {d['tokens']['output_total']:,}")
    gp = d.get("goodput") or {}
    if gp.get("limits_s"):
        head.add_row("goodput", f"{_num(gp.get('requests_per_s'))} req/s", "within SLO",
                     "-" if gp.get("ratio") is None else f"{gp['ratio']:.1%}")
    style = "green" if v["passed"] else "red"
    title = "PASSED" if v["passed"] else ("PARTIAL" if d.get("partial") else "FAILED")
    c.print(Panel(head, title=f"kvplan bench: {title}", border_style=style, expand=False))

    lat = Table(title="latency (ms)", show_edge=False)
    lat.add_column("metric")
    for col in ("p50", "p90", "p95", "p99", "max", "mean", "n"):
        lat.add_column(col, justify="right")
    for key in ("ttft", "tpot", "itl", "e2e"):
        s = d["latency_s"].get(key) or {}
        lat.add_row(key.upper(), *(_ms(s.get(k)) for k in ("p50", "p90", "p95", "p99", "max", "mean")),
                    f"{s.get('count', 0):,}")
    c.print(lat)
    if d.get("errors"):
        err = Table(title="errors", show_edge=False)
        err.add_column("class")
        err.add_column("count", justify="right")
        err.add_column("example")
        for k, n in sorted(d["errors"].items(), key=lambda kv: -kv[1]):
            err.add_row(k, f"{n:,}", Text((d.get("error_examples") or {}).get(k, "")[:100]))
        c.print(err)
    srv = d.get("server") or {}
    if srv.get("available"):
        deltas = srv.get("deltas") or {}
        gen = deltas.get("vllm:generation_tokens_total")
        pre = deltas.get("vllm:num_preemptions_total")
        kv = [s.get("kv_cache_usage") for s in srv.get("samples", []) if s.get("kv_cache_usage") is not None]
        c.print(Text(f"server: {len(srv.get('samples', []))} scrapes; generation tokens Δ {_num(gen, '{:,.0f}')}, "
                     f"preemptions Δ {_num(pre, '{:,.0f}')}, KV usage max {'-' if not kv else f'{max(kv):.1%}'}"
                     + (f"; absent metrics: {', '.join(srv['absent'])}" if srv.get("absent") else "")))
    elif srv.get("notice"):
        c.print(Text(f"server: {srv['notice']}"))
    if (d.get("gpu") or {}).get("notice"):
        c.print(Text(d["gpu"]["notice"]))
    for note in (d.get("client") or {}).get("host_contention_reasons") or ():
        c.print(Text(f"! {note}", style="yellow"))
    for chk in v["checks"]:
        if not chk["passed"]:
            c.print(Text(f"✗ {chk['name']}: {chk['value']}" + (f" (limit {chk['limit']})" if chk['limit'] is not None
                                                                else "") + (f" — {chk['note']}" if chk["note"] else ""),
                         style="red"))


def render_compare(cmp: dict, console: Optional[Console] = None) -> None:
    c = console or Console()
    t = Table(title=f"bench compare (threshold {cmp['threshold']:.0%}, {cmp['confidence']:.0%} family-wise CI)",
              show_edge=False)
    for col in ("metric", "baseline ms", "current ms", "change", "CI", "verdict"):
        t.add_column(col, justify="left" if col in ("metric", "verdict") else "right")
    colors = {"worse": "red", "better": "green", "same": "", "n/a": "dim"}
    for r in cmp["rows"]:
        change = "-" if r["change"] is None else f"{r['change']:+.1%}"
        if r["verdict"] == "n/a":
            ci = "-"
        else:
            lo = "-100%" if r["ci_low"] is None else f"{r['ci_low']:+.1%}"
            hi = "+inf" if r["ci_high"] is None else f"{r['ci_high']:+.1%}"
            ci = f"[{lo}, {hi}]"
        t.add_row(f"{r['metric'].upper()} {r['stat']}", _ms(r["baseline"]), _ms(r["current"]), change, ci,
                  Text(r["verdict"], style=colors[r["verdict"]]))
    c.print(t)
    if cmp.get("method"):
        c.print(Text(f"intervals: {cmp['method']} ({cmp['row_confidence']:.2%} per row)", style="dim"))
    for w in cmp.get("warnings") or ():
        c.print(Text(f"! {w}", style="yellow"))
    for p in cmp["problems"]:
        c.print(Text(f"✗ {p}", style="red"))
    c.print(Text("REGRESSION" if cmp["regressed"] else ("no regression" if not cmp["problems"] else
                                                       "NOT COMPARABLE" if cmp.get("traffic_changed") and all(
                                                           r["verdict"] == "n/a" for r in cmp["rows"])
                                                       else "cannot pass"),
                 style="red" if cmp["regressed"] or cmp["problems"] else "green"))
