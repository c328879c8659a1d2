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
    model: Optional[str] = typer.Option(None, "--model", "-m", help="The served model (HF id, alias, config.json or "
                                        "folder): with it the plan of the flags below is recorded in the profile."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU the runs were served on (catalog name)."),
    gpu_memory: Optional[str] = typer.Option(None, "--gpu-memory", help="Total memory of one GPU, e.g. 79.19GiB."),
    device: str = typer.Option("cuda", "--device", help="cuda, or cpu for vLLM's CPU backend."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp"),
    dtype: str = typer.Option("auto", "--dtype"),
    quantization: Optional[str] = typer.Option(None, "--quantization", "-q"),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype"),
    gpu_memory_utilization: Optional[float] = typer.Option(None, "--gpu-memory-utilization"),
    max_model_len: Optional[str] = typer.Option(None, "--max-model-len"),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs"),
    max_num_batched_tokens: Optional[str] = typer.Option(None, "--max-num-batched-tokens"),
    block_size: Optional[int] = typer.Option(None, "--block-size"),
    enforce_eager: bool = typer.Option(False, "--enforce-eager"),
    vllm_version: Optional[str] = typer.Option(None, "--vllm-version"),
    kv_cache_memory: Optional[str] = typer.Option(None, "--kv-cache-memory", help="KV memory per GPU (GiB unless a unit is given)."),
    kv_cache_memory_bytes: Optional[str] = typer.Option(None, "--kv-cache-memory-bytes"),
    num_gpu_blocks_override: Optional[int] = typer.Option(None, "--num-gpu-blocks-override"),
    window_chunks: int = typer.Option(8, "--window-chunks", help="Cut each request's decode window into pieces of "
                                      "this many chunks (0 = one equation per request)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, or json (the calibration on stdout)."),
) -> None:
    """Fit the step-time profile (per-step overhead, per-sequence, per-token, KV-read and attention costs,
    the API server's latency) to `kvplan bench` runs: each request's decode window and idle TTFT, vLLM's prefill time."""
    from ..sim.calibrate import calibrate, predict_equations

    try:
        if fmt not in ("table", "json"):
            raise UsageError(f"--format {fmt!r}: use table or json")
        if device not in ("cuda", "cpu"):
            raise UsageError(f"--device {device!r}: use cuda or cpu")
        if window_chunks < 0:
            raise UsageError("--window-chunks must be 0 or more")
        dev = "CPU" if device == "cpu" else (gpu or gpu_memory or "")
        config: dict = {"device": device}
        prior = None
        if model:
            from ..memory import plan
            from .simulate import plan_request_from_flags

            req = plan_request_from_flags(
                model=model, gpu=gpu, gpu_memory=gpu_memory, device=device, tensor_parallel_size=tensor_parallel_size,
                pipeline_parallel_size=pipeline_parallel_size, dtype=dtype, quantization=quantization,
                kv_cache_dtype=kv_cache_dtype, gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                block_size=block_size, enforce_eager=enforce_eager, vllm_version=vllm_version,
                kv_cache_memory=kv_cache_memory, kv_cache_memory_bytes=kv_cache_memory_bytes,
                num_gpu_blocks_override=num_gpu_blocks_override)
            pr = plan(req, what_ifs=False)
            f = pr.flags
            config.update(model=pr.model.id, gpu=f.gpu, tensor_parallel_size=tensor_parallel_size,
                          pipeline_parallel_size=pipeline_parallel_size, max_model_len=f.max_model_len,
                          max_num_seqs=f.max_num_seqs, max_num_batched_tokens=f.max_num_batched_tokens,
                          block_size=pr.kv.block_size, num_gpu_blocks=pr.kv.num_gpu_blocks, dtype=f.dtype,
                          kv_cache_dtype=f.kv_cache_dtype, serve_command=pr.serve_command)
            dev = "CPU" if device == "cpu" else f.gpu
            if device != "cpu":
                from ..sim.steptime import default_profile

                try:  # the catalog's roofline next to the measurement: how far from the prior this GPU runs
                    prior = default_profile(req, pr).to_dict()
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
