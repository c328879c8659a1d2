"""Terminal rendering of ``kvplan preflight`` (rich; readable in CI logs): the verdict, one row
per check, then each failure or warning with its evidence and fixes. Reads
``PreflightResult.to_dict()`` only."""
from __future__ import annotations

from .preflight_html import VERDICT_TEXT, _val

_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "skipped": "dim"}
_VERDICT_STYLE = {"GO": "bold green", "NO-GO": "bold red", "GO_WITH_RISKS": "bold yellow"}


def render_table(d: dict, console=None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = console or Console()
    plan = d.get("plan") or {}
    verdict = d["verdict"]
    dry = " (dry run: load simulated, no server measured)" if d.get("dry_run") else ""
    con.print(f"[{_VERDICT_STYLE.get(verdict, 'bold')}]kvplan preflight: {VERDICT_TEXT.get(verdict, verdict)}[/]"
              f"{escape(dry)}")
    con.print(escape(str(plan.get("headline", ""))))
    table = Table(show_lines=False)
    for col in ("check", "status", "measured", "threshold"):
        table.add_column(col, overflow="fold")
    for c in d["checks"]:
        sim = " (sim)" if c.get("simulated") else ""
        why = "" if c["status"] != "skipped" or not c.get("evidence") else c["evidence"][0]
        table.add_row(escape(c["id"] + sim), f"[{_STYLE.get(c['status'], '')}]{escape(c['status'])}[/]",
                      escape(why or _val(c.get("measured"))), escape(_val(c.get("threshold"))))
    con.print(table)
    for c in d["checks"]:
        if c["status"] not in ("fail", "warn"):
            continue
        con.print(f"\n[{_STYLE[c['status']]}]{escape(c['status'].upper())} {escape(c['id'])}[/]: "
                  f"{escape(str(c.get('title', '')))}")
        for e in (c.get("evidence") or [])[:4]:
            con.print(f"  · {escape(e)}")
        for i, f in enumerate(c.get("fixes") or [], 1):
            cost = f.get("cost") or ""
            cost += f" ({f['price']})" if f.get("price") else ""
            con.print(f"  fix {i}: [bold]{escape(f['change'])}[/] → {escape(f['effect'])}"
                      + (f" [dim](cost: {escape(cost)})[/]" if cost else ""))
    con.print()
    for n in d.get("notes") or []:
        con.print(f"[dim]{escape(n)}[/]")
    for k, v in (d.get("files") or {}).items():
        con.print(f"[dim]{escape(k)}: {escape(str(v))}[/]")
    con.print(f"verdict {VERDICT_TEXT.get(verdict, verdict)}: exit code {d.get('exit_code')}")
