"""The ``kvplan`` command line: parse arguments, call the library, render. Nothing else lives here.

Flags are named as vLLM names them so a ``vllm serve`` line can be pasted in. Usage errors exit
with code 2 and one line on stderr; the renderers import rich only when a table is printed, to
keep ``kvplan plan --format json`` fast.
"""
from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .. import serve_flags as sf
from .._json import dumps_report
from ..errors import UsageError
from ..report import registry as reports
from . import options as opt
from .options import human_int  # noqa: F401 - re-exported: kvplan.cli.main.human_int
from . import aliases as _aliases
from . import help_width as _help_width
from ._exit import fail as _fail

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="kvplan: vLLM-exact GPU memory and KV-cache planning.")


def _flags_take_no_value() -> None:
    """typer 0.29 prints a ``<bool>`` type after on/off flags (``--enforce-eager <bool>``), which
    reads as if the flag took a value; it takes none, so its type column stays empty."""
    from typer.core import TyperOption

    show = getattr(TyperOption, "display_type_rich", None)
    if show is None or getattr(show, "_kvplan_flags", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) and not getattr(self, "count", False) else show(self, ctx)

    display_type_rich._kvplan_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()
_help_width.install_on_help()  # --help readable at 80 columns: names never cut, the help under them
_aliases.install()  # one option given twice with different values (-tp 2 --tensor-parallel-size 4) is refused


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__
        from ..memory.semantics import SUPPORTED_RANGE

        typer.echo(f"kvplan {__version__} (vLLM rules {SUPPORTED_RANGE})")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print kvplan's version and exit.")) -> None:
    """kvplan: vLLM-exact GPU memory and KV-cache planning."""


class Format(str, Enum):  # kvplan models / gpus (markdown prints the table)
    table = "table"
    json = "json"
    markdown = "markdown"


PlanFormat = reports.format_enum("plan")


@app.command("plan")
@opt.serve_options
def plan_cmd(
    ctx: typer.Context,
    plan: Optional[dict] = None,  # the serve flags (kvplan/serve_flags.py; opt.serve_options puts them here)
    from_log: Optional[Path] = typer.Option(None, "--from-log", help=sf.FROM_LOG_HELP),
    fmt: PlanFormat = typer.Option(PlanFormat.table, "--format", "-f"),
    compact: bool = typer.Option(False, "--compact", help="Table view: the headline numbers only."),
    requests: Optional[str] = typer.Option(None, "--requests", help="A request log (see `kvplan lengths`): add how "
                                           "this plan meets the real traffic."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="With --requests: a model folder, "
                                            "tokenizer.json or pkg:NAME to count the requests' tokens."),
    serve_config: Optional[Path] = typer.Option(None, "--serve-config", help="Write the YAML for "
                                                "`vllm serve --config FILE` to this file (on FAILS: the "
                                                "configuration kvplan offers instead, if any)."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when the verdict is FAILS (for CI)."),
) -> None:
    """Exact vLLM memory and KV-cache accounting: will it start, how many requests fit, what to run.

    Exit codes: 0 the plan was computed (STARTS, or FAILS without --strict); 1 FAILS with
    --strict, or --serve-config on a FAILS verdict with nothing that starts; 2 usage errors."""
    flags = dict(plan or {})
    try:
        result, log = sf.plan_from_values(flags, given=frozenset(flags), from_log=from_log)
        traffic = None
        if requests:
            from .lengths import traffic_for_plan

            traffic = traffic_for_plan(requests, flags.get("model") or (log.model if log is not None else None),
                                       result, tokenizer)
        if serve_config is not None:
            from ..report._common import run_block

            run = run_block(result)
            if run is None:
                _render(result, fmt, compact, traffic)
                _fail(UsageError(f"--serve-config {serve_config}: not written: the verdict is FAILS and no "
                                 "configuration kvplan tried starts"), code=1)
                return
            try:
                serve_config.write_text(run[2], encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"--serve-config {serve_config}: cannot write: {exc}") from None
    except UsageError as exc:
        _fail(exc)
    _render(result, fmt, compact, traffic)
    if strict and not result.startup.ok:
        raise typer.Exit(1)


def _render(result, fmt, compact: bool, traffic=None) -> None:
    reports.emit("plan", fmt, result, compact=compact, traffic=traffic)


@app.command("models")
def models_cmd(search: Optional[str] = typer.Argument(None, help="Filter by substring."),
               fmt: Format = typer.Option(Format.table, "--format", "-f")) -> None:
    """List the built-in model catalog: parameters, the longest context vLLM accepts, KV bytes per token."""
    from ..memory.listing import catalog_rows

    rows = catalog_rows(search)
    if fmt is Format.json:
        sys.stdout.write(dumps_report(rows))
        return
    from rich.console import Console
    from rich.table import Table

    con = Console()
    # Ids are never cut (they are what --model takes). A narrow terminal lists the aliases under
    # each id and drops the architecture column (--format json has everything).
    wide = con.width >= 140
    from rich import box

    table = Table(title=f"kvplan catalog ({len(rows)} models)" + ("" if wide else "; architecture: --format json"),
                  box=box.HEAVY_HEAD if wide else box.SIMPLE_HEAD, pad_edge=wide, show_edge=wide)
    longest = max((len(r["id"]) for r in rows), default=2)
    table.add_column("id" if wide else "id (aliases)", no_wrap=wide, overflow="fold", min_width=longest,
                     max_width=None if wide else longest)  # the aliases wrap under it, the numbers keep theirs
    table.add_column("params", justify="right", no_wrap=True)
    table.add_column("context", justify="right", no_wrap=True)
    table.add_column("KV/tok", justify="right", no_wrap=True)
    if wide:
        table.add_column("aliases")
        table.add_column("architecture")
    for r in rows:
        params = f"{r['params'] / 1e9:.2f}B" if wide else f"{r['params'] / 1e9:.1f}B"
        ctx = _tokens_k(r["max_context_tokens"])
        kv = _kib(r["kv_bytes_per_token"])
        if wide:
            table.add_row(r["id"], params, ctx, kv, ", ".join(r["aliases"]), r["summary"])
        else:
            table.add_row(r["id"] + ("\n  " + ", ".join(r["aliases"]) if r["aliases"] else ""), params, ctx, kv)
    con.print(table)
    con.print("context: the longest max_model_len vLLM accepts (K = 1,024 tokens); KV/tok: KV-cache bytes per "
              "token, whole model, in the checkpoint's KV dtype (--format json: exact values)", style="dim")


def _tokens_k(n: Optional[int]) -> str:
    """A context length in 7 characters at most: 4K, 131K, 10.0M (K = 1,024 tokens)."""
    if not n:
        return "-"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f}M"
    return f"{n // 1024}K" if n % 1024 == 0 else f"{n / 1024:.1f}K"


def _kib(n: Optional[int]) -> str:
    if n is None:
        return "-"
    return f"{n / 1024:.0f}KiB" if n >= 10 * 1024 else f"{n / 1024:.1f}KiB"


@app.command("gpus")
def gpus_cmd(fmt: Format = typer.Option(Format.table, "--format", "-f")) -> None:
    """List the built-in GPU catalog (memory as CUDA reports it)."""
    from dataclasses import asdict

    from ..hardware import catalog

    rows = [asdict(g) | {"memory_gib": round(g.memory_gib, 2)} for g in catalog()]
    if fmt is Format.json:
        sys.stdout.write(dumps_report(rows))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="kvplan GPU catalog (memory as CUDA reports it)")
    # Names are never cut (they are what --gpu takes); the numeric headers are short.
    table.add_column("name", no_wrap=True, min_width=max((len(r["name"]) for r in rows), default=4))
    for col in ("GiB", "GB/s", "bf16 TFLOPS", "fp8 TFLOPS"):
        table.add_column(col, justify="right")
    table.add_column("interconnect", overflow="fold")
    for r in rows:
        table.add_row(r["name"], f"{r['memory_gib']:.2f}", str(r["bandwidth_gbs"] or "-"), str(r["bf16_tflops"] or "-"),
                      str(r["fp8_tflops"] or "-"), str(r["interconnect"] or "-"))
    Console().print(table)


# `kvplan lengths` and `kvplan trim` (kvplan.cli.lengths imports nothing heavy).
from .lengths import register as _register_lengths  # noqa: E402

_register_lengths(app)

# `kvplan bench` (kvplan.cli.bench imports nothing heavy at module level).
from .bench import register as _register_bench  # noqa: E402

_register_bench(app)

# `kvplan alerts`, `kvplan doctor`, `kvplan watch` (kvplan.cli.ops imports nothing heavy at module level).
from .ops import register as _register_ops  # noqa: E402

_register_ops(app)


# `kvplan calibrate` (kvplan.cli.calibrate imports nothing heavy at module level).
from .calibrate import register as _register_calibrate  # noqa: E402

_register_calibrate(app)


# `kvplan preflight` (kvplan.cli.preflight imports nothing heavy at module level).
from .preflight import register as _register_preflight  # noqa: E402

_register_preflight(app)


# `kvplan simulate` (kvplan.cli.simulate imports nothing heavy at module level).
from .simulate import register as _register_simulate  # noqa: E402

_register_simulate(app)

# `kvplan profile` (kvplan.cli.profile imports nothing heavy at module level).
from .profile import register as _register_profile  # noqa: E402

_register_profile(app)

# `kvplan tune` (kvplan.cli.tune imports nothing heavy at module level).
from .tune import register as _register_tune  # noqa: E402

_register_tune(app)

# `kvplan ui` (kvplan.cli.ui imports nothing heavy at module level; aiohttp only when it runs).
from .ui import register as _register_ui  # noqa: E402

_register_ui(app)


def main() -> None:
    try:
        app()
    except UsageError as exc:  # raised outside a command body
        typer.echo(f"kvplan: error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
