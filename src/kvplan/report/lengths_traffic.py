"""The ``traffic`` section of ``kvplan plan --requests FILE`` (table and Markdown)."""
from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from ..workload.traffic import TrafficFit


def _lines(t: TrafficFit) -> list[str]:
    rec = f"{t.recommended_max_model_len:,}" if t.recommended_max_model_len else "n/a"
    out = [f"max_model_len {t.plan_max_model_len:,} (recommended for this traffic: {rec}): "
           f"{'holds it' if t.max_model_len_ok else 'TOO SHORT'}; at it, {t.rejected_share:.2%} of requests are "
           f"rejected, {t.clamped_share:.2%} clamped, {t.truncated_share:.2%} truncated",
           f"capacity at the real length mix: {t.requests_fit_at_mix:,.1f} requests "
           f"({t.mean_blocks_per_request:,.1f} blocks of {t.block_size} per request on average, {t.num_gpu_blocks:,} "
           f"blocks); at P99 length: {t.requests_fit_at_p99:,.1f}; worst case (every request at max_model_len, vLLM's "
           f"line): {t.requests_fit_worst_case:,.1f}"]
    if t.needed_concurrency is not None:
        out.append(f"the traffic needs: {t.needed_concurrency} in flight at peak, {t.needed_concurrency_p99} at P99 "
                   f"(from the {t.needed_concurrency_source}); max_num_seqs {t.max_num_seqs}: "
                   f"{'FITS' if t.fits else 'DOES NOT FIT'}")
    else:
        out.append("the traffic's concurrency is not measured (the log has no request durations)")
    out.append(f"block-size waste at block {t.block_size}: {t.block_waste_share:.2%} of allocated KV "
               f"({t.block_waste_gib_full_cache:.2f} GiB per GPU when the cache is full)")
    counted = ", ".join(f"{k} {v:,}" for k, v in t.counted_by.items() if v)
    skipped = ", ".join(f"{k} {v:,}" for k, v in t.records_skipped.items()) or "none"
    out.append(f"from {t.records_used:,} records (prompt tokens counted by {counted}; skipped: {skipped})")
    out += [f"note: {n}" for n in t.notes]
    return out


def render_traffic_table(t: TrafficFit, console: Console | None = None) -> None:
    con = console or Console()
    style = "green" if t.fits else "red" if t.fits is False else "cyan"
    con.print(Panel(Text("\n".join(_lines(t))), title="traffic (--requests)", border_style=style))


def render_traffic_markdown(t: TrafficFit) -> str:
    return "\n## Traffic (--requests)\n\n" + "\n".join(f"- {line}" for line in _lines(t)) + "\n"
