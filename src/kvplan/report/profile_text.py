"""Terminal rendering of ``kvplan profile``: measured versus planned, one row per check (rich)."""
from __future__ import annotations

from typing import IO, TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the result type only: report sits below ops (tests/test_layering.py)
    from ..ops.profile import ProfileResult

_STYLE = {"pass": "green", "fail": "bold red", "skipped": "yellow"}


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}"
    return str(value)


def render_table(r: ProfileResult, file: Optional[IO[str]] = None, width: Optional[int] = None,
                 console=None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from rich import box

    console = console or Console(file=file, width=width, highlight=False)
    # Below 100 columns: borderless tables, and the probes keep the columns that say whether the
    # plan held (--format json has the per-request block arithmetic too).
    narrow = console.width < 100
    style = box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD
    verdict = "MATCHES THE PLAN" if r.ok else "DOES NOT MATCH"
    console.print(f"[bold]kvplan profile[/bold] {escape(r.base_url)} · {escape(r.model)} · vLLM "
                  f"{escape(r.vllm_version or '?')} — [{'green' if r.ok else 'bold red'}]{verdict}[/]")
    s = r.server
    console.print(f"server: {s['num_gpu_blocks']:,} KV blocks of {s['block_size']} tokens "
                  f"({s['usable_blocks']:,} usable), max_model_len {s['max_model_len']:,}")
    if r.launched:
        console.print(f"launched: pid {r.launched.get('pid')}, log {escape(str(r.launched.get('log_path')))}, "
                      f"ready after {r.launched.get('startup_seconds') or 0:.0f} s")
    if r.startup.get("kv_line"):
        console.print(f"start-up log: {escape(r.startup['kv_line'])}")
    checks = Table(title="measured vs planned", box=style)
    for col in ("check", "status", "measured", "planned", "tolerance"):
        checks.add_column(col, justify="right" if col in ("measured", "planned") else "left")
    for c in r.checks:
        checks.add_row(escape(c.title), f"[{_STYLE.get(c.status, '')}]{c.status}[/]", escape(_fmt(c.measured)),
                       escape(_fmt(c.planned)), escape(c.tolerance))
    console.print(checks)
    for c in r.checks:
        console.print(f"  [{_STYLE.get(c.status, '')}]{escape(c.id)}[/]: {escape(c.evidence)}")
    # blocks: measured in use; ceil: ceil(tokens / block_size) per request; reserve: max_model_len / block_size
    steps = Table(title="probes (scraped while the requests ran)", box=style)
    cols = ["step", "requests", "tokens", "KV peak", "blocks", "ceil/req", "reserve/req", "running", "waiting", "s"]
    if narrow:
        cols = ["step", "requests", "tokens", "KV peak", "blocks", "ceil/req", "running", "s"]
    for col in cols:
        steps.add_column(col, justify="left" if col == "step" else "right", no_wrap=col != "step")
    for st in r.steps:
        cells = {"step": st.name, "requests": str(st.requests), "tokens": f"{st.prompt_tokens:,}+{st.max_tokens}",
                 "KV peak": "-" if st.peak_kv_usage is None else f"{st.peak_kv_usage:.3%}",
                 "blocks": _fmt(st.measured_kv_blocks), "ceil/req": str(st.expected_kv_blocks_per_request),
                 "reserve/req": str(st.max_model_len_blocks), "running": _fmt(st.peak_running),
                 "waiting": _fmt(st.peak_waiting), "s": f"{st.seconds:.1f}"}
        steps.add_row(*(cells[c] for c in cols))
    console.print(steps)
    console.print("blocks = KV blocks in use at the peak; ceil/req = ceil(tokens / block_size); reserve/req = the "
                  "blocks a max_model_len reservation would take")
    if r.gpu.get("notice"):
        console.print(f"GPU: {escape(r.gpu['notice'])}")
    for note in r.notes:
        console.print(f"note: {escape(note)}")
    for f in r.startup.get("findings", []):
        console.print(f"doctor: [{f['severity']}] {escape(f['id'])}: {escape(f['title'])}")
