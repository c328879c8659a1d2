"""Markdown view of ``kvplan simulate`` (for issues, PRs, READMEs)."""
from __future__ import annotations

from ._markdown import cell, row
from .sim_common import LAT_COLS, capacity_rows, check_rows, headline, latency_rows


def render_markdown(d: dict) -> str:
    out = ["## kvplan simulate", ""]
    out += ["| | |", "|---|---|"] + [row(kv) for kv in headline(d)]
    out += ["", "### Predicted latency", "",
            "| metric | " + " | ".join(LAT_COLS) + " | n |", "|---" * (len(LAT_COLS) + 2) + "|"]
    out += [row(r) for r in latency_rows(d)]
    rows = check_rows(d)
    if rows:
        out += ["", "### SLO", "", "| gate | predicted | limit | |", "|---|---|---|---|"]
        out += [row(r) for r in rows]
    cap = capacity_rows(d)
    if cap:
        out += ["", "### Capacity boundary", "", "| max_model_len | max concurrency | starts | max QPS at SLO |",
                "|---|---|---|---|"] + [row(r) for r in cap]
    from .sim_bench import bench_block

    block = bench_block(d)
    if block:
        out += ["", "### As `vllm bench serve` would print it", "", "```text", *block, "```"]
    for note in d.get("notes") or ():
        out += ["", f"_Note: {cell(note)}_"]
    return "\n".join(out) + "\n"
