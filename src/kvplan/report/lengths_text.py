"""Terminal rendering of ``kvplan lengths`` with rich."""
from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from ..workload.result import LengthsResult
from .lengths_common import (DIST_ROWS, counted_line, estimate_tag, more_issues_line, pct, records_line, sparkline,
                             tokens_cell)


def render_table(r: LengthsResult, console: Console | None = None) -> None:
    con = console or Console()
    # Below 100 columns: borderless tables, and the coverage table shows shares only (the counts
    # are in --format json), so no cell wraps into two lines.
    narrow = con.width < 100

    def Table(*args, **kw):  # noqa: N802 - the tables of this view, one style
        from rich import box
        from rich.table import Table as _Table

        return _Table(*args, box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, **kw)

    tok = r.inputs.get("tokenizer") or {}
    con.print(Text(f"kvplan lengths — {len(r.inputs['files'])} input(s); tokenizer: {tok.get('source', 'none')}",
                   style="bold"))
    con.print(Text(records_line(r)))
    con.print(Text(counted_line(r), style="bold yellow" if r.estimated else ""))
    for note in r.notes:
        if note.startswith("ESTIMATE"):
            con.print(Text(note, style="bold yellow"))
    if r.issues:
        lines = "\n".join(f"{i.file}:{i.line}: {i.message} [{i.reason}]" if i.line else
                          f"{i.file}: {i.message} [{i.reason}]" for i in r.issues[:10])
        more = f"\n{more_issues_line(r, 10)}" if r.issues_total > 10 else ""
        con.print(Panel(lines + more, title="skipped", border_style="yellow"))
    t = Table(title="token lengths" + estimate_tag(r))
    # Below 100 columns the mean goes (--format json has it): every number keeps its width.
    stats_cols = ("P50", "P90", "P95", "P99", "P99.9", "max")
    for col in ("", "count") + (() if narrow else ("mean",)) + stats_cols:
        t.add_column(col, justify="right" if col else "left", no_wrap=bool(col), min_width=None if col else 13)
    for label, key in DIST_ROWS:
        p = getattr(r, key)
        if p.count:
            t.add_row(label, tokens_cell(p.count, narrow), *(() if narrow else (f"{p.mean:,.0f}",)),
                      *(tokens_cell(getattr(p, k), narrow) for k in ("p50", "p90", "p95", "p99", "p999", "max")))
    con.print(t)
    for name, label in (("prompt_tokens", "prompt tokens"), ("total_tokens", "prompt + budget")):
        h = r.histograms.get(name)
        if h and h.counts:
            con.print(Text(f"{label:>16} 0 {sparkline(h)} {h.edges[-1]:,}"))
    rec = r.recommendation
    body = Text()
    body.append(f"--max-model-len {rec.max_model_len:,}\n" if rec.max_model_len else "--max-model-len: n/a\n",
                style="bold green")
    body.append(rec.max_model_len_reason + "\n\n")
    body.append(f"max_tokens {rec.max_tokens:,}\n" if rec.max_tokens else "max_tokens: n/a\n", style="bold green")
    body.append(rec.max_tokens_reason + "\n\n")
    hist = (f"keep the last {rec.history_turns} turn(s)" if rec.history_turns else "history limit: none needed") + \
        (f", at most {rec.history_tokens:,} prompt tokens" if rec.history_tokens else "")
    body.append(hist + "\n", style="bold green")
    body.append(rec.history_reason)
    if rec.outliers:
        body.append(f"\n\noutliers: {rec.outliers:,} request(s) above the model's limit\n", style="bold yellow")
        body.append(rec.outliers_reason)
    con.print(Panel(body, title=f"recommendations (P{rec.percentile:g})" + estimate_tag(r), border_style="green"))
    if r.coverage:
        cov = Table(title="coverage: what vLLM 0.33 does with this traffic at each max_model_len"
                    + (" (share of requests)" if narrow else ""))
        for col in ("max_model_len", "", "rejected", "clamped", "truncated", "fit"):
            cov.add_column(col, justify="right", no_wrap=True)
        for c in r.coverage:
            if narrow:
                cov.add_row(f"{c.max_model_len:,}", c.label, *(f"{x:.1%}" for x in (
                    c.rejected_share, c.clamped_share, c.truncated_share, c.fits_share)))
                continue
            cov.add_row(f"{c.max_model_len:,}", c.label, f"{c.rejected:,} ({pct(c.rejected_share)})",
                        f"{c.clamped:,} ({pct(c.clamped_share)})", f"{c.truncated:,} ({pct(c.truncated_share)})",
                        f"{c.fits:,} ({pct(c.fits_share)})")
        con.print(cov)
        con.print(Text("rejected: prompt leaves no room for output, or max_tokens > max_model_len (HTTP 400). "
                       "clamped: prompt + max_tokens > max_model_len; vLLM lowers max_tokens to the room left (older "
                       "vLLM rejected these). truncated: the logged answer would not have fit.", style="dim"))
    if r.per_turn and len(r.per_turn) > 1:
        g = Table(title="context growth per turn (prompt tokens)")
        for col in ("turn", "requests", "P50", "P90", "P99", "max"):
            g.add_column(col, justify="right")
        for row in r.per_turn:
            g.add_row(f"≥{row.turn}" if row.open_ended else str(row.turn), f"{row.count:,}", f"{row.p50:,}",
                      f"{row.p90:,}", f"{row.p99:,}", f"{row.max:,}")
        con.print(g)
    if r.conversations:
        c = r.conversations
        con.print(Text(f"conversations: {c.count:,}; turns P50 {c.turns.p50} / P99 {c.turns.p99} / max {c.turns.max}; "
                       f"{c.fit_share:.2%} fit the recommended max_model_len at every turn"))
    if r.block_waste:
        w = Table(title="block-size waste (internal fragmentation at final length)")
        for col in ("block size", "mean allocated", "mean wasted", "share", "per request", "GiB/GPU at full cache"):
            w.add_column(col, justify="right", no_wrap=not col.startswith(("mean", "GiB")))
        for row in r.block_waste:
            w.add_row(str(row.block_size), f"{row.mean_allocated_tokens:,.1f}", f"{row.mean_waste_tokens:,.1f}",
                      pct(row.waste_share),
                      f"{row.waste_bytes_per_request / (1 << 20):,.2f} MiB" if row.waste_bytes_per_request is not None else "-",
                      f"{row.waste_gib_full_cache:.2f}" if row.waste_gib_full_cache is not None else "-")
        con.print(w)
    if r.arrivals:
        a = r.arrivals
        line = (f"arrivals: {a.requests:,} timed requests over {a.duration_s:,.0f} s; mean {a.mean_rps:.2f}/s, peak "
                f"{a.peak_rps_1s}/s (1 s), {a.peak_rps_60s:.2f}/s (60 s), P99 {a.p99_rps_1s}/s")
        if a.concurrency_peak is not None:
            line += f"; in flight: peak {a.concurrency_peak}, P99 {a.concurrency_p99}, mean {a.concurrency_mean}"
        con.print(Text(line))
    if r.finish_reasons:
        con.print(Text("finish reasons: " + ", ".join(f"{k} {v:,}" for k, v in sorted(r.finish_reasons.items()))))
    for note in r.notes:
        if not note.startswith("ESTIMATE"):
            con.print(Text(f"note: {note}", style="dim"))
