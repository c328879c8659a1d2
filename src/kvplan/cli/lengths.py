"""``kvplan lengths`` and ``kvplan trim``: thin wrappers around kvplan.workload.

``register(app)`` adds the commands to the kvplan app (main.py calls it with its own app, which
also works under ``python -m kvplan.cli.main``). This module imports nothing heavy: the
workload package loads tokenizers/jinja2 only when a prompt is really counted.
"""
from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
from ..report import registry as reports
from ._exit import fail as _fail


Format = reports.format_enum("lengths")


class InputFormat(str, Enum):
    auto = "auto"
    openai_chat = "openai-chat"
    openai_completion = "openai-completion"
    usage = "usage"
    sharegpt = "sharegpt"
    text = "text"
    vllm_log = "vllm-log"


class Container(str, Enum):
    auto = "auto"
    jsonl = "jsonl"
    json = "json"
    csv = "csv"
    log = "log"


def resolve_tokenizer(tokenizer: Optional[str], model: Optional[str], chat_template: Optional[str],
                      quiet: bool = False):
    """--tokenizer wins; else the tokenizer of --model (local folder, HF cache, or hub); else None."""
    from ..workload.tokenizer import ChatTokenizer

    if tokenizer:
        return ChatTokenizer.from_path(tokenizer, chat_template)
    if model:
        tok = ChatTokenizer.for_model(model)
        if tok is None:
            if not quiet:
                typer.echo(f"kvplan: note: no tokenizer for {model} in a local folder or the Hugging Face cache (and "
                           "the hub is unavailable): only server-reported usage is exact; give --tokenizer DIR, "
                           "or --estimate.", err=True)
            return None
        if chat_template:
            return ChatTokenizer.from_path(str(Path(tok.source).parent), chat_template)
        return tok
    return None


def _plan_for(model: Optional[str], gpu: Optional[str], tp: int):
    if not model:
        return None
    from ..hardware import find_gpu
    from ..memory import PlanRequest, plan
    from ..models import load_model

    try:
        spec = load_model(model)
    except UsageError:
        return None  # a tokenizer-only folder: no config.json, so no bytes per token
    return plan(PlanRequest(spec, find_gpu(gpu or "H100"), tensor_parallel_size=tp), what_ifs=False, fit_search=True)


def lengths_cmd(
    files: list[str] = typer.Argument(..., help="Request logs: JSONL, JSON arrays, CSV or vLLM logs (gzip/zstd ok); "
                                                "globs; - for stdin."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", "-t", help="Model folder, tokenizer.json, or "
                                            "pkg:NAME (a Python package shipping tokenizer.json)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model (catalog/hub id or folder): its tokenizer "
                                        "when none is given, and its KV bytes per token for block waste."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU for the --model plan (block waste in GiB); default H100."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
    chat_template: Optional[str] = typer.Option(None, "--chat-template", help="A chat template file overriding the "
                                                "tokenizer's."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="The output budget you will serve with "
                                             "(overrides the requests' max_tokens)."),
    percentile: float = typer.Option(99.0, "--percentile", "-p", help="Percentile the recommendations cover."),
    block_size: int = typer.Option(16, "--block-size", help="vLLM block size max_model_len is rounded to."),
    fmt: Format = typer.Option(Format.table, "--format", "-f"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write an HTML report with histograms to this file."),
    strict: bool = typer.Option(False, "--strict", help="Stop at the first bad record or file (exit code 1)."),
    estimate: Optional[bool] = typer.Option(None, "--estimate/--no-estimate", help="Without a tokenizer, prompts "
                                            "lacking server-reported usage are estimated from characters (labelled "
                                            "everywhere); --no-estimate skips them instead."),
    input_format: InputFormat = typer.Option(InputFormat.auto, "--input-format", help="Force the record shape."),
    container: Container = typer.Option(Container.auto, "--container", help="Force the file format."),
    session_field: Optional[str] = typer.Option(None, "--session-field", help="Conversation id field (dotted path)."),
    timestamp_field: Optional[str] = typer.Option(None, "--timestamp-field", help="Arrival time field."),
    duration_field: Optional[str] = typer.Option(None, "--duration-field", help="Request duration field (_ms = ms)."),
    max_record_bytes: int = typer.Option(64 << 20, "--max-record-bytes", help="Longest line/record read."),
    max_issues: int = typer.Option(50, "--max-issues", help="Skipped records listed with file and line in the "
                                   "output (all are counted in records.skipped)."),
) -> None:
    """Token lengths of real traffic → max_model_len, max_tokens and history limits, with coverage and cost."""
    from ..workload.issues import StrictModeError

    try:
        result = lengths_from_flags(dict(locals()))
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


def lengths_from_flags(flags: dict, quiet: bool = False):
    """``kvplan lengths``' LengthsResult for its parameters (``lengths_cmd``'s ``locals()``); the
    command and ``kvplan ui`` both call this."""
    from ..workload.analysis import LengthsOptions, analyze_lengths
    from ..workload.shapes import FieldNames

    opts = LengthsOptions(percentile=flags["percentile"], block_size=flags["block_size"],
                          max_tokens=flags["max_tokens"], input_format=InputFormat(flags["input_format"]).value,
                          container=Container(flags["container"]).value, estimate=flags["estimate"],
                          strict=flags["strict"], fields=FieldNames(flags["session_field"], flags["timestamp_field"],
                                                                   flags["duration_field"]),
                          max_record_bytes=flags["max_record_bytes"], max_issues=flags.get("max_issues", 50))
    opts.validate()
    from ..workload.sources import expand_paths

    expand_paths(list(flags["files"]), require_existing=True)  # one rule: file not found: PATH, exit 2
    model = flags["model"]
    tok = resolve_tokenizer(flags["tokenizer"], model, flags["chat_template"], quiet=quiet)
    plan = _plan_for(model, flags["gpu"], flags["tensor_parallel_size"])
    return analyze_lengths(list(flags["files"]), tok, opts, plan=plan, model=model)


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
    app.command("lengths")(lengths_cmd)
    app.command("trim")(trim_cmd)
