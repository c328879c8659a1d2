"""``kvplan lengths`` and ``kvplan trim``: thin wrappers around kvplan.workload.

``register(app)`` adds the commands to the kvplan app (main.py calls it with its own app, which
also works under ``python -m kvplan.cli.main``). This module imports nothing heavy: the
workload package loads tokenizers/jinja2 only when a prompt is really counted.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
from ..report import registry as reports
from . import options as opt
from ._exit import fail as _fail


Format = reports.format_enum("lengths")


def resolve_tokenizer(tokenizer: Optional[str], model: Optional[str], chat_template: Optional[str],
                      quiet: bool = False):
    """--tokenizer wins; else the tokenizer of --model (local folder, HF cache, or hub); else None
    (with a note on stderr unless ``quiet``)."""
    from ..workload.run import resolve_tokenizer as resolve

    return resolve(tokenizer, model, chat_template, note=None if quiet else _note)


def _note(text: str) -> None:
    typer.echo(text, err=True)


def lengths_cmd(
    files: list[str] = typer.Argument(..., help="Request logs: JSONL, JSON arrays, CSV or vLLM logs (gzip/zstd ok); "
                                                "globs; - for stdin."),
    values: Optional[dict] = None,  # the options (kvplan/workload/run.py: LENGTHS_FLAGS; opt.flag_options)
    fmt: Format = typer.Option(Format.table, "--format", "-f"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write an HTML report with histograms to this file."),
) -> None:
    """Token lengths of real traffic → max_model_len, max_tokens and history limits, with coverage and cost."""
    from ..workload.issues import StrictModeError
    from ..workload.run import lengths_from_values

    try:
        result = lengths_from_values(values or {}, files, note=_note)
    except UsageError as exc:
        _fail(str(exc), 2)
    except StrictModeError as exc:
        _fail(f"{exc} (--strict)", 1)
    render_lengths(result, fmt)
    if plot is not None:
        from ..report.lengths_plot import write_plot

        try:
            write_plot(result, plot)
        except OSError as exc:
            _fail(f"--plot {plot}: {exc.strerror or exc}", 2)
        typer.echo(f"kvplan: wrote {plot}", err=True)
    if result.records.used == 0:
        _fail("no usable record in the input (see the skipped reasons above)", 1)


def render_lengths(result, fmt) -> None:
    reports.emit("lengths", fmt, result)


def trim_cmd(
    files: list[str] = typer.Argument(..., help="JSONL chat requests (messages); - for stdin."),
    budget: int = typer.Option(..., "--budget", "--max-model-len", help="Context budget in tokens (max_model_len)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", "-t"),
    model: Optional[str] = typer.Option(None, "--model", "-m"),
    chat_template: Optional[str] = typer.Option(None, "--chat-template"),
    reserve_output: Optional[int] = typer.Option(None, "--reserve-output", help="Tokens kept free for the answer "
                                                 "(default: each request's max_tokens, else 0)."),
    max_turns: Optional[int] = typer.Option(None, "--max-turns"),
    keep_system: bool = typer.Option(True, "--keep-system/--drop-system"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the trimmed JSONL here (default stdout)."),
    strict: bool = typer.Option(False, "--strict"),
    estimate: Optional[bool] = typer.Option(None, "--estimate/--no-estimate", help="Without a tokenizer, count by "
                                            "characters per token (labelled; approximate, as in kvplan lengths); "
                                            "--no-estimate refuses to trim without one."),
) -> None:
    """Trim each request's history to whole turns that fit the budget, with the real chat template."""
    from ..workload.analysis import estimator_for
    from ..workload.trim_cli import run_trim

    try:
        tok = resolve_tokenizer(tokenizer, model, chat_template, quiet=True)
        counter = tok if tok is not None else estimator_for(None, estimate)
        if counter is None:
            raise UsageError("kvplan trim --no-estimate needs the model's tokenizer: give --tokenizer DIR (or a "
                             "--model whose tokenizer is in a local folder or the Hugging Face cache)")
        if budget < 1 or (max_turns is not None and max_turns < 1) or (reserve_output is not None and reserve_output < 0):
            raise UsageError("--budget and --max-turns must be positive, --reserve-output not negative")
        out = open(output, "w", encoding="utf-8") if output else sys.stdout  # noqa: SIM115
    except UsageError as exc:
        _fail(str(exc), 2)
    except OSError as exc:
        _fail(f"--output {output}: {exc.strerror or exc}", 2)
    try:
        summary = run_trim(files, counter, budget, out, reserve_output=reserve_output, max_turns=max_turns,
                           keep_system=keep_system, strict=strict)
    except UsageError as exc:
        _fail(str(exc), 2)
    finally:
        if output:
            out.close()
    typer.echo(summary.line(), err=True)
    if summary.failed_strict:
        raise typer.Exit(1)


def traffic_for_plan(requests: str, model: str, plan_result, tokenizer: str | None = None):
    """``kvplan plan --requests FILE``: the traffic analysis of FILE measured against the plan.

    The model's tokenizer is used when it can be found offline (or on the hub); otherwise
    prompts without server-reported usage are estimated, and the traffic section says so."""
    from ..workload.analysis import LengthsOptions, analyze_lengths
    from ..workload.traffic import traffic_fit

    from ..workload.sources import expand_paths

    expand_paths([requests], require_existing=True)
    tok = resolve_tokenizer(tokenizer, model, None, quiet=tokenizer is None)
    opts = LengthsOptions(block_size=plan_result.kv.block_size)
    lengths = analyze_lengths([requests], tok, opts, plan=plan_result, model=model)
    if lengths.records.used == 0:
        raise UsageError(f"--requests {requests}: no usable record (skipped: {dict(lengths.records.skipped)})")
    return traffic_fit(plan_result, lengths)


def register(app: typer.Typer) -> None:
    from ..workload.run import LENGTHS_FLAGS

    app.command("lengths")(opt.flag_options(LENGTHS_FLAGS, "values", lengths_cmd))
    app.command("trim")(trim_cmd)
