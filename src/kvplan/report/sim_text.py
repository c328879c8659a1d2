"""Terminal view of ``kvplan simulate`` (rich): headline, latency table, SLO checks, capacity."""
from __future__ import annotations

from typing import Optional

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .sim_common import LAT_COLS, capacity_rows, check_rows, headline, latency_rows, verdict_word


def render_table(d: dict, console: Optional[Console] = None) -> None:
    c = console or Console()
    head = Table.grid(padding=(0, 2))
    for k, v in headline(d):
        head.add_row(k, Text(v))
    passed = d["verdict"]["passed"]
    word = verdict_word(d)
    title = "kvplan simulate" + (f": {word}" if word else "")
    c.print(Panel(head, title=title, border_style="green" if passed else "yellow" if d["verdict"].get("state") == "not_judged" else "red", expand=False))
    lat = Table(title="predicted latency", show_edge=False)
    lat.add_column("metric", no_wrap=True)
    for col in LAT_COLS + ("n",):
        lat.add_column(col, justify="right")
    for row in latency_rows(d):
        lat.add_row(*row)
    c.print(lat)
    rows = check_rows(d)
    if rows:
        t = Table(title="SLO", show_edge=False)
        for col in ("gate", "predicted", "limit", ""):
            t.add_column(col)
        for r in rows:
            t.add_row(*r[:3], Text(r[3], style="green" if r[3] == "ok" else "red"))
        c.print(t)
    cap = capacity_rows(d)
    if cap:
        t = Table(title="capacity boundary (max sustainable QPS at the SLO)", show_edge=False)
        for col in ("max_model_len", "max concurrency", "starts", "max QPS"):
            t.add_column(col, justify="right")
        for r in cap:
            t.add_row(*r)
        c.print(t)
    from .sim_bench import bench_block

    for line in bench_block(d):
        c.print(Text(line), highlight=False)
    for note in d.get("notes") or ():
        c.print(Text(f"note: {note}", style="dim"))
