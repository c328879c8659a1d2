"""``kvplan calibrate``: fit the simulator's step-time profile to real ``kvplan bench`` runs.

Thin: parse, call :func:`kvplan.sim.calibrate.calibrate`, render. Only typer and the standard library
at module level (``kvplan.cli.main`` imports this for every command).

Exit codes: 0 the profile was written (or printed); 2 usage errors (unreadable or malformed
files, too few requests to fit).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UsageError
from ..report import registry as reports
from . import options as opt
from ._exit import fail as _fail


def calibrate_cmd(
    results: List[Path] = typer.Argument(..., help="`kvplan bench --output` result files of the same server "
                                         "configuration (several rates fit better)."),
    records: Optional[List[Path]] = typer.Option(None, "--records", help="Per-request records of each result, "
                                                 "in order (default: the result's records_file / <result>.records.jsonl)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the profile (for simulate/tune --profile)."),
    validate: Optional[List[Path]] = typer.Option(None, "--validate", help="Held-out bench results: report how "
                                                  "well the fitted profile predicts them (not used in the fit)."),
    plan: Optional[dict] = None,  # the serve flags (kvplan/serve_flags.py; opt.serve_options puts them here)
    window_chunks: int = typer.Option(8, "--window-chunks", help="Cut each request's decode window into pieces of "
                                      "this many chunks (0 = one equation per request)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, or json (the calibration on stdout)."),
) -> None:
    """Fit the step-time profile (per-step overhead, per-sequence, per-token, KV-read and attention costs,
    the API server's latency) to `kvplan bench` runs: each request's decode window and idle TTFT, vLLM's prefill time."""
    from ..sim.calibrate import calibrate, predict_equations

    given = dict(plan or {})
    model, gpu, gpu_memory = given.get("model"), given.get("gpu"), given.get("gpu_memory")
    device = given.get("device", "cuda")
    try:
        if fmt not in reports.formats("calibration"):
            raise UsageError(f"--format {fmt!r}: use {reports.choices_text('calibration')}")
        if device not in ("cuda", "cpu"):
            raise UsageError(f"--device {device!r}: use cuda or cpu")
        if window_chunks < 0:
            raise UsageError("--window-chunks must be 0 or more")
        dev = "CPU" if device == "cpu" else (gpu or gpu_memory or "")
        config: dict = {"device": device}
        prior = None
        if model:
            from ..memory import plan as plan_of
            from ..serve_flags import request_from_values

            req = request_from_values(given)
            pr = plan_of(req, what_ifs=False)
            f = pr.flags
            config.update(model=pr.model.id, gpu=f.gpu, tensor_parallel_size=req.tensor_parallel_size,
                          pipeline_parallel_size=req.pipeline_parallel_size, max_model_len=f.max_model_len,
                          max_num_seqs=f.max_num_seqs, max_num_batched_tokens=f.max_num_batched_tokens,
                          block_size=pr.kv.block_size, num_gpu_blocks=pr.kv.num_gpu_blocks, dtype=f.dtype,
                          kv_cache_dtype=f.kv_cache_dtype, serve_command=pr.serve_command)
            dev = "CPU" if device == "cpu" else f.gpu
            if device != "cpu":
                from ..sim.steptime import roofline_profile

                try:  # the catalog's roofline next to the measurement: how far from the prior this GPU runs
                    prior = roofline_profile(req, pr).to_dict()
                except UsageError:
                    prior = None
        elif gpu:
            config["gpu"] = gpu
        res = calibrate(results, records=records or None, device=dev, config=config, window_chunks=window_chunks)
        d = res.to_dict()
        if prior is not None:
            d["roofline_prior"] = prior
        if validate:
            d["validation"] = predict_equations(res.profile, validate)
        if output is not None:
            try:
                res.profile.save(output)
            except OSError as exc:
                raise UsageError(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    except UsageError as exc:
        _fail(exc)
    reports.emit("calibration", fmt, d)
    if fmt == "json":
        return
    if output is not None:
        typer.echo(f"profile: {output}  (kvplan simulate ... --profile {output})")


#: calibrate's words for two of the serve flags (the runs' server, recorded in the profile)
_OVERRIDES = {
    "model": (str, "The served model (HF id, alias, config.json or folder): with it the plan of the flags below is "
              "recorded in the profile."),
    "gpu": (str, "GPU the runs were served on (catalog name)."),
}


def register(app: typer.Typer) -> None:
    app.command("calibrate")(opt.serve_options(calibrate_cmd, overrides=_OVERRIDES))
