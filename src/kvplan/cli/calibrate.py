"""``kvplan calibrate``: fit the simulator's step-time profile to real ``kvplan bench`` runs.

Thin: parse, call :func:`kvplan.sim.calibrate.calibrate`, render. Only typer and the standard library
at module level (``kvplan.cli.main`` imports this for every command).

Exit codes: 0 the profile was written (or printed); 2 usage errors (unreadable or malformed
files, too few requests to fit).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UsageError


def _fail(exc: Exception) -> None:
    typer.echo(f"kvplan: error: {exc}", err=True)
    raise typer.Exit(2)


def calibrate_cmd(
    results: List[Path] = typer.Argument(..., help="`kvplan bench --output` result files of the same server "
                                         "configuration (several rates fit better)."),
    records: Optional[List[Path]] = typer.Option(None, "--records", help="Per-request records of each result, "
                                                 "in order (default: the result's records_file / <result>.records.jsonl)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the profile (for simulate/tune --profile)."),
    validate: Optional[List[Path]] = typer.Option(None, "--validate", help="Held-out bench results: report how "
                                                  "well the fitted profile predicts them (not used in the fit)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="The served model (recorded in the profile)."),
    device: str = typer.Option("cuda", "--device", help="cuda, or cpu for vLLM's CPU backend (recorded)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU name the runs were served on (recorded)."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs"),
    max_num_batched_tokens: Optional[int] = typer.Option(None, "--max-num-batched-tokens"),
    fmt: str = typer.Option("table", "--format", "-f", help="table, or json (the calibration on stdout)."),
) -> None:
    """Fit the step-time profile (per-step overhead, per-sequence, per-token, KV-read and attention costs,
    the API server's latency) to `kvplan bench` runs: client token timings, one equation per request."""
    from ..sim.calibrate import calibrate, predict_equations

    try:
        if fmt not in ("table", "json"):
            raise UsageError(f"--format {fmt!r}: use table or json")
        if device not in ("cuda", "cpu"):
            raise UsageError(f"--device {device!r}: use cuda or cpu")
        dev = "CPU" if device == "cpu" else (gpu or "")
        config = {k: v for k, v in (("model", model), ("device", device), ("gpu", gpu),
                                    ("tensor_parallel_size", tensor_parallel_size), ("max_num_seqs", max_num_seqs),
                                    ("max_num_batched_tokens", max_num_batched_tokens)) if v is not None}
        res = calibrate(results, records=records or None, device=dev, config=config)
        d = res.to_dict()
        if validate:
            d["validation"] = predict_equations(res.profile, validate)
        if output is not None:
            try:
                res.profile.save(output)
            except OSError as exc:
                raise UsageError(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    except UsageError as exc:
        _fail(exc)
        return
    if fmt == "json":
        sys.stdout.write(json.dumps(d, indent=2) + "\n")
        return
    from ..report.calibration_text import render_calibration_table

    render_calibration_table(d)
    if output is not None:
        typer.echo(f"profile: {output}  (kvplan simulate ... --profile {output})")


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)
