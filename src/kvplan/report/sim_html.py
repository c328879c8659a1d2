"""A self-contained HTML report of one ``kvplan simulate`` run (offline: inline SVG, no scripts),
in the style of the ``kvplan bench`` report (:mod:`kvplan.report.bench_svg` charts): the headline,
predicted latency table, SLO gates, the timeline (running / waiting / KV usage / tokens per
second), latency CDFs, and the throughput-latency curve of the saturation search when it ran.
Every string from the result passes through ``html.escape``."""
from __future__ import annotations

import html

from . import bench_svg
from .sim_common import LAT_COLS, capacity_rows, check_rows, headline, latency_rows, verdict_word

_CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ddd;padding:4px 8px;text-align:right}
th{background:#f5f5f5}td.l,th.l{text-align:left}.pass{color:#2a7}.fail{color:#c22}.muted{color:#777}
.grid{display:flex;flex-wrap:wrap;gap:12px}"""


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _cdf(xs) -> list[tuple[float, float]]:
    s = sorted(xs)
    n = len(s)
    if n > 2000:
        step = n / 2000
        return [(s[int(i * step)] * 1e3, (int(i * step) + 1) / n) for i in range(2000)] + [(s[-1] * 1e3, 1.0)]
    return [(v * 1e3, (i + 1) / n) for i, v in enumerate(s)]


def charts(d: dict) -> str:
    tl = d.get("timeline") or []
    samples = d.get("samples") or {}
    parts = [
        bench_svg.line_chart([("running", [(r["t"], r["running"]) for r in tl]),
                              ("waiting", [(r["t"], r["waiting"]) for r in tl])],
                             "Requests running / waiting (simulated)", "s", "requests"),
        bench_svg.line_chart([("KV cache usage (%)", [(r["t"], r["kv_usage"] * 100) for r in tl])],
                             "KV cache usage", "s", "%"),
        bench_svg.line_chart([("tokens/s", [(r["t"], r["tokens_per_s"]) for r in tl])],
                             "Tokens computed per second", "s", "tokens/s"),
        bench_svg.line_chart([(k.upper(), _cdf(samples.get(k) or [])) for k in ("ttft", "e2e")],
                             "Latency CDF: TTFT, E2E", "ms", "fraction"),
        bench_svg.line_chart([("TPOT", _cdf(samples.get("tpot") or []))], "Latency CDF: TPOT", "ms", "fraction"),
    ]
    probes = sorted((d.get("saturation_search") or {}).get("probes") or [], key=lambda p: p["rate"])
    if probes:
        parts.append(bench_svg.line_chart(
            [("TTFT p99 (ms)", [(p["rate"], None if p["ttft_p99"] is None else p["ttft_p99"] * 1e3) for p in probes]),
             ("E2E p99 (ms)", [(p["rate"], None if p["e2e_p99"] is None else p["e2e_p99"] * 1e3) for p in probes])],
            "Throughput-latency: P99 against offered rate", "offered req/s", "ms"))
        parts.append(bench_svg.line_chart(
            [("completed req/s", [(p["rate"], p["throughput_rps"]) for p in probes])],
            "Throughput against offered rate", "offered req/s", "req/s"))
    return '<div class="grid">' + "\n".join(parts) + "</div>"


def render_html(d: dict) -> str:
    v = d.get("verdict") or {}
    ok = v.get("passed", True)
    said = verdict_word(d)
    word = f" <span class='{'pass' if ok else 'fail'}'>{_e(said)}</span>" if said else ""
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
           f"<title>kvplan simulate: {_e(d['config'].get('model'))}</title><style>{_CSS}</style></head><body>",
           f"<h1>kvplan simulate{word}</h1><table>"]
    out += [f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(val)}</td></tr>" for k, val in headline(d)]
    out.append("</table><h2>Predicted latency</h2><table><tr><th class='l'>metric</th>"
               + "".join(f"<th>{c}</th>" for c in LAT_COLS + ("n",)) + "</tr>")
    for row in latency_rows(d):
        out.append(f"<tr><td class='l'>{_e(row[0])}</td>" + "".join(f"<td>{_e(x)}</td>" for x in row[1:]) + "</tr>")
    out.append("</table>")
    rows = check_rows(d)
    if rows:
        out.append("<h2>SLO</h2><table><tr><th class='l'>gate</th><th>predicted</th><th>limit</th><th></th></tr>")
        for r in rows:
            out.append(f"<tr><td class='l'>{_e(r[0])}</td><td>{_e(r[1])}</td><td>{_e(r[2])}</td>"
                       f"<td class='{'pass' if r[3] == 'ok' else 'fail'}'>{_e(r[3])}</td></tr>")
        out.append("</table>")
    cap = capacity_rows(d)
    if cap:
        out.append("<h2>Capacity boundary</h2><table><tr><th>max_model_len</th><th>max concurrency</th>"
                   "<th>starts</th><th>max QPS at the SLO</th></tr>")
        out += ["<tr>" + "".join(f"<td>{_e(x)}</td>" for x in r) + "</tr>" for r in cap]
        out.append("</table>")
    out.append("<h2>Charts</h2>")
    out.append(charts(d))
    for note in d.get("notes") or ():
        out.append(f"<p class='muted'>note: {_e(note)}</p>")
    out.append(f"<p class='muted'>{_e(d.get('simulator'))}. TTFT, TPOT = (E2E - TTFT)/(output tokens - 1), ITL and "
               "E2E follow vLLM's benchmark definitions, as kvplan bench measures them.</p></body></html>")
    return "\n".join(out)
