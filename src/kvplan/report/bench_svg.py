"""Minimal static SVG line charts for the offline HTML report (used when plotly is not
installed). Every label passes through ``html.escape``; numbers are formatted, never injected."""
from __future__ import annotations

import html
import math
from typing import Optional, Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if float(v).is_integer():
        return f"{v:,.0f}"
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.0f}" if a >= 100 else f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.3g}"


def nice_ticks(lo: float, hi: float, target: int = 5, integer: bool = False) -> list[float]:
    """Round tick values (1, 2 or 5 × a power of ten) covering [lo, hi]; whole numbers only with
    ``integer`` (counts, turns)."""
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / max(1, target - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if integer:
        step = max(1.0, math.ceil(step))
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    k = 0
    while first + k * step <= hi + 1e-9 * max(1.0, abs(hi)):
        ticks.append(round(first + k * step, 10))
        k += 1
    return ticks


def _is_integral(values) -> bool:
    return all(float(v).is_integer() for v in values)


def line_chart(series: Sequence[tuple[str, Sequence[tuple[float, Optional[float]]]]], title: str, xlabel: str,
               ylabel: str, width: int = 960, height: int = 300, step: bool = False,
               integer_x: Optional[bool] = None) -> str:
    """Lines through (x, y) points; None y values break the line. Returns an <svg> element that
    fills its container's width (the viewBox keeps the proportions). Ticks are round numbers
    (whole ones when every x is: turns, counts, or ``integer_x``); the left margin is as wide as
    the longest tick label, so no label is clipped."""
    pts = [(x, y) for _, s in series for x, y in s if y is not None and math.isfinite(y)]
    esc = html.escape
    if not pts:
        return (f'<svg width="{width}" height="40" style="max-width:100%" role="img"><text x="10" y="25" '
                f'font-size="13">{esc(title)}: no data</text></svg>')
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(0.0, min(p[1] for p in pts)), max(p[1] for p in pts)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    if integer_x is None:
        integer_x = _is_integral(p[0] for p in pts)
    xticks = nice_ticks(x0, x1, 6, integer=integer_x)
    yticks = nice_ticks(y0, y1, 5, integer=_is_integral(p[1] for p in pts) and y1 - y0 >= 4)
    if len(yticks) > 1 and yticks[-1] < y1:  # the top of the axis is a round tick too
        yticks.append(round(yticks[-1] + (yticks[1] - yticks[0]), 10))
    y1 = max(y1, yticks[-1])
    ylabels = [_fmt(v) for v in yticks]
    ml = 30 + 6 * max(len(t) for t in ylabels)  # the axis title, then the longest tick label
    mr = 8 + 3 * len(_fmt(xticks[-1]))  # half the last x label, centred on the right edge
    mt, mb = 28, 40
    pw, ph = width - ml - mr, height - mt - mb

    def sx(x: float) -> float:
        return ml + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return mt + ph - (y - y0) / (y1 - y0) * ph

    out = [f'<svg width="100%" viewBox="0 0 {width} {height}" role="img" preserveAspectRatio="xMinYMin meet" '
           f'xmlns="http://www.w3.org/2000/svg" font-family="sans-serif">',
           f'<text x="{ml}" y="16" font-size="13" font-weight="bold">{esc(title)}</text>',
           f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#bbb"/>']
    for yv, label in zip(yticks, ylabels):
        out.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{ml - 4}" y="{sy(yv) + 4:.1f}" font-size="10" text-anchor="end">{esc(label)}</text>')
    for xv in xticks:
        out.append(f'<text x="{sx(xv):.1f}" y="{mt + ph + 14}" font-size="10" text-anchor="middle">'
                   f'{esc(_fmt(xv))}</text>')
    out.append(f'<text x="{ml + pw / 2}" y="{height - 6}" font-size="11" text-anchor="middle">{esc(xlabel)}</text>')
    out.append(f'<text x="12" y="{mt + ph / 2}" font-size="11" text-anchor="middle" '
               f'transform="rotate(-90 12 {mt + ph / 2})">{esc(ylabel)}</text>')
    for idx, (name, s) in enumerate(series):
        color = PALETTE[idx % len(PALETTE)]
        segs: list[list[str]] = [[]]
        prev_y = None
        for x, y in s:
            if y is None or not math.isfinite(y):
                segs.append([])
                prev_y = None
                continue
            if step and prev_y is not None:
                segs[-1].append(f"{sx(x):.1f},{sy(prev_y):.1f}")
            segs[-1].append(f"{sx(x):.1f},{sy(y):.1f}")
            prev_y = y
        for seg in segs:
            if len(seg) == 1:
                cx, cy = seg[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{color}"/>')
            elif seg:
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{" ".join(seg)}"/>')
        lx = ml + 8 + idx * 130
        out.append(f'<rect x="{lx}" y="{mt + 6}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{lx + 14}" y="{mt + 15}" font-size="11">{esc(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def bar_chart(items: Sequence[tuple[str, float]], title: str, width: int = 640) -> str:
    esc = html.escape
    if not items:
        return f'<p class="muted">{esc(title)}: none</p>'
    h = 30 + 22 * len(items)
    vmax = max(v for _, v in items) or 1
    out = [f'<svg width="100%" viewBox="0 0 {width} {h}" style="max-width:{width}px" '
           'xmlns="http://www.w3.org/2000/svg" font-family="sans-serif">',
           f'<text x="10" y="16" font-size="13" font-weight="bold">{esc(title)}</text>']
    for i, (label, v) in enumerate(items):
        y = 26 + 22 * i
        w = (width - 260) * v / vmax
        out.append(f'<text x="170" y="{y + 13}" font-size="11" text-anchor="end">{esc(label)}</text>')
        out.append(f'<rect x="176" y="{y}" width="{w:.1f}" height="16" fill="#d62728"/>')
        out.append(f'<text x="{180 + w:.1f}" y="{y + 13}" font-size="11">{esc(_fmt(v))}</text>')
    out.append("</svg>")
    return "\n".join(out)
