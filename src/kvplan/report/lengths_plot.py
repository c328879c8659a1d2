"""``kvplan lengths --plot FILE``: an HTML page with the histograms and the recommendations.

With plotly installed (the ``plot`` extra) the charts are interactive, plotly.js inlined so the
page works offline; without it kvplan draws plain SVG bars itself. Every string that comes from
the input (file names, notes, reasons) is HTML-escaped: a log is untrusted data.
"""
from __future__ import annotations

import html
from pathlib import Path

from ..workload.result import LengthsResult
from ..workload.stats import Histogram
from .lengths_common import DIST_ROWS, counted_line, estimate_tag, pct, records_line

CHARTS = (("prompt_tokens", "prompt tokens"), ("total_tokens", "prompt + output budget"),
          ("output_tokens", "output tokens"))


def svg_histogram(h: Histogram, title: str, mark: int | None = None, width: int = 640, height: int = 220) -> str:
    """A self-contained SVG bar chart; ``mark`` draws a vertical line (the recommendation)."""
    e = html.escape
    if not h.counts:
        return f"<p>{e(title)}: no data</p>"
    pad_l, pad_b, pad_t = 50, 30, 24
    w, hgt = width - pad_l - 10, height - pad_b - pad_t
    top = max(h.counts) or 1
    span = h.edges[-1] - h.edges[0] or 1
    bar_w = w / len(h.counts)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{e(title)}">', f'<text x="{pad_l}" y="16" font-size="13">{e(title)}</text>']
    for i, c in enumerate(h.counts):
        bh = c / top * hgt
        parts.append(f'<rect x="{pad_l + i * bar_w:.1f}" y="{pad_t + hgt - bh:.1f}" width="{max(bar_w - 1, 1):.1f}" '
                     f'height="{bh:.1f}" fill="#4a7bd0"><title>{h.edges[i]:,}–{h.edges[i + 1]:,}: {c:,}</title></rect>')
    base = pad_t + hgt
    parts.append(f'<line x1="{pad_l}" y1="{base}" x2="{pad_l + w}" y2="{base}" stroke="#333"/>')
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        x = pad_l + frac * w
        parts.append(f'<text x="{x:.1f}" y="{base + 16}" font-size="11" text-anchor="middle">'
                     f'{int(h.edges[0] + frac * span):,}</text>')
    parts.append(f'<text x="{pad_l - 6}" y="{pad_t + 10}" font-size="11" text-anchor="end">{top:,}</text>')
    if mark is not None and h.edges[0] <= mark <= h.edges[-1]:
        x = pad_l + (mark - h.edges[0]) / span * w
        parts.append(f'<line x1="{x:.1f}" y1="{pad_t}" x2="{x:.1f}" y2="{base}" stroke="#c0392b" stroke-dasharray="4"/>')
        parts.append(f'<text x="{x + 4:.1f}" y="{pad_t + 10}" font-size="11" fill="#c0392b">{mark:,}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _plotly_chart(h: Histogram, title: str, mark: int | None, include_js: bool) -> str | None:
    try:
        import plotly.graph_objects as go
    except ImportError:
        return None
    centers = [(a + b) / 2 for a, b in zip(h.edges, h.edges[1:])]
    fig = go.Figure(go.Bar(x=centers, y=list(h.counts), width=[b - a for a, b in zip(h.edges, h.edges[1:])]))
    fig.update_layout(title=title, height=300, margin=dict(l=40, r=10, t=40, b=30), xaxis_title="tokens",
                      yaxis_title="requests")
    if mark is not None:
        fig.add_vline(x=mark, line_dash="dash", line_color="#c0392b")
    # plotly.js is inlined once per page (the first chart), so the file works offline.
    return fig.to_html(full_html=False, include_plotlyjs=bool(include_js))


def render_html(r: LengthsResult, use_plotly: bool = True) -> str:
    e = html.escape
    rec = r.recommendation
    charts: list[str] = []
    js_done = False
    for key, title in CHARTS:
        h = r.histograms.get(key)
        if h is None:
            continue
        mark = rec.max_model_len if key == "total_tokens" else rec.max_tokens if key == "output_tokens" else None
        chart = _plotly_chart(h, title, mark, not js_done) if use_plotly and h.counts else None
        js_done = js_done or chart is not None
        charts.append(chart if chart is not None else svg_histogram(h, title, mark))
    rows = "".join(f"<tr><td>{e(label)}</td>" + "".join(f"<td>{getattr(getattr(r, key), k):,}</td>" for k in
                                                      ("count", "p50", "p90", "p95", "p99", "p999", "max")) + "</tr>"
                   for label, key in DIST_ROWS if getattr(r, key).count)
    cov = "".join(f"<tr><td>{c.max_model_len:,}</td><td>{e(c.label)}</td><td>{pct(c.rejected_share)}</td>"
                  f"<td>{pct(c.clamped_share)}</td><td>{pct(c.truncated_share)}</td></tr>" for c in r.coverage)
    notes = "".join(f"<li>{e(n)}</li>" for n in r.notes)
    issues = "".join(f"<li><code>{e(i.file)}:{i.line}</code> {e(i.message)} ({e(i.reason)})</li>" for i in r.issues[:20])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kvplan lengths</title>
<style>body{{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}
.rec{{background:#eef7ee;padding:1em;border-radius:6px}}</style></head><body>
<h1>kvplan lengths{e(estimate_tag(r))}</h1>
<p>{e(records_line(r))}</p><p>{e(counted_line(r))}</p>
<div class="rec"><p><b>--max-model-len {rec.max_model_len or 'n/a'}</b>: {e(rec.max_model_len_reason)}</p>
<p><b>max_tokens {rec.max_tokens or 'n/a'}</b>: {e(rec.max_tokens_reason)}</p>
<p><b>history: {rec.history_turns or 'no'} turn limit</b>: {e(rec.history_reason)}</p></div>
<h2>Token lengths</h2><table><tr><th></th><th>count</th><th>P50</th><th>P90</th><th>P95</th><th>P99</th><th>P99.9</th>
<th>max</th></tr>{rows}</table>
{''.join(charts)}
<h2>Coverage</h2><table><tr><th>max_model_len</th><th></th><th>rejected</th><th>clamped</th><th>truncated</th></tr>{cov}</table>
<ul>{notes}</ul><ul>{issues}</ul>
</body></html>
"""


def write_plot(r: LengthsResult, path: Path) -> None:
    Path(path).write_text(render_html(r), encoding="utf-8")
