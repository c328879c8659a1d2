"""Terminal rendering of a plan with rich: verdict, memory bar, KV figures, capacity, command."""
from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..memory.result import PlanResult
from ._common import (
    borderline_text,
    headline,
    human_bytes,
    layout_fit_text,
    memory_segments,
    serve_flag_lines,
    run_block,
    verdict_title,
    what_if_caption,
)

COLORS = {"weights": "blue", "LoRA adapters": "bright_blue", "draft model": "bright_magenta", "non-torch": "magenta",
          "activation peak": "yellow", "CUDA graphs": "cyan", "KV cache": "green", "unused budget": "bright_black"}


def _bar(r: PlanResult, width: int = 60) -> Text:
    total = r.memory.total_gib_per_gpu or 1
    text = Text()
    for name, value in memory_segments(r):
        color = COLORS.get(name, "white")
        n = int(round(value / total * width))
        if n:
            text.append("█" * n, style=color)
    text.append("\n")
    for name, value in memory_segments(r):
        color = COLORS.get(name, "white")
        if value > 0.005:
            text.append("■ ", style=color)
            text.append(f"{name} {value:.2f}  ")
    return text


def _verdict(r: PlanResult) -> Panel:
    border = borderline_text(r)
    if r.startup.ok:
        body = Text("vLLM starts with this configuration.", style="bold green")
        if border:
            body.append(f"\n\n{border}", style="yellow")
        return Panel(body, title=verdict_title(r), border_style="yellow" if border else "green")
    body = Text()
    if border:
        body.append("The estimate says vLLM refuses to start, printing:\n\n", style="bold yellow")
    else:
        body.append("vLLM refuses to start. It would print:\n\n", style="bold red")
    body.append(r.startup.error or "", style="red")
    if border:
        body.append(f"\n\n{border}", style="yellow")
    if r.startup.suggested_max_model_len:
        body.append(f"\n\nLargest max_model_len that fits: {r.startup.suggested_max_model_len:,}", style="bold")
    fit = layout_fit_text(r)
    if fit:
        body.append(f"\n\n{fit}", style="bold")
    return Panel(body, title=verdict_title(r), border_style="yellow" if border else "red")


def render_table(r: PlanResult, compact: bool = False, console: Console | None = None, traffic=None) -> None:
    """Draw the plan on ``console``; ``traffic`` (a ``TrafficFit`` from ``--requests``) adds its section."""
    con = console or Console()
    _plan_table(r, compact, con)
    if traffic is not None:
        from .lengths_traffic import render_traffic_table

        render_traffic_table(traffic, con)


def _plan_table(r: PlanResult, compact: bool, con: Console) -> None:
    con.print(Text(headline(r), style="bold"))
    con.print(Text(f"{r.model.summary}; {r.model.params / 1e9:.2f}B params", style="dim"))
    con.print(_verdict(r))
    k, m = r.kv, r.memory
    con.print(Panel("\n".join(k.log_lines), title="KV cache line, as vLLM logs it", border_style="cyan"))
    figures = Table(show_header=False, box=None, pad_edge=False)
    figures.add_column(style="bold")
    figures.add_column(justify="right")
    figures.add_row("Available KV cache memory / GPU", f"{m.available_kv_cache_gib:.2f} GiB ({m.source})")
    figures.add_row("KV bytes per token / GPU", f"{k.bytes_per_token_per_gpu:,} B")
    figures.add_row("KV bytes per token, whole model", f"{k.bytes_per_token_total:,} B")
    figures.add_row("Block size / bytes per block", f"{k.block_size} tokens / {human_bytes(k.bytes_per_block)}")
    figures.add_row("GPU blocks (usable)", f"{k.num_gpu_blocks:,} ({k.usable_blocks:,})")
    figures.add_row("KV cache tokens", f"{k.kv_cache_tokens:,}")
    figures.add_row(f"Max concurrency at {k.max_concurrency_for_tokens:,} tokens", f"{k.max_concurrency:.2f}x")
    con.print(figures)
    for line in serve_flag_lines(r):
        con.print(Text(line))
    run = run_block(r)
    if compact:
        if run:
            con.print(Text(run[1], style="bold cyan"))
        return
    con.print(Panel(_bar(r), title=f"memory per GPU ({m.total_gib_per_gpu:.2f} GiB as CUDA reports it)"))
    if r.naive:
        n = r.naive
        myth = Text()
        myth.append(f"{n.formula} → {human_bytes(n.claimed_bytes)}", style="strike")
        myth.append(f"   vLLM really: {human_bytes(n.exact_bytes)} for one {k.max_concurrency_for_tokens:,}-token "
                    f"request ({n.ratio}x less)\n", style="bold")
        for why in n.why:
            myth.append(f"• {why}\n")
        con.print(Panel(myth, title="the blog formula, answered"))
    cap = Table(title="capacity: context length → concurrent requests")
    for col in ("max_model_len", "max concurrency", "KV tokens", "starts"):
        cap.add_column(col, justify="right")
    if r.parallel.data_parallel_size > 1:
        cap.add_column(f"× {r.parallel.data_parallel_size} replicas", justify="right")
    for row in r.capacity_table:
        cells = [f"{row.max_model_len:,}", f"{row.max_concurrency:.2f}x", f"{row.kv_cache_tokens:,}",
                 "[green]yes[/]" if row.fits else "[red]no[/]"]
        if r.parallel.data_parallel_size > 1:
            cells.append(f"{row.replicas_concurrency:.2f}x")
        cap.add_row(*cells)
    con.print(cap)
    if r.what_if:
        wi = Table(title=what_if_caption(r))
        for col in ("change", "starts", "KV GiB/GPU", "KV tokens", "concurrency"):
            wi.add_column(col, justify="right")
        for w in r.what_if:
            wi.add_row(w.change, "yes" if w.ok else "no", f"{w.available_kv_cache_gib:.2f}", f"{w.kv_cache_tokens:,}",
                       f"{w.max_concurrency:.2f}x")
        con.print(wi)
    if run:
        title, command, yaml = run
        parts = [Text(command, style="bold cyan"), Text(""), Text(yaml.rstrip(), style="dim")]
        con.print(Panel(Group(*parts), title=title))
    else:
        con.print(Text("No serve command: this configuration fails and no other layout kvplan tried starts it.",
                       style="bold red"))
    if r.multi_node and r.serve_command_starts:
        mn = r.multi_node
        con.print(Panel(f"{mn.note}\n\nhead:   {' '.join(mn.head_command)}\nworker: {' '.join(mn.worker_command)}\n"
                        f"serve:  {' '.join(mn.serve_command)}", title=f"multi-node: {mn.nodes} nodes"))
    dl = getattr(r, "dp_launch", None)
    if dl is not None and dl.nodes > 1 and r.serve_command_starts:
        from ..memory.launch import display

        cmds = "\n".join(f"# {where}\n{display(list(argv))}" for where, argv in dl.commands[:3])
        more = f"\n# ... {len(dl.commands) - 3} more node(s) alike" if len(dl.commands) > 3 else ""
        con.print(Panel(f"{dl.note}\n\n{cmds}{more}", title=f"data parallel: {dl.replicas} replicas on {dl.nodes} nodes"))
    if r.measured:
        meas = Table(title=f"measured (from {r.measured.get('log')})")
        meas.add_column("figure")
        meas.add_column("log", justify="right")
        meas.add_column("kvplan", justify="right")
        meas.add_row("num_gpu_blocks", str(r.measured.get("num_gpu_blocks_implied")), str(k.num_gpu_blocks))
        meas.add_row("KV cache tokens", str(r.measured.get("kv_cache_tokens")),
                     str(r.measured.get("replayed_kv_cache_tokens", k.kv_cache_tokens)))
        meas.add_row("max concurrency", str(r.measured.get("max_concurrency")),
                     str(r.measured.get("replayed_max_concurrency", k.max_concurrency)))
        con.print(meas)
    for w in r.startup.warnings:
        con.print(Text(f"warning: {w}", style="yellow"))
    for note in r.notes:
        con.print(Text(f"note: {note}", style="dim"))
