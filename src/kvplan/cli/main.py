"""The ``kvplan`` command line: parse arguments, call the library, render. Nothing else lives here.

Flags are named as vLLM names them so a ``vllm serve`` line can be pasted in. Usage errors exit
with code 2 and one line on stderr; the renderers import rich only when a table is printed, to
keep ``kvplan plan --format json`` fast.
"""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="kvplan: vLLM-exact GPU memory and KV-cache planning.")


class Format(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


def human_int(text: str, what: str, allow_auto: bool = False) -> int:
    """vLLM's human_readable_int: '32k' = 32,000, '32K' = 32,768; 'auto'/-1 where allowed."""
    raw = text.strip()
    if allow_auto and raw.lower() in ("auto", "-1"):
        return -1
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if raw and raw[-1] in units:
            return int(float(raw[:-1]) * units[raw[-1]])
        return int(raw)
    except ValueError:
        raise UsageError(f"{what}: cannot read {text!r} as a number (e.g. 8192, 32k, 32K"
                         f"{', auto' if allow_auto else ''})") from None


def _fail(exc: Exception) -> None:
    typer.echo(f"kvplan: error: {exc}", err=True)
    raise typer.Exit(2)


@app.command("plan")
def plan_cmd(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="HF id or alias from the catalog, config.json, or model folder."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU name from the catalog (see `kvplan gpus`)."),
    gpu_memory: Optional[str] = typer.Option(None, "--gpu-memory", help="Total memory of one GPU as CUDA reports it, e.g. 79.19GiB."),
    device: str = typer.Option("cuda", "--device", help="cuda, or cpu for vLLM's CPU backend."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp"),
    data_parallel_size: int = typer.Option(1, "--data-parallel-size", "-dp"),
    dtype: str = typer.Option("auto", "--dtype"),
    quantization: Optional[str] = typer.Option(None, "--quantization", "-q"),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype"),
    gpu_memory_utilization: Optional[float] = typer.Option(None, "--gpu-memory-utilization"),
    max_model_len: Optional[str] = typer.Option(None, "--max-model-len", help="Tokens; 32k = 32000, 32K = 32768, auto = fit the cache."),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs"),
    max_num_batched_tokens: Optional[str] = typer.Option(None, "--max-num-batched-tokens"),
    block_size: Optional[int] = typer.Option(None, "--block-size"),
    enforce_eager: bool = typer.Option(False, "--enforce-eager"),
    vllm_version: Optional[str] = typer.Option(None, "--vllm-version", help="Follow this vLLM version's rules (default 0.33)."),
    engine: Optional[str] = typer.Option(None, "--engine", help="v0 or v1 where VLLM_USE_V1 chose (vLLM 0.7-0.10)."),
    kv_cache_memory: Optional[str] = typer.Option(None, "--kv-cache-memory", help="KV memory per GPU (GiB unless a unit is given), as vLLM's 'Available KV cache memory'."),
    kv_cache_memory_bytes: Optional[str] = typer.Option(None, "--kv-cache-memory-bytes", help="vLLM's flag: exact KV bytes per GPU."),
    num_gpu_blocks_override: Optional[int] = typer.Option(None, "--num-gpu-blocks-override"),
    from_log: Optional[Path] = typer.Option(None, "--from-log", help="A vLLM start-up log: use its measured KV memory and flags."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node"),
    disable_hybrid_kv_cache_manager: bool = typer.Option(False, "--disable-hybrid-kv-cache-manager"),
    fmt: Format = typer.Option(Format.table, "--format", "-f"),
    compact: bool = typer.Option(False, "--compact", help="Table view: the headline numbers only."),
    requests: Optional[str] = typer.Option(None, "--requests", help="A request log (see `kvplan lengths`): add how "
                                           "this plan meets the real traffic."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="With --requests: a model folder, "
                                            "tokenizer.json or pkg:NAME to count the requests' tokens."),
    serve_config: Optional[Path] = typer.Option(None, "--serve-config", help="Write the YAML for "
                                                "`vllm serve --config FILE` to this file."),
) -> None:
    """Exact vLLM memory and KV-cache accounting: will it start, how many requests fit, what to run."""
    from ..hardware import custom_gpu, find_gpu, parse_size
    from ..memory import PlanRequest, plan
    from ..memory.compare import compare_with_log
    from ..models import load_model

    try:
        log = None
        flags_from_log: dict = {}
        if from_log is not None:
            from ..memory.startup_log import read_startup_log

            log = read_startup_log(from_log)
            flags_from_log = log.args
            model = model or log.model
            vllm_version = vllm_version or log.vllm_version
        if not model:
            raise UsageError("--model is required (or a --from-log whose args name the model)")
        spec = load_model(model)
        if gpu_memory:
            g = custom_gpu(parse_size(gpu_memory, "--gpu-memory"), name=gpu or f"{gpu_memory} GPU")
        elif gpu:
            g = find_gpu(gpu)
        elif log is not None and log.total_gpu_memory_gib:
            g = custom_gpu(int(log.total_gpu_memory_gib * (1 << 30)), "GPU from log")
        elif device == "cpu":
            g = custom_gpu(parse_size("16GiB"), "CPU")
        else:
            raise UsageError("give --gpu NAME (see `kvplan gpus`) or --gpu-memory SIZE")

        def pick(name, value, default=None):
            return value if value is not None and value != default else flags_from_log.get(name, value)

        kv_bytes = None
        source = "kv_cache_memory"
        if kv_cache_memory_bytes:
            kv_bytes = human_int(kv_cache_memory_bytes, "--kv-cache-memory-bytes")
        elif kv_cache_memory:
            kv_bytes = parse_size(kv_cache_memory, "--kv-cache-memory")
        elif log is not None and log.available_kv_bytes is not None:
            kv_bytes, source = log.available_kv_bytes, "log"
        mml = human_int(max_model_len, "--max-model-len", allow_auto=True) if max_model_len else None
        if mml is None and log is not None:
            mml = log.max_model_len or flags_from_log.get("max_model_len")
        mnbt = human_int(max_num_batched_tokens, "--max-num-batched-tokens") if max_num_batched_tokens else \
            flags_from_log.get("max_num_batched_tokens")
        req = PlanRequest(
            model=spec, gpu=g, device=device,
            tensor_parallel_size=pick("tensor_parallel_size", tensor_parallel_size, 1),
            pipeline_parallel_size=pick("pipeline_parallel_size", pipeline_parallel_size, 1),
            data_parallel_size=pick("data_parallel_size", data_parallel_size, 1),
            dtype=str(pick("dtype", dtype, "auto")),
            quantization=pick("quantization", quantization),
            kv_cache_dtype=str(pick("kv_cache_dtype", kv_cache_dtype, "auto")),
            gpu_memory_utilization=pick("gpu_memory_utilization", gpu_memory_utilization),
            max_model_len=mml,
            max_num_seqs=pick("max_num_seqs", max_num_seqs),
            max_num_batched_tokens=mnbt,
            block_size=pick("block_size", block_size),
            enforce_eager=bool(pick("enforce_eager", enforce_eager, False)),
            vllm_version=vllm_version,
            engine=engine or (log.engine if log is not None else None),
            kv_cache_memory_bytes=kv_bytes,
            num_gpu_blocks_override=pick("num_gpu_blocks_override", num_gpu_blocks_override),
            gpus_per_node=gpus_per_node,
            disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
            kv_memory_source=source,
            measured=None,
        )
        if log is not None and source == "log":
            per_stage = log.available_kv_per_stage(req.tensor_parallel_size, req.pipeline_parallel_size)
            if per_stage is not None:
                from dataclasses import replace

                req = replace(req, kv_cache_memory_per_stage=per_stage)
        result = plan(req)
        if log is not None:
            result = compare_with_log(result, req, log)
        traffic = None
        if requests:
            from .lengths import traffic_for_plan

            traffic = traffic_for_plan(requests, model, result, tokenizer)
        if serve_config is not None:
            try:
                serve_config.write_text(result.serve_config_yaml, encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"--serve-config {serve_config}: cannot write: {exc}") from None
    except UsageError as exc:
        _fail(exc)
        return
    _render(result, fmt, compact, traffic)


def _render(result, fmt: Format, compact: bool, traffic=None) -> None:
    if fmt is Format.json:
        from ..report.plan_json import render_json

        extra = {"traffic": traffic.to_dict()} if traffic is not None else None
        sys.stdout.write(render_json(result, extra) + "\n")
    elif fmt is Format.markdown:
        from ..report.plan_markdown import render_markdown

        sys.stdout.write(render_markdown(result))
        if traffic is not None:
            from ..report.lengths_traffic import render_traffic_markdown

            sys.stdout.write(render_traffic_markdown(traffic))
    else:
        from ..report.plan_text import render_table

        render_table(result, compact=compact)
        if traffic is not None:
            from ..report.lengths_traffic import render_traffic_table

            render_traffic_table(traffic)


@app.command("models")
def models_cmd(search: Optional[str] = typer.Argument(None, help="Filter by substring."),
               fmt: Format = typer.Option(Format.table, "--format", "-f")) -> None:
    """List the built-in model catalog."""
    from ..models import catalog, load_model
    from ..models.params import count_params

    rows = []
    for entry in catalog.entries():
        if search and search.lower() not in (entry.id.lower() + " " + " ".join(entry.aliases)):
            continue
        spec = load_model(entry.id)
        rows.append({"id": entry.id, "aliases": list(entry.aliases), "params": count_params(spec),
                     "summary": spec.describe()})
    if fmt is Format.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"kvplan catalog ({len(rows)} models)")
    for col in ("id", "aliases", "params", "architecture"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["id"], ", ".join(r["aliases"]), f"{r['params'] / 1e9:.2f}B", r["summary"])
    Console().print(table)


@app.command("gpus")
def gpus_cmd(fmt: Format = typer.Option(Format.table, "--format", "-f")) -> None:
    """List the built-in GPU catalog (memory as CUDA reports it)."""
    from dataclasses import asdict

    from ..hardware import catalog

    rows = [asdict(g) | {"memory_gib": round(g.memory_gib, 2)} for g in catalog()]
    if fmt is Format.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="kvplan GPU catalog")
    for col in ("name", "memory (GiB, CUDA)", "bandwidth GB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "interconnect"):
        table.add_column(col)
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


def main() -> None:
    try:
        app()
    except UsageError as exc:  # raised outside a command body
        typer.echo(f"kvplan: error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
