"""``kvplan tune``: search vLLM's flags, GPU type and TP × DP split for the configuration that serves a
trace within its SLOs. Thin: parse, call :func:`kvplan.tune.run.run_tune`, render.

The space flags take comma-separated lists (``--max-num-seqs 64,128,256``); the plan and traffic
flags are those of ``kvplan plan`` and ``kvplan simulate``. Only typer and the standard library are
imported at module level (``kvplan plan`` must stay fast).

Exit codes: 0 a configuration meets the SLOs; 1 none does (the closest is named); 2 usage errors.
"""
from __future__ import annotations

from typing import Optional

import typer

from ..errors import UsageError
from ..report import registry as reports
from . import options as opt


def register(app: typer.Typer) -> None:
    from ..tune.flags import NOT_TRAFFIC, SPACE_OVERRIDES, TRAFFIC_OVERRIDES, TUNE_FLAGS

    command = opt.flag_options(TUNE_FLAGS, "own", tune_cmd)
    command = opt.traffic_options(command, exclude=NOT_TRAFFIC, overrides=TRAFFIC_OVERRIDES)
    app.command("tune")(opt.serve_options(command, overrides=SPACE_OVERRIDES))


def tune_cmd(
    plan: Optional[dict] = None,  # the serve flags (kvplan/serve_flags.py; the space's as lists: tune/flags.py)
    traffic: Optional[dict] = None,  # the traffic flags, offered to the whole deployment (kvplan/traffic/flags.py)
    own: Optional[dict] = None,  # tune's own flags (kvplan/tune/flags.py: TUNE_FLAGS)
    top: int = typer.Option(10, "--top", help="Rows in the table / Markdown."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or markdown."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the report to this file."),
) -> None:
    """Search vLLM's flags, GPU type and TP × DP split for the best configuration under SLOs (simulated)."""
    from ..tune.run import TuneOptions, run_tune

    try:
        if fmt not in reports.formats("tune"):
            raise UsageError(f"--format must be {reports.choices_text('tune')}, got {fmt!r}")
        if top < 1:
            raise UsageError(f"--top must be at least 1, got {top}")
        result = run_tune(TuneOptions(serve=plan or {}, traffic=traffic or {}, own=own or {}))
        try:
            reports.emit("tune", fmt, result, output=output, top=top)
        except OSError as exc:
            if output is None:
                raise
            raise UsageError(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    except UsageError as exc:
        typer.echo(f"kvplan: error: {exc}", err=True)
        raise typer.Exit(2)
    from ..tune.sizing import Sizing

    if isinstance(result, Sizing):
        if result.winner is None:
            typer.echo(f"kvplan tune: no fleet of up to {result.max_gpus} GPUs carries {result.target_rate:g} req/s "
                       "within the SLO", err=True)
            raise typer.Exit(1)
        return
    if not result.ok:
        c = result.closest
        if c is None:
            reasons = ", ".join(f"{k} {n}" for k, n in result.pruned.by_reason)
            typer.echo(f"kvplan tune: no configuration of the space starts ({reasons})", err=True)
        else:
            from ..report.tune_common import slo_cell

            typer.echo(f"kvplan tune: no configuration meets the SLOs; closest: {c.label} ({slo_cell(c)})", err=True)
        raise typer.Exit(1)


