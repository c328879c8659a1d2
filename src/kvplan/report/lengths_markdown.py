"""Markdown rendering of ``kvplan lengths`` (for PRs and runbooks)."""
from __future__ import annotations

from ..workload.result import LengthsResult
from ._markdown import cell, code
from .lengths_common import DIST_ROWS, counted_line, estimate_tag, pct, records_line, sparkline


def render_markdown(r: LengthsResult) -> str:
    rec = r.recommendation
    out = [f"# kvplan lengths{estimate_tag(r)}", "", records_line(r) + ".", "", counted_line(r) + ".", ""]
    if r.notes:
        out += [f"> {cell(n)}" for n in r.notes] + [""]
    out += ["## Recommendations", "", "| setting | value | why |", "|---|---:|---|",
            f"| `--max-model-len` | {rec.max_model_len or 'n/a'} | {cell(rec.max_model_len_reason)} |",
            f"| `max_tokens` | {rec.max_tokens or 'n/a'} | {cell(rec.max_tokens_reason)} |",
            f"| history (turns) | {rec.history_turns or 'none'} | {cell(rec.history_reason)} |",
            f"| history (tokens) | {rec.history_tokens or 'n/a'} | max_model_len − max_tokens |"]
    if rec.outliers:
        out.append(f"| outliers | {rec.outliers:,} | {cell(rec.outliers_reason)} |")
    out.append("")
    out += ["## Token lengths", "", "| | count | mean | P50 | P90 | P95 | P99 | P99.9 | max |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, key in DIST_ROWS:
        p = getattr(r, key)
        if p.count:
            out.append(f"| {label} | {p.count:,} | {p.mean:,.0f} | {p.p50:,} | {p.p90:,} | {p.p95:,} | {p.p99:,} | "
                       f"{p.p999:,} | {p.max:,} |")
    h = r.histograms.get("prompt_tokens")
    if h and h.counts:
        out += ["", f"Prompt tokens, 0 … {h.edges[-1]:,}: `{sparkline(h)}`"]
    if r.coverage:
        out += ["", "## Coverage at each max_model_len (vLLM 0.33)", "",
                "| max_model_len | | rejected | clamped | truncated | fit |", "|---:|---|---:|---:|---:|---:|"]
        for c in r.coverage:
            out.append(f"| {c.max_model_len:,} | {c.label} | {c.rejected:,} ({pct(c.rejected_share)}) | {c.clamped:,} "
                       f"({pct(c.clamped_share)}) | {c.truncated:,} ({pct(c.truncated_share)}) | {c.fits:,} "
                       f"({pct(c.fits_share)}) |")
    if len(r.per_turn) > 1:
        out += ["", "## Context growth per turn", "", "| turn | requests | P50 | P90 | P99 | max |",
                "|---:|---:|---:|---:|---:|---:|"]
        for t in r.per_turn:
            out.append(f"| {'≥' if t.open_ended else ''}{t.turn} | {t.count:,} | {t.p50:,} | {t.p90:,} | {t.p99:,} | "
                       f"{t.max:,} |")
    if r.block_waste:
        out += ["", "## Block-size waste", "", "| block size | mean allocated | mean wasted | share | GiB/GPU full cache |",
                "|---:|---:|---:|---:|---:|"]
        for w in r.block_waste:
            gib = f"{w.waste_gib_full_cache:.2f}" if w.waste_gib_full_cache is not None else "-"
            out.append(f"| {w.block_size} | {w.mean_allocated_tokens:,.1f} | {w.mean_waste_tokens:,.1f} | "
                       f"{pct(w.waste_share)} | {gib} |")
    if r.arrivals:
        a = r.arrivals
        out += ["", f"Arrivals: {a.requests:,} timed requests over {a.duration_s:,.0f} s, mean {a.mean_rps:.2f}/s, "
                    f"peak {a.peak_rps_1s}/s." + (f" In flight: peak {a.concurrency_peak}, P99 {a.concurrency_p99}."
                                                  if a.concurrency_peak is not None else "")]
    if r.issues:
        out += ["", "## Skipped (first ones)", ""]
        out += [f"- `{code(i.file)}:{i.line}` {cell(i.message)} ({i.reason})" for i in r.issues[:20]]
    return "\n".join(out) + "\n"
