"""A self-contained HTML report of one ``kvplan bench`` run (works offline: no CDN, no fetch).

With the ``plot`` extra (plotly) the charts are interactive and plotly's JavaScript is inlined
once; without it they are static SVG (report.bench_svg). Either way the page carries the
verdict, the latency CDFs, the timeline of rate, latency, KV usage, queue and GPU memory on one
time axis, and the error breakdown. All text from the run (model names, error bodies, URLs)
is escaped: an error body is server-controlled input.
"""
from __future__ import annotations

import html
from typing import Optional

from . import bench_svg
from .bench_common import requests_summary

_CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ddd;padding:4px 8px;text-align:right}
th{background:#f5f5f5}td.l,th.l{text-align:left}.pass{color:#2a7}.fail{color:#c22}.muted{color:#777}
.grid{display:flex;flex-wrap:wrap;gap:12px}code{background:#f4f4f4;padding:1px 4px}"""


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 1e3:,.2f}"


def _num(x: Optional[float], digits: int = 2) -> str:
    """A rate or throughput as people read it: 1.72, 136.7, 1,234 (never 1.723229)."""
    if x is None:
        return "-"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:,.1f}"
    return f"{x:,.{digits}f}"


def _cdf(xs: list) -> list[tuple[float, float]]:
    s = sorted(xs)
    n = len(s)
    if n > 2000:  # a CDF drawn with 2000 points is indistinguishable from the full one
        step = n / 2000
        return [(s[int(i * step)] * 1e3, (int(i * step) + 1) / n) for i in range(2000)] + [(s[-1] * 1e3, 1.0)]
    return [(v * 1e3, (i + 1) / n) for i, v in enumerate(s)]


def _series(d: dict) -> dict:
    tl = d.get("timeline") or []
    srv = (d.get("server") or {}).get("samples") or []
    gpu = [(s["t"], sum((g.get("memory_used_bytes") or 0) for g in s["gpu"]) / 2**30) for s in srv if s.get("gpu")]
    return {
        "rate": [("sent/s", [(r["t"], r["sent"]) for r in tl]), ("completed/s", [(r["t"], r["completed"]) for r in tl]),
                 ("failed/s", [(r["t"], r["failed"]) for r in tl])],
        "latency": [("TTFT p50 (ms)", [(r["t"], None if r["ttft_p50"] is None else r["ttft_p50"] * 1e3) for r in tl]),
                    ("E2E p50 (ms)", [(r["t"], None if r["e2e_p50"] is None else r["e2e_p50"] * 1e3) for r in tl])],
        "kv": [("KV cache usage (%)", [(s["t"], None if s.get("kv_cache_usage") is None else s["kv_cache_usage"] * 100)
                                       for s in srv])],
        "queue": [("running", [(s["t"], s.get("requests_running")) for s in srv]),
                  ("waiting", [(s["t"], s.get("requests_waiting")) for s in srv]),
                  ("client in flight", [(r["t"], r["inflight"]) for r in tl])],
        "gpu": [("GPU memory used (GiB)", gpu)] if gpu else [],
    }


def _charts_svg(d: dict) -> str:
    samples = d.get("samples") or {}
    cdf = [(k.upper(), _cdf(samples.get(k) or [])) for k in ("ttft", "tpot", "itl", "e2e")]
    s = _series(d)
    parts = [bench_svg.line_chart([c for c in cdf if c[0] in ("TTFT", "E2E")], "Latency CDF: TTFT, E2E", "ms",
                                  "fraction"),
             bench_svg.line_chart([c for c in cdf if c[0] in ("TPOT", "ITL")], "Latency CDF: TPOT, ITL", "ms",
                                  "fraction"),
             bench_svg.line_chart(s["rate"], "Requests per second", "s", "req/s", step=True),
             bench_svg.line_chart(s["latency"], "Latency over time", "s", "ms"),
             bench_svg.line_chart(s["kv"], "Server KV cache usage", "s", "%"),
             bench_svg.line_chart(s["queue"], "Requests running / waiting", "s", "requests")]
    if s["gpu"]:
        parts.append(bench_svg.line_chart(s["gpu"], "GPU memory", "s", "GiB"))
    errs = sorted((d.get("errors") or {}).items(), key=lambda kv: -kv[1])
    parts.append(bench_svg.bar_chart(errs, "Errors by class"))
    return '<div class="grid">' + "\n".join(parts) + "</div>"


def _charts_plotly(d: dict) -> str:
    import plotly.graph_objects as go

    samples = d.get("samples") or {}
    s = _series(d)
    figs = []
    cdf = go.Figure()
    for k in ("ttft", "tpot", "itl", "e2e"):
        pts = _cdf(samples.get(k) or [])
        cdf.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], name=k.upper(), mode="lines"))
    cdf.update_layout(title="Latency CDFs", xaxis_title="ms", yaxis_title="fraction", xaxis_type="log")
    figs.append(cdf)
    for key, title, ytitle in (("rate", "Requests per second", "req/s"), ("latency", "Latency over time", "ms"),
                               ("kv", "Server KV cache usage", "%"), ("queue", "Requests running / waiting", "requests"),
                               ("gpu", "GPU memory", "GiB")):
        if not s[key]:
            continue
        f = go.Figure()
        for name, pts in s[key]:
            f.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], name=name, mode="lines"))
        f.update_layout(title=title, xaxis_title="seconds since start", yaxis_title=ytitle, height=320)
        figs.append(f)
    errs = sorted((d.get("errors") or {}).items(), key=lambda kv: -kv[1])
    if errs:
        figs.append(go.Figure(go.Bar(x=[n for _, n in errs], y=[k for k, _ in errs], orientation="h"),
                              layout={"title": "Errors by class", "height": 120 + 30 * len(errs)}))
    return "\n".join(f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs))


def render_html(d: dict, engine: str = "auto") -> str:
    """The report page. ``engine``: auto (plotly when installed), plotly, or svg."""
    use_plotly = False
    if engine in ("auto", "plotly"):
        try:
            import plotly  # noqa: F401

            use_plotly = True
        except ImportError:
            if engine == "plotly":
                raise
    v = d.get("verdict") or {}
    cls = "pass" if v.get("passed") else "fail"
    word = "PASSED" if v.get("passed") else ("PARTIAL" if d.get("partial") else "FAILED")
    req, rate, lag, thr = d["requests"], d["rate"], d["schedule_lag_s"], d["throughput"]
    rows = [("model", d.get("model")), ("started", d.get("started_at")), ("url", (d.get("config") or {}).get("url")),
            ("mode", rate.get("mode")), ("requests", requests_summary(req)),
            ("rate requested / achieved", f"{_num(rate.get('requested'))} / {_num(rate.get('achieved'))} req/s"),
            ("schedule lag p50 / p99", f"{_ms(lag.get('p50'))} / {_ms(lag.get('p99'))} ms"),
            ("client-bound", "yes: " + "; ".join(d.get("client_bound_reasons") or []) if d.get("client_bound") else "no"),
            ("throughput", f"{_num(thr.get('requests_per_s'))} req/s, {_num(thr.get('output_tokens_per_s'))} output tok/s"),
            ("tokens in / out", f"{d['tokens']['input_total']:,} / {d['tokens']['output_total']:,}"),
            ("stop reason", d.get("stop_reason"))]
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
           f"<title>kvplan bench: {_e(d.get('model'))}</title><style>{_CSS}</style></head><body>",
           f"<h1>kvplan bench <span class='{cls}'>{word}</span></h1><table>"]
    out += [f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(val)}</td></tr>" for k, val in rows]
    out.append("</table><h2>Checks</h2><table><tr><th class='l'>check</th><th>value</th><th>limit</th>"
               "<th class='l'>result</th></tr>")
    for c in v.get("checks", []):
        val, lim = (_num(x, 4) if isinstance(x, float) else x for x in (c["value"], c["limit"]))
        out.append(f"<tr><td class='l'>{_e(c['name'])}</td><td>{_e(val)}</td><td>{_e(lim)}</td>"
                   f"<td class='l {'pass' if c['passed'] else 'fail'}'>{'pass' if c['passed'] else 'FAIL'} "
                   f"{_e(c.get('note'))}</td></tr>")
    out.append("</table><h2>Latency (ms)</h2><table><tr><th class='l'>metric</th>"
               + "".join(f"<th>{k}</th>" for k in ("p50", "p90", "p95", "p99", "max", "mean", "n")) + "</tr>")
    for key in ("ttft", "tpot", "itl", "e2e"):
        s = d["latency_s"].get(key) or {}
        out.append(f"<tr><td class='l'>{key.upper()}</td>" + "".join(
            f"<td>{_ms(s.get(k))}</td>" for k in ("p50", "p90", "p95", "p99", "max", "mean")) +
            f"<td>{_e(s.get('count'))}</td></tr>")
    out.append("</table>")
    if d.get("errors"):
        out.append("<h2>Errors</h2><table><tr><th class='l'>class</th><th>count</th><th class='l'>example</th></tr>")
        for k, n in sorted(d["errors"].items(), key=lambda kv: -kv[1]):
            out.append(f"<tr><td class='l'>{_e(k)}</td><td>{n:,}</td>"
                       f"<td class='l'><code>{_e((d.get('error_examples') or {}).get(k, '')[:300])}</code></td></tr>")
        out.append("</table>")
    srv = d.get("server") or {}
    out.append("<h2>Charts</h2>")
    if not srv.get("available"):
        out.append(f"<p class='muted'>{_e(srv.get('notice') or 'no server metrics')}</p>")
    elif srv.get("absent"):
        out.append(f"<p class='muted'>metrics absent on this server: {_e(', '.join(srv['absent']))}</p>")
    if (d.get("gpu") or {}).get("notice"):
        out.append(f"<p class='muted'>{_e(d['gpu']['notice'])}</p>")
    out.append(_charts_plotly(d) if use_plotly else _charts_svg(d))
    out.append("<p class='muted'>TTFT, TPOT = (E2E − TTFT)/(output tokens − 1), ITL (every inter-chunk gap) and "
               "E2E follow vLLM's benchmark definitions; output tokens from the server's usage.</p></body></html>")
    return "\n".join(out)
