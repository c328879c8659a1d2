"""Terminal rendering of ``kvplan tune`` (rich)."""
from __future__ import annotations

from typing import Optional

from ..tune.search import TuneResult
from .tune_common import config_cell, headline, merge_alike, pruned_text, seconds, slo_cell, title, verdict


def render_table(r: TuneResult, top: int = 10, console: Optional[object] = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    con = console or Console()
    if _is_sizing(r):
        return _render_sizing(r.to_dict(), con)
    w = r.winner
    body = escape(verdict(r))
    if w is not None:
        body += "\n" + escape(w.serve_command)
    con.print(Panel(body, title=f"kvplan tune: {title(r)}",
                    border_style="green" if w else "red"))
    con.print(escape(headline(r)))
    con.print(escape(pruned_text(r)))
    lat = r.pareto_latency
    from rich import box

    # A narrow terminal gets the columns that decide the ranking; --format json/markdown has all.
    wide = con.width >= 150
    narrow = con.width < 100
    t = Table(title=f"Top {min(top, len(r.rows))} of {len(r.rows)} (★ = Pareto front: tok/s/GPU vs {lat})",
              box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, pad_edge=not narrow)
    cols = [("#", "right", lambda row: f"{row.rank}{'★' if row.pareto else ''}"),
            ("configuration", "left", lambda row: escape(config_cell(row))),
            ("seqs", "right", lambda row: str(row.flags["max_num_seqs"]))]
    if wide:
        cols += [("batched", "right", lambda row: str(row.flags["max_num_batched_tokens"])),
                 ("len", "right", lambda row: str(row.flags["max_model_len"])),
                 ("util", "right", lambda row: f"{row.flags['gpu_memory_utilization']:g}")]
    cols += [("KV", "left", lambda row: escape(str(row.flags["kv_cache_dtype"]))),
             ("good req/s/GPU" if wide else "good/GPU", "right", lambda row: f"{row.goodput_per_gpu:.3g}")]
    if wide:
        cols += [("tok/s/GPU", "right", lambda row: f"{row.throughput['output_tokens_per_s_per_gpu']:,.0f}")]
    cols += [("TTFT p99", "right", lambda row: seconds(row.metric("ttft_p99"))),
             ("TPOT p99", "right", lambda row: seconds(row.metric("tpot_p99")))]
    if wide:
        cols += [("E2E p99", "right", lambda row: seconds(row.metric("e2e_p99"))),
                 ("preempt", "right", lambda row: str(row.preemptions))]
    cols += [("SLO", "left", lambda row: escape(slo_cell(row)))]
    # The configuration wraps between its words but never below its longest one (the GPU name):
    # at 80 columns rich would otherwise squeeze it to nothing.
    shown = r.rows[:top]
    cfg_min = max((len(word) for row in shown for word in config_cell(row).split()), default=13)
    for name, just, _ in cols:
        t.add_column(name, justify=just, no_wrap=name != "configuration",
                     min_width=cfg_min if name == "configuration" else None)
    groups = merge_alike(r.rows[:top], [c for name, _, c in cols if name != "#"])
    merged_notes = []
    for first, alike, differs in groups:
        cells = [cell(first) for _, _, cell in cols]
        if alike:
            cells[0] = f"{first.rank}{'★' if first.pareto else ''} +{len(alike)}"
            merged_notes.append(f"#{first.rank} stands for {', '.join('#' + str(a.rank) for a in alike)}: they print "
                                f"alike and differ in {differs}")
        t.add_row(*cells, style=None if first.meets_slo else "dim")
    if r.rows:
        con.print(t)
    for n in merged_notes:
        con.print(f"• {escape(n)}")
    per_type = r.per_gpu_type()
    if len(per_type) > 1:
        for g, row in per_type.items():
            con.print(f"• best on {escape(g)}: {escape(config_cell(row))} ({escape(slo_cell(row))})")
    if r.pruned.examples:
        for kind, text in r.pruned.examples:
            con.print(f"[bold]pruned {escape(kind)}[/bold] ({dict(r.pruned.by_reason).get(kind, 0)}): {escape(text)}")
    for n in r.notes:
        con.print(f"• {escape(n)}")
    from .sim_common import clock_line

    for gpu, clock in r.clock.items():
        con.print(f"• clock on {escape(gpu)}: {escape(clock_line({'clock': clock} if 'validation' in clock and clock.get('kernel_tables') else {'source': clock.get('source', ''), 'fit': clock.get('model') == 'calibrated profile'}))}")


def _render_sizing(d: dict, con) -> None:
    """``--gpus auto``: the fewest GPUs per GPU type, then the winner."""
    from rich import box
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    from . import sizing_common as sc

    w = d.get("winner")
    body = escape(sc.verdict(d)) + ("\n" + escape(w["serve_command"]) if w else "")
    con.print(Panel(body, title="kvplan tune: " + ("HOW MANY GPUS" if w else "NO FLEET CARRIES THE RATE"),
                    border_style="green" if w else "red"))
    con.print(escape(sc.headline(d)))
    t = Table(title="per GPU type (the fewest GPUs that carry the rate within the SLO)", box=box.SIMPLE_HEAD)
    # a narrow terminal keeps the answer's columns (the JSON and Markdown have all)
    keep = range(len(sc.HEADERS)) if con.width >= 150 else (0, 1, 2, 4, 6, 7, 8)
    for i in keep:
        h = sc.HEADERS[i]
        t.add_column(h, justify="left" if h in ("GPU type", "replicas", "flags", "why not") else "right",
                     no_wrap=h not in ("flags", "why not", "capacity at SLO"))
    for row in sc.rows(d):
        t.add_row(*(escape(row[i]) for i in keep))
    con.print(t)
    for s in d.get("per_gpu_type") or ():
        if not s.get("gpus"):
            con.print(f"• {escape(s['gpu'])}: {escape(s.get('reason', ''))}")
        elif con.width < 150:
            f = s["flags"]
            con.print(f"• {escape(s['gpu'])}: max_num_seqs {f['max_num_seqs']}, KV {escape(str(f['kv_cache_dtype']))}, "
                      f"gpu_memory_utilization {f['gpu_memory_utilization']:g}")
    launch = (w or {}).get("launch") or {}
    if launch.get("commands"):
        con.print(f"launch ({escape(launch.get('note', ''))}):")
        for where, cmd in launch["commands"][:3]:
            con.print(f"  # {escape(where)}\n  {escape(cmd)}", soft_wrap=True)
    for n in d.get("notes") or ():
        con.print(f"• {escape(n)}")


def _is_sizing(r) -> bool:
    from ..tune.sizing import Sizing

    return isinstance(r, Sizing)
