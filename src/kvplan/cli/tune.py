"""``kvplan tune``: search vLLM's flags, GPU type and TP × DP split for the configuration that serves a
trace within its SLOs (kvplan.tune.search). Thin: parse, call, render.

The space flags take comma-separated lists (``--max-num-seqs 64,128,256``); the plan and traffic
flags are those of ``kvplan plan`` and ``kvplan simulate``. Only typer and the standard library are
imported at module level (``kvplan plan`` must stay fast).

Exit codes: 0 a configuration meets the SLOs; 1 none does (the closest is named); 2 usage errors.
"""
from __future__ import annotations

from typing import Callable, Optional, TypeVar

import typer

from ..errors import UsageError
from ..report import registry as reports
from . import options as opt

T = TypeVar("T")


def parse_list(text: Optional[str], flag: str, item: Callable[[str], T], *, allow_default: bool = False) -> tuple:
    """``"64,128,256"`` -> (64, 128, 256); duplicates dropped in order; ``default`` -> None (vLLM's
    default) where allowed. Any bad item is a usage error naming the flag and the item."""
    if text is None:
        return ()
    out: list = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            raise UsageError(f"{flag}: empty item in {text!r} (use e.g. {flag} 64,128)")
        if allow_default and part.lower() == "default":
            value = None
        else:
            try:
                value = item(part)
            except UsageError as exc:
                raise UsageError(f"{flag}: {exc}") from None
            except ValueError:
                raise UsageError(f"{flag}: cannot read {part!r}") from None
        if value not in out:
            out.append(value)
    return tuple(out)


def _positive_int(text: str) -> int:
    v = opt.human_int(text, "value")
    if v < 1:
        raise UsageError(f"{text!r} must be at least 1")
    return v


def _fraction(text: str) -> float:
    v = float(text)
    if not 0 < v <= 1:
        raise UsageError(f"{text!r} is not in (0, 1]")
    return v


def _kv_dtype(text: str) -> str:
    from ..tune.space import KV_DTYPES

    v = text.lower()
    if v not in KV_DTYPES:
        raise UsageError(f"{text!r} is not one of {', '.join(KV_DTYPES)}")
    return v


def _gpu_name(text: str) -> str:
    from ..hardware import find_gpu

    return find_gpu(text).name


def build_space(*, max_num_seqs, max_num_batched_tokens, max_model_len, gpu_memory_utilization, kv_cache_dtype,
                gpus, tp, gpu, coverage):
    """The :class:`TuneSpace` of the CLI's list flags (unset flags keep the space's defaults)."""
    from ..tune.search import TuneSpace

    kw: dict = {}
    if max_num_seqs is not None:
        kw["max_num_seqs"] = parse_list(max_num_seqs, "--max-num-seqs", _positive_int, allow_default=True)
    if max_num_batched_tokens is not None:
        kw["max_num_batched_tokens"] = parse_list(max_num_batched_tokens, "--max-num-batched-tokens", _positive_int,
                                                  allow_default=True)
    if max_model_len is not None:
        kw["max_model_len"] = parse_list(max_model_len, "--max-model-len", _positive_int, allow_default=True)
    if gpu_memory_utilization is not None:
        kw["gpu_memory_utilization"] = parse_list(gpu_memory_utilization, "--gpu-memory-utilization", _fraction)
    if kv_cache_dtype is not None:
        kw["kv_cache_dtype"] = parse_list(kv_cache_dtype, "--kv-cache-dtype", _kv_dtype)
    if gpus is not None:
        kw["gpus"] = parse_list(gpus, "--gpus", _positive_int)
    if tp is not None:
        kw["tensor_parallel"] = parse_list(tp, "--tensor-parallel-size", _positive_int)
    if gpu is not None:
        kw["gpu"] = parse_list(gpu, "--gpu", _gpu_name)
    if coverage is not None:
        kw["coverage_pct"] = coverage
    return TuneSpace(**kw).validate()


#: the serve flags tune reads its own way: lists of values to search (the space), and the ones that
#: describe the base configuration only
_OVERRIDES = {
    "gpu": (str, "GPU type(s) from the catalog, comma-separated (e.g. A100-80GB,H100)."),
    "gpu_memory": (str, "Total memory of one GPU (a custom GPU; no roofline without --profile)."),
    "tensor_parallel_size": (str, "TP sizes, e.g. 1,2,4,8 (default: the powers of two dividing --gpus).", "--tp"),
    "data_parallel_size": (int, "Without --gpus: the replicas of every TP."),
    "kv_cache_dtype": (str, "e.g. auto,fp8 (the plan's rule for fp8 on each GPU and vLLM version) [default: "
                       "auto,fp8]."),
    "gpu_memory_utilization": (str, "[default: 0.9,0.95]"),
    "max_model_len": (str, "e.g. 4K,8K; default: what the workload needs."),
    "max_num_seqs": (str, "e.g. 32,64,256 ('default' = vLLM's) [default: 64,128,256]."),
    "max_num_batched_tokens": (str, "e.g. 2048,8192 ('default' = vLLM's) [default: vLLM's]."),
    "kv_cache_memory": (str, "Measured KV memory per GPU (base GPU/TP/utilization only)."),
    "kv_cache_memory_bytes": (str, "vLLM's flag: exact KV bytes per GPU (base only)."),
    "num_gpu_blocks_override": (int, "(base GPU/TP/utilization only)"),
}

#: the space's flags: lists of values, never the base request's as given
_SPACE = ("gpu", "tensor_parallel_size", "kv_cache_dtype", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
          "max_num_batched_tokens")


#: the traffic flags tune does not take (a scenario and a pasted server: tune searches the server)
_NOT_TRAFFIC = ("warm_prompts", "warm_prompt_len", "from_serve_cmd")


def register(app: typer.Typer) -> None:
    command = opt.traffic_options(tune_cmd, exclude=_NOT_TRAFFIC, overrides={
        "rate": (float, "Requests per second offered to the whole deployment.")})
    app.command("tune")(opt.serve_options(command, overrides=_OVERRIDES))


def tune_cmd(
    plan: Optional[dict] = None,  # the serve flags (kvplan/serve_flags.py; opt.serve_options puts them here)
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU counts to try, e.g. 4,8 (TP × PP × DP = GPUs) [default: TP × PP × DP of the base]."),
    # traffic (as `kvplan simulate`), offered to the whole deployment (kvplan/traffic/flags.py;
    # opt.traffic_options puts them here)
    traffic: Optional[dict] = None,
    profile: Optional[str] = typer.Option(None, "--profile", help="A step-time profile from `kvplan calibrate`."),
    coverage: Optional[float] = typer.Option(None, "--coverage", help="max_model_len must hold this percentile of prompt + "
                                             "output (default: all requests; 99.9 with --requests)."),
    # objective and execution
    slo: Optional[str] = typer.Option(None, "--slo", help="e.g. ttft_p99=2s,tpot_p99=100ms"),
    objective: str = typer.Option("goodput_per_gpu", "--objective", help="goodput_per_gpu or min_gpus."),
    exhaustive: bool = typer.Option(False, "--exhaustive", help="Simulate every configuration, also those with "
                                    "more GPUs than can beat the winner (full ranking and Pareto front)."),
    no_reuse: bool = typer.Option(False, "--no-reuse", help="Simulate every configuration, also those a simulated "
                                  "run provably stands for (max_num_seqs / KV blocks it never reached)."),
    all_replicas: bool = typer.Option(False, "--all-replicas", help="With DP: simulate every replica's share, not "
                                      "one (percentiles over the whole trace; DP times the work)."),
    processes: Optional[int] = typer.Option(None, "--processes", help="Parallel simulations (default: CPU count)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Run on this Ray cluster ('local': a private one)."),
    top: int = typer.Option(10, "--top", help="Rows in the table / Markdown."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or markdown."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the report to this file."),
) -> None:
    """Search vLLM's flags, GPU type and TP × DP split for the best configuration under SLOs (simulated)."""
    given = dict(plan or {})
    model, gpu, gpu_memory, vllm_version = (given.get(k) for k in ("model", "gpu", "gpu_memory", "vllm_version"))
    traffic = dict(traffic or {})
    rate, requests = traffic.get("rate"), traffic.get("requests")
    try:
        if fmt not in reports.formats("tune"):
            raise UsageError(f"--format must be {reports.choices_text('tune')}, got {fmt!r}")
        if top < 1:
            raise UsageError(f"--top must be at least 1, got {top}")
        from ..serve_flags import request_from_values
        from ..slo import parse_slo
        from ..traffic.flags import traffic_maker

        slos = parse_slo(slo)
        # --gpu-memory describes one custom GPU (named by --gpu): no catalog list then.
        gpu_names = parse_list(gpu, "--gpu", _gpu_name) if gpu and not gpu_memory else ()
        space = build_space(max_num_seqs=given.get("max_num_seqs"),
                            max_num_batched_tokens=given.get("max_num_batched_tokens"),
                            max_model_len=given.get("max_model_len"),
                            gpu_memory_utilization=given.get("gpu_memory_utilization"),
                            kv_cache_dtype=given.get("kv_cache_dtype"), gpus=gpus, tp=given.get("tensor_parallel_size"),
                            gpu=None if gpu_memory else gpu,
                            coverage=coverage if coverage is not None else (99.9 if requests else None))
        if not model and traffic.get("from_bench_cmd"):
            from ..traffic.bench_cmd import parse_bench_cmd

            model = parse_bench_cmd(traffic["from_bench_cmd"]).model
        # The base is the first value of each list: the measured KV memory and a --profile describe it.
        base = request_from_values({
            **{k: v for k, v in given.items() if k not in _SPACE}, "model": model,
            "gpu": gpu_names[0] if gpu_names else gpu,
            "tensor_parallel_size": space.tensor_parallel[0] if space.tensor_parallel else 1,
            "kv_cache_dtype": space.kv_cache_dtype[0], "gpu_memory_utilization": space.gpu_memory_utilization[0]})
        make_trace, _ = traffic_maker(flags=traffic, model_spec=base.model, vllm_version=vllm_version)
        trace = make_trace(rate)
        # No length chosen: tune derives it, extending the trace until the rows that could win are judged.
        extend = None
        if (traffic.get("num_requests") is None and traffic.get("duration") is None and not requests
                and not traffic.get("num_prompts") and not traffic.get("from_bench_cmd")):
            def extend(n: int):
                longer, _ = traffic_maker(flags=dict(traffic, num_requests=n), model_spec=base.model,
                                          vllm_version=vllm_version)
                return longer(rate)
        prof = None
        if profile:
            from ..sim import StepTimeProfile

            prof = StepTimeProfile.load(profile)
        from ..tune.search import tune

        result = tune(base, trace, slos, space=space, objective=objective, processes=processes,
                      ray_address=ray_address, profile=prof, all_replicas=all_replicas, exhaustive=exhaustive, reuse=not no_reuse,
                      extend_trace=extend)
        try:
            reports.emit("tune", fmt, result, output=output, top=top)
        except OSError as exc:
            if output is None:
                raise
            raise UsageError(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    except UsageError as exc:
        typer.echo(f"kvplan: error: {exc}", err=True)
        raise typer.Exit(2)
    if not result.ok:
        c = result.closest
        if c is None:
            reasons = ", ".join(f"{k} {n}" for k, n in result.pruned.by_reason)
            typer.echo(f"kvplan tune: no configuration of the space starts ({reasons})", err=True)
        else:
            from ..report.tune_common import slo_cell

            typer.echo(f"kvplan tune: no configuration meets the SLOs; closest: {c.label} ({slo_cell(c)})", err=True)
        raise typer.Exit(1)


