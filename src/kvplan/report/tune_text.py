"""Terminal rendering of ``kvplan tune`` (rich)."""
from __future__ import annotations

from typing import Optional

from ..sim.tune import TuneResult
from .tune_common import config_cell, headline, pruned_text, seconds, slo_cell, title, verdict


def render_table(r: TuneResult, top: int = 10, console: Optional[object] = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    con = console or Console()
    w = r.winner
    body = escape(verdict(r))
    if w is not None:
        body += "\n" + escape(w.serve_command)
    con.print(Panel(body, title=f"kvplan tune: {title(r)}",
                    border_style="green" if w else "red"))
    con.print(escape(headline(r)))
    con.print(escape(pruned_text(r)))
    lat = r.pareto_latency
    t = Table(title=f"Top {min(top, len(r.rows))} of {len(r.rows)} (★ = Pareto front: tok/s/GPU vs {lat})")
    for col, just in (("#", "right"), ("configuration", "left"), ("seqs", "right"), ("batched", "right"),
                      ("len", "right"), ("util", "right"), ("KV", "left"), ("good req/s/GPU", "right"),
                      ("tok/s/GPU", "right"), ("TTFT p99", "right"), ("TPOT p99", "right"), ("E2E p99", "right"),
                      ("preempt", "right"), ("SLO", "left")):
        t.add_column(col, justify=just)
    for row in r.rows[:top]:
        f = row.flags
        t.add_row(f"{row.rank}{'★' if row.pareto else ''}", escape(config_cell(row)), str(f["max_num_seqs"]),
                  str(f["max_num_batched_tokens"]), str(f["max_model_len"]), f"{f['gpu_memory_utilization']:g}",
                  escape(str(f["kv_cache_dtype"])), f"{row.goodput_per_gpu:.3g}",
                  f"{row.throughput['output_tokens_per_s_per_gpu']:,.0f}", seconds(row.metric("ttft_p99")),
                  seconds(row.metric("tpot_p99")), seconds(row.metric("e2e_p99")), str(row.preemptions),
                  escape(slo_cell(row)), style=None if row.meets_slo else "dim")
    if r.rows:
        con.print(t)
    if r.pruned.examples:
        for kind, text in r.pruned.examples:
            con.print(f"[bold]pruned {escape(kind)}[/bold] ({dict(r.pruned.by_reason).get(kind, 0)}): {escape(text)}")
    for n in r.notes:
        con.print(f"• {escape(n)}")
