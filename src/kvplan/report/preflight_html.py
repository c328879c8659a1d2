"""``kvplan preflight``'s one-page report: self-contained HTML (no CDN, no fetch, no script), with
static SVG plots drawn by :mod:`kvplan.report.bench_svg` and the bench report's stylesheet.

Everything that comes from input (model names, file paths, error bodies, vLLM's messages) goes
through ``html.escape``; numbers are formatted, never injected. Reads ``PreflightResult.to_dict()``
only, like every other preflight renderer.
"""
from __future__ import annotations

import re
from typing import Any

from . import bench_svg
from .bench_html import _CSS as _BENCH_CSS
from .bench_html import _e

_CSS = _BENCH_CSS + """
.verdict{font-size:28px;font-weight:bold;padding:10px 16px;border-radius:6px;display:inline-block;margin:4px 0 12px}
.v-GO{background:#e3f6ea;color:#186a3b}.v-NO-GO{background:#fbe4e4;color:#a11}.v-GO_WITH_RISKS{background:#fff4d6;color:#8a5a00}
.st{font-weight:bold;text-transform:uppercase}.st-pass{color:#2a7}.st-fail{color:#c22}.st-warn{color:#b70}.st-skipped{color:#888}
td.ev{font-size:12px;max-width:520px}td.ev ul,td.fx ul{margin:0;padding-left:16px}td.fx{font-size:12px;max-width:380px}
.sim{background:#eef;color:#335;border-radius:3px;padding:0 4px;font-size:11px;margin-left:4px}
.banner{background:#eef;border:1px solid #ccd;padding:8px 12px;margin:8px 0}"""

VERDICT_TEXT = {"GO": "GO", "NO-GO": "NO-GO", "GO_WITH_RISKS": "GO WITH RISKS"}


def _val(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.4g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


_LONG_FLOAT = re.compile(r"(?<![\w.])(-?\d+\.\d{4,})(?![\w.])")


def _tidy(text: Any) -> str:
    """Evidence text from the checks, with raw floats rounded for reading (4.760278 -> 4.76):
    the JSON keeps the exact values."""
    return _LONG_FLOAT.sub(lambda m: f"{float(m.group(1)):.4g}", "" if text is None else str(text))


def _check_rows(d: dict) -> list[str]:
    out = ["<table id='checks'><tr><th class='l'>check</th><th class='l'>status</th><th>measured</th>"
           "<th>threshold</th><th class='l'>evidence</th><th class='l'>fix (predicted effect)</th></tr>"]
    for c in d["checks"]:
        sim = "<span class='sim'>simulated</span>" if c.get("simulated") else ""
        ev = "".join(f"<li>{_e(_tidy(x))}</li>" for x in c.get("evidence") or [])
        fx = "".join(f"<li><code>{_e(f['change'])}</code>: {_e(_tidy(f['effect']))}"
                     f"{(' <em>(cost: ' + _e(f.get('cost')) + ((', ' + _e(_tidy(f['price']))) if f.get('price') else '') + ')</em>') if f.get('cost') else ''}"
                     "</li>" for f in c.get("fixes") or [])
        out.append(f"<tr class='check' data-id='{_e(c['id'])}' data-status='{_e(c['status'])}'>"
                   f"<td class='l'><b>{_e(c['id'])}</b>{sim}<br><span class='muted'>{_e(c.get('title'))}</span></td>"
                   f"<td class='l st st-{_e(c['status'])}'>{_e(c['status'])}</td><td>{_e(_val(c.get('measured')))}</td>"
                   f"<td>{_e(_val(c.get('threshold')))}</td><td class='l ev'><ul>{ev}</ul></td>"
                   f"<td class='l fx'><ul>{fx}</ul></td></tr>")
    out.append("</table>")
    return out


def _marker(x: float, top: float) -> list[tuple[float, float]]:
    return [(x, 0.0), (x, top)]


def _plots(d: dict) -> list[str]:
    sec = d.get("sections") or {}
    parts: list[str] = []
    ln = sec.get("lengths")
    if ln:
        h = ln["histogram_total_tokens"]
        pts = [(float(e), float(c)) for e, c in zip(h["edges"], h["counts"])]
        top = max((c for _, c in pts), default=1.0) or 1.0
        series = [("requests", pts), ("max_model_len", _marker(ln["max_model_len"], top))]
        title = f"Request lengths vs max_model_len {ln['max_model_len']:,}"
        if ln.get("recommended_max_model_len"):
            series.append(("recommended", _marker(ln["recommended_max_model_len"], top)))
            title += f" (recommended {ln['recommended_max_model_len']:,})"
        parts.append(bench_svg.line_chart(series, title, "prompt + output budget (tokens)", "requests", step=True))
        turns = [t for t in ln.get("per_turn") or [] if t.get("count")]
        if len(turns) > 1:
            room = ln["prompt_room"]
            parts.append(bench_svg.line_chart(
                [("P50 prompt", [(t["turn"], t["p50"]) for t in turns]), ("P99 prompt", [(t["turn"], t["p99"]) for t in turns]),
                 ("room", [(turns[0]["turn"], room), (turns[-1]["turn"], room)])],
                f"Multi-turn growth: prompt tokens by turn (room {room:,})", "turn", "tokens", integer_x=True))
    load = sec.get("load")
    if load:
        tag = " (simulated)" if load.get("simulated") else ""
        tl = load.get("timeline") or []
        parts.append(bench_svg.line_chart(
            [("KV cache usage (%)", [(r["t"], None if r.get("kv_usage") is None else r["kv_usage"] * 100) for r in tl]),
             ("alert", [(tl[0]["t"], 90.0), (tl[-1]["t"], 90.0)] if tl else [])],
            "KV cache usage" + tag, "s", "%"))
        parts.append(bench_svg.line_chart(
            [("running", [(r["t"], r.get("running")) for r in tl]), ("waiting", [(r["t"], r.get("waiting")) for r in tl])],
            "Requests running / waiting" + tag, "s", "requests"))
        cdf = load.get("cdf") or {}
        if cdf:
            parts.append(bench_svg.line_chart([(k.upper(), [(x * 1e3, y) for x, y in pts]) for k, pts in cdf.items()],
                                              "Latency CDF" + tag, "ms", "fraction"))
    return parts


def render_html(d: dict) -> str:
    verdict = d["verdict"]
    plan = d.get("plan") or {}
    counts = d.get("counts") or {}
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; "
           "img-src data:\">",
           f"<title>kvplan preflight: {_e(VERDICT_TEXT.get(verdict, verdict))} – {_e(plan.get('model'))}</title>",
           f"<style>{_CSS}</style></head><body>",
           "<h1>kvplan preflight</h1>",
           f"<div id='verdict' class='verdict v-{_e(verdict)}'>{_e(VERDICT_TEXT.get(verdict, verdict))}</div>",
           f"<p>{_e(plan.get('headline'))}<br><span class='muted'>"
           + _e(", ".join(f"{n} {k}" for k, n in counts.items() if n)) + f"; exit code {_e(d.get('exit_code'))}"
           + (" (--strict)" if d.get("strict") else "") + "</span></p>"]
    if d.get("dry_run"):
        out.append("<div class='banner'><b>Dry run:</b> no server was started or measured. Load checks marked "
                   "<span class='sim'>simulated</span> come from kvplan's simulator, not from vLLM.</div>")
    for n in d.get("notes") or []:
        if d.get("dry_run") and str(n).lower().startswith("dry run"):
            continue  # the banner above says it once
        out.append(f"<p class='muted'>{_e(_tidy(n))}</p>")
    out.append("<h2>Checks</h2>")
    out += _check_rows(d)
    out.append("<h2>Plots</h2><div class='grid' id='plots'>")
    out += _plots(d)
    out.append("</div><h2>Plan</h2><table>")
    for k in ("model", "vllm_semantics", "max_model_len", "max_num_seqs", "block_size", "gpu_memory_utilization",
              "num_gpu_blocks", "kv_cache_tokens", "max_concurrency", "gpu_memory_fraction"):
        out.append(f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(_val(plan.get(k)))}</td></tr>")
    out.append("</table>")
    for line in plan.get("kv_log_lines") or []:
        out.append(f"<p><code>{_e(line)}</code></p>")
    if plan.get("serve_command_starts", True):
        out.append(f"<p>serve command: <code>{_e(plan.get('serve_command'))}</code></p>")
    else:
        out.append("<p>serve command: none &mdash; vLLM refuses this configuration (see the plan check, and "
                   "<code>kvplan plan</code> for one that starts)</p>")
    load = (d.get("sections") or {}).get("load")
    if load:
        out.append(f"<h2>Load test{' (simulated)' if load.get('simulated') else ''}</h2><p>{_e(load.get('source'))}</p>"
                   "<table><tr><th class='l'>metric</th>" + "".join(f"<th>{k} (ms)</th>" for k in ("p50", "p90", "p99", "max"))
                   + "</tr>")
        for m in ("ttft", "tpot", "itl", "e2e"):
            s = (load.get("latency_s") or {}).get(m) or {}
            out.append(f"<tr><td class='l'>{m.upper()}</td>" + "".join(
                f"<td>{'–' if s.get(k) is None else f'{s[k] * 1e3:,.1f}'}</td>" for k in ("p50", "p90", "p99", "max"))
                + "</tr>")
        out.append("</table>")
    if d.get("files"):
        out.append("<h2>Files</h2><ul>" + "".join(f"<li>{_e(k)}: <code>{_e(v)}</code></li>"
                                                  for k, v in d["files"].items()) + "</ul>")
    out.append("<p class='muted'>Check ids, thresholds and the verdict rules: docs/preflight.md. Exit code 0 GO, "
               "1 NO-GO; GO WITH RISKS exits 0 (1 with --strict).</p></body></html>")
    return "\n".join(out)
