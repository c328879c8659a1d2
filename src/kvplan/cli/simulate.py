"""``kvplan simulate``: the plan flags of ``kvplan plan`` plus traffic (a rate and length
distributions, or a request log to replay) -> predicted latency percentiles, throughput,
preemptions, queue and KV usage over time. Thin: parse, call :mod:`kvplan.sim`, render.

Only typer and the standard library at module level (``kvplan plan`` must start fast).
Exit codes: 0 done (and every ``--slo`` met); 1 an SLO is missed, or the plan does not start
(vLLM's own error text); 2 usage errors.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError


def _fail(exc: Exception, code: int = 2) -> None:
    typer.echo(f"kvplan: error: {exc}", err=True)
    raise typer.Exit(code)


def plan_request_from_flags(*, model, gpu=None, gpu_memory=None, device="cuda", tensor_parallel_size=1,
                            pipeline_parallel_size=1, data_parallel_size=1, dtype="auto", quantization=None,
                            kv_cache_dtype="auto", gpu_memory_utilization=None, max_model_len=None,
                            max_num_seqs=None, max_num_batched_tokens=None, block_size=None, enforce_eager=False,
                            vllm_version=None, kv_cache_memory=None, kv_cache_memory_bytes=None,
                            num_gpu_blocks_override=None, gpus_per_node=8, disable_hybrid_kv_cache_manager=False):
    """A :class:`PlanRequest` from ``kvplan plan``'s flags (as strings where the plan command takes
    strings: ``32k`` lengths, ``79GiB`` sizes), with the plan command's rules for each."""
    from ..hardware import custom_gpu, find_gpu, parse_size
    from ..memory import PlanRequest
    from ..models import load_model
    from .main import human_int

    if not model:
        raise UsageError("--model is required")
    spec = load_model(model)
    if gpu_memory:
        g = custom_gpu(parse_size(gpu_memory, "--gpu-memory"), name=gpu or f"{gpu_memory} GPU")
    elif gpu:
        g = find_gpu(gpu)
    elif device == "cpu":
        g = custom_gpu(parse_size("16GiB"), "CPU")
    else:
        raise UsageError("give --gpu NAME (see `kvplan gpus`) or --gpu-memory SIZE")
    kv_bytes = None
    if kv_cache_memory_bytes:
        kv_bytes = human_int(str(kv_cache_memory_bytes), "--kv-cache-memory-bytes")
    elif kv_cache_memory:
        kv_bytes = parse_size(kv_cache_memory, "--kv-cache-memory")
    mml = human_int(str(max_model_len), "--max-model-len", allow_auto=True) if max_model_len else None
    mnbt = human_int(str(max_num_batched_tokens), "--max-num-batched-tokens") if max_num_batched_tokens else None
    return PlanRequest(model=spec, gpu=g, device=device, tensor_parallel_size=tensor_parallel_size,
                       pipeline_parallel_size=pipeline_parallel_size, data_parallel_size=data_parallel_size,
                       dtype=dtype, quantization=quantization, kv_cache_dtype=kv_cache_dtype,
                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=mml, max_num_seqs=max_num_seqs,
                       max_num_batched_tokens=mnbt, block_size=block_size, enforce_eager=enforce_eager,
                       vllm_version=vllm_version, kv_cache_memory_bytes=kv_bytes,
                       num_gpu_blocks_override=num_gpu_blocks_override, gpus_per_node=gpus_per_node,
                       disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager)


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)


def simulate_cmd(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="HF id or alias from the catalog, config.json, or model folder."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU name from the catalog (see `kvplan gpus`)."),
    gpu_memory: Optional[str] = typer.Option(None, "--gpu-memory", help="Total memory of one GPU, e.g. 79.19GiB."),
    device: str = typer.Option("cuda", "--device", help="cuda, or cpu for vLLM's CPU backend."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp"),
    data_parallel_size: int = typer.Option(1, "--data-parallel-size", "-dp"),
    dtype: str = typer.Option("auto", "--dtype"),
    quantization: Optional[str] = typer.Option(None, "--quantization", "-q"),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype"),
    gpu_memory_utilization: Optional[float] = typer.Option(None, "--gpu-memory-utilization"),
    max_model_len: Optional[str] = typer.Option(None, "--max-model-len", help="Tokens; 32k = 32000, 32K = 32768."),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs"),
    max_num_batched_tokens: Optional[str] = typer.Option(None, "--max-num-batched-tokens"),
    block_size: Optional[int] = typer.Option(None, "--block-size"),
    enforce_eager: bool = typer.Option(False, "--enforce-eager"),
    vllm_version: Optional[str] = typer.Option(None, "--vllm-version"),
    kv_cache_memory: Optional[str] = typer.Option(None, "--kv-cache-memory", help="KV memory per GPU (GiB unless a unit is given)."),
    kv_cache_memory_bytes: Optional[str] = typer.Option(None, "--kv-cache-memory-bytes"),
    num_gpu_blocks_override: Optional[int] = typer.Option(None, "--num-gpu-blocks-override"),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node"),
    disable_hybrid_kv_cache_manager: bool = typer.Option(False, "--disable-hybrid-kv-cache-manager"),
    # traffic
    rate: Optional[float] = typer.Option(None, "--rate", help="Requests per second (with --requests: replay at this rate)."),
    requests: Optional[str] = typer.Option(None, "--requests", help="A request log to replay (its timestamps unless --rate)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="With --requests: count prompts with this tokenizer."),
    num_requests: Optional[int] = typer.Option(None, "--num-requests", help="How many requests (default 1000 with --rate)."),
    duration: Optional[str] = typer.Option(None, "--duration", help="Arrivals for this long, e.g. 60s, 5m."),
    input_len: str = typer.Option("1024", "--input-len", help="N, uniform:LO,HI, normal:MEAN,STD (colon forms too)."),
    output_len: str = typer.Option("256", "--output-len", help="Tokens generated per request, same syntax."),
    arrival: str = typer.Option("poisson", "--arrival", help="constant, poisson or gamma:K."),
    seed: int = typer.Option(0, "--seed"),
    profile: Optional[Path] = typer.Option(None, "--profile", help="Step-time profile from `kvplan calibrate` (default: roofline prior)."),
    slo: Optional[str] = typer.Option(None, "--slo", help="Gates, e.g. ttft_p99=2s,tpot_p99=100ms."),
    no_prefix_caching: bool = typer.Option(False, "--no-enable-prefix-caching", help="vLLM's --no-enable-prefix-caching."),
    long_prefill_token_threshold: int = typer.Option(0, "--long-prefill-token-threshold"),
    no_async_scheduling: bool = typer.Option(False, "--no-async-scheduling", help="vLLM's --no-async-scheduling."),
    saturation_search: bool = typer.Option(False, "--find-saturation", help="Also bisect the rate for the max sustainable QPS (at --slo)."),
    capacity: bool = typer.Option(False, "--capacity", help="Max sustainable QPS at the SLO for each max_model_len of the plan's ladder."),
    interval: str = typer.Option("1s", "--timeline-interval", help="Timeline resolution."),
    per_request: bool = typer.Option(False, "--per-request", help="Add every request's times to the JSON."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or markdown."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the JSON result here."),
    html: Optional[Path] = typer.Option(None, "--html", help="Write an HTML report (timeline, latency CDF, throughput-latency curve)."),
) -> None:
    """Predict vLLM's latency and throughput for a traffic mix on a plan, step by step (V1 scheduler)."""
    from ..errors import KvplanError

    try:
        if fmt not in ("table", "json", "markdown"):
            raise UsageError(f"--format must be table, json or markdown, got {fmt!r}")
        from ..slo import parse_seconds, parse_slo
        from ..workload.lengthdist import parse_length

        slos = parse_slo(slo)
        dur = parse_seconds(duration, "--duration") if duration else None
        step = parse_seconds(interval, "--timeline-interval")
        if not step > 0:
            raise UsageError("--timeline-interval must be positive")
        if rate is None and not requests:
            raise UsageError("give --rate R (synthetic traffic) or --requests LOG (replay)")
        if rate is not None and not rate > 0:
            raise UsageError(f"--rate must be positive, got {rate}")
        if num_requests is not None and num_requests < 1:
            raise UsageError("--num-requests must be at least 1")
        in_dist = parse_length(input_len, "--input-len")
        out_dist = parse_length(output_len, "--output-len")
        req = plan_request_from_flags(
            model=model, gpu=gpu, gpu_memory=gpu_memory, device=device, tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size, data_parallel_size=data_parallel_size, dtype=dtype,
            quantization=quantization, kv_cache_dtype=kv_cache_dtype, gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            block_size=block_size, enforce_eager=enforce_eager, vllm_version=vllm_version,
            kv_cache_memory=kv_cache_memory, kv_cache_memory_bytes=kv_cache_memory_bytes,
            num_gpu_blocks_override=num_gpu_blocks_override, gpus_per_node=gpus_per_node,
            disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager)
        from ..memory import plan
        from ..sim import StepTimeProfile, simulate, synthetic_trace

        plan_result = plan(req, what_ifs=False)
        if not plan_result.startup.ok:
            _fail(UsageError(f"the plan does not start: {plan_result.startup.error}"), code=1)
        prof = StepTimeProfile.load(profile) if profile else None

        def make_trace(r: float):
            if requests:
                from ..sim import trace_from_log

                return trace_from_log([requests], tokenizer=tokenizer, rate=r, arrival=arrival, seed=seed,
                                      num_requests=num_requests)
            n = num_requests if num_requests is not None or dur is not None else 1000
            return synthetic_trace(r, num_requests=n, duration_s=dur, input_len=in_dist, output_len=out_dist,
                                   arrival=arrival, seed=seed)

        trace = make_trace(rate)
        opts = dict(enable_prefix_caching=not no_prefix_caching,
                    long_prefill_token_threshold=long_prefill_token_threshold,
                    async_scheduling=False if no_async_scheduling else None)
        result = simulate(req, trace, profile=prof, plan_result=plan_result, timeline_interval_s=step, slo=slos,
                          per_request=per_request, **opts)
        d = result.to_dict()
        if (saturation_search or html is not None) and (rate is not None or requests):
            # the HTML report's throughput-latency curve is the bisection's probes
            from ..sim import find_saturation

            d["saturation_search"] = find_saturation(req, make_trace, slo=slos, profile=prof,
                                                     plan_result=plan_result, **opts)
        if capacity:
            from ..sim import capacity_boundary

            d["capacity_boundary"] = capacity_boundary(req, make_trace, slo=slos, profile=prof, **opts)
    except typer.Exit:
        raise
    except UsageError as exc:
        _fail(exc)
        return
    except KvplanError as exc:
        _fail(exc, code=1)
        return
    _emit(d, fmt, output, html)
    raise typer.Exit(0 if d["verdict"]["passed"] else 1)


def _emit(d: dict, fmt: str, output: Optional[Path], html: Optional[Path]) -> None:
    import json

    try:
        if output is not None:
            output.write_text(json.dumps(d, indent=2) + "\n", encoding="utf-8")
        if html is not None:
            from ..report.sim_html import render_html

            html.write_text(render_html(d), encoding="utf-8")
    except OSError as exc:
        _fail(UsageError(f"cannot write {exc.filename}: {exc.strerror}"))
    if fmt == "json":
        typer.echo(json.dumps(d, indent=2))
    elif fmt == "markdown":
        from ..report.sim_markdown import render_markdown

        typer.echo(render_markdown(d))
    else:
        from rich.console import Console

        from ..report.sim_text import render_table

        render_table(d, Console())
