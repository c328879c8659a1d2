"""Helpers shared by the lengths renderers (text, Markdown, HTML)."""
from __future__ import annotations

from ..workload.result import LengthsResult
from ..workload.stats import Histogram

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(h: Histogram) -> str:
    if not h.counts:
        return ""
    top = max(h.counts) or 1
    return "".join(" " if c == 0 else SPARK[min(len(SPARK) - 1, int(c / top * (len(SPARK) - 1) + 0.999))]
                   for c in h.counts)


def tokens_cell(n: int, narrow: bool = False) -> str:
    """A token count for a table cell: exact with separators, or, in a narrow terminal, millions
    as ``8.92M`` so that seven numbers and the row's label fit in 80 columns (the exact value
    is in --format json)."""
    if narrow and n >= 1_000_000:
        return f"{n / 1_000_000:,.2f}M" if n < 1_000_000_000 else f"{n / 1_000_000_000:,.2f}G"
    return f"{n:,}"


def pct(x: float) -> str:
    return f"{x * 100:.2f}%"


def counted_line(r: LengthsResult) -> str:
    c = r.counted_by
    total = sum(c.values()) or 1
    parts = [f"{k} {v:,} ({v / total:.0%})" for k, v in c.items() if v]
    out = r.output_counted_by
    oparts = [f"{k} {v:,}" for k, v in out.items() if v]
    return f"prompt tokens counted by: {', '.join(parts) or 'none'}; output tokens: {', '.join(oparts) or 'none'}"


def records_line(r: LengthsResult) -> str:
    rec = r.records
    skipped = ", ".join(f"{k} {v:,}" for k, v in sorted(rec.skipped.items())) or "none"
    extra = ""
    if rec.requests_skipped:
        extra = "; requests skipped inside used records: " + ", ".join(
            f"{k} {v:,}" for k, v in sorted(rec.requests_skipped.items()))
    files = ""
    if r.files.skipped:
        files = "; files skipped: " + ", ".join(f"{k} {v:,}" for k, v in sorted(r.files.skipped.items()))
    return (f"records read {rec.read:,}, used {rec.used:,}, skipped {sum(rec.skipped.values()):,} ({skipped}); "
            f"{rec.requests:,} requests analysed{extra}{files}")


def estimate_tag(r: LengthsResult) -> str:
    return " (ESTIMATE: some counts are characters-per-token estimates)" if r.estimated else ""


DIST_ROWS = (("prompt tokens", "prompt_tokens"), ("output tokens", "output_tokens"),
             ("max_tokens asked", "max_tokens"), ("prompt + output budget", "total_tokens"),
             ("prompt + output (final KV)", "final_tokens"))


def more_issues_line(r, shown: int) -> str:
    """The line after the first ``shown`` issues: how many more there are, and where each count is.
    The JSON's ``issues`` holds the first ``issues`` entries only; ``records.skipped`` counts all."""
    rest = r.issues_total - shown
    listed = len(r.issues)
    if listed >= r.issues_total:
        return f"… {rest:,} more (all {listed:,} in --format json's issues)"
    return (f"… {rest:,} more: {r.issues_total:,} in total; --format json lists the first {listed:,} "
            f"(--max-issues raises it) and records.skipped counts them all")
