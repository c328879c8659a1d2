"""The plan flags of ``kvplan plan``, one copy for every command that takes them (plan, simulate,
calibrate, tune, preflight, profile): their typer declarations and the rules that turn them into
a :class:`kvplan.memory.PlanRequest`.

Each declaration is an ``Annotated`` type, so a command keeps its own default
(``tensor_parallel_size: plan_flags.TensorParallelSize = 1``) while the flag's names and help
come from here. Only typer and the standard library at module level: ``kvplan plan`` must start
fast, so the library is imported inside the functions.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Collection, Mapping, Optional, Sequence

import typer

from ..errors import UsageError

Model = Annotated[Optional[str], typer.Option(
    "--model", "-m", help="HF id or alias from the catalog, config.json, or model folder.")]
Gpu = Annotated[Optional[str], typer.Option("--gpu", help="GPU name from the catalog (see `kvplan gpus`).")]
GpuMemory = Annotated[Optional[str], typer.Option(
    "--gpu-memory", help="Total memory of one GPU: as CUDA reports it (79.19GiB), or the size it is sold as "
    "(24GB: read from the catalog's cards of that size, and the plan says how).")]
Device = Annotated[str, typer.Option("--device", help="cuda, or cpu for vLLM's CPU backend.")]
TensorParallelSize = Annotated[int, typer.Option(
    "--tensor-parallel-size", "-tp", help="GPUs each layer is split over (must divide the attention heads).")]
PipelineParallelSize = Annotated[int, typer.Option(
    "--pipeline-parallel-size", "-pp", help="Pipeline stages (the layers split into consecutive groups).")]
DataParallelSize = Annotated[int, typer.Option("--data-parallel-size", "-dp", help="Replicas of the model.")]
Dtype = Annotated[str, typer.Option(
    "--dtype", help="Weights and activations: auto (config.json's torch_dtype; float32 checkpoints served in "
    "bf16/fp16 as vLLM does), float16, bfloat16 or float32.")]
Quantization = Annotated[Optional[str], typer.Option(
    "--quantization", "-q", help="vLLM's --quantization: the checkpoint's own method (read from config.json when "
    "omitted), or online fp8 / bitsandbytes.")]
KvCacheDtype = Annotated[str, typer.Option(
    "--kv-cache-dtype", help="auto (the model dtype), fp8, fp8_e4m3, fp8_e5m2, fp8_ds_mla, … as vLLM names them.")]
GpuMemoryUtilization = Annotated[Optional[float], typer.Option(
    "--gpu-memory-utilization", help="Share of each GPU's memory vLLM may use, in (0, 1] (default: the vLLM "
    "version's, 0.92 from 0.20, 0.90 before).")]
MaxModelLen = Annotated[Optional[str], typer.Option(
    "--max-model-len", help="Tokens; 32k = 32000, 32K = 32768, auto = fit the cache.")]
MaxNumSeqs = Annotated[Optional[int], typer.Option(
    "--max-num-seqs", help="Most requests in one batch (default: vLLM's for the GPU and version).")]
MaxNumBatchedTokens = Annotated[Optional[str], typer.Option(
    "--max-num-batched-tokens", help="Token budget of one scheduler step (default: vLLM's).")]
BlockSize = Annotated[Optional[int], typer.Option(
    "--block-size", help="Tokens per KV block (default: the attention backend's, 16 on CUDA, 128 on CPU).")]
EnforceEager = Annotated[bool, typer.Option("--enforce-eager/--no-enforce-eager", help="No CUDA graphs (no graph memory).")]
VllmVersion = Annotated[Optional[str], typer.Option(
    "--vllm-version", help="Follow this vLLM version's rules: 0.6 to 0.33 (default 0.33).")]
Engine = Annotated[Optional[str], typer.Option("--engine", help="v0 or v1 where VLLM_USE_V1 chose (vLLM 0.7-0.10).")]
KvCacheMemory = Annotated[Optional[str], typer.Option(
    "--kv-cache-memory", help="KV memory per GPU (GiB unless a unit is given), as vLLM's 'Available KV cache memory'.")]
KvCacheMemoryBytes = Annotated[Optional[str], typer.Option(
    "--kv-cache-memory-bytes", help="vLLM's flag: exact KV bytes per GPU.")]
NumGpuBlocksOverride = Annotated[Optional[int], typer.Option(
    "--num-gpu-blocks-override", help="vLLM's flag: this many KV blocks, whatever the memory.")]
GpusPerNode = Annotated[int, typer.Option("--gpus-per-node", help="GPUs in one node (multi-node layouts).")]
DisableHybridKvCacheManager = Annotated[bool, typer.Option(
    "--disable-hybrid-kv-cache-manager", help="vLLM's flag: every layer gets full-context KV (no sliding-window savings).")]
Entrypoint = Annotated[str, typer.Option(
    "--entrypoint", help="serve (`vllm serve`) or offline (the LLM(...) class, also llm): vLLM gives them "
    "different batch defaults (8,192 batched tokens, not 2,048, offline on GPUs under 70 GiB).")]
FlashinferSampler = Annotated[Optional[bool], typer.Option(
    "--flashinfer-sampler/--no-flashinfer-sampler", help="Whether vLLM's sampler runs FlashInfer (default: the "
    "version's, with FlashInfer installed as in the release images). --no-flashinfer-sampler: PyTorch-native "
    "top-k/top-p, e.g. a plain `pip install vllm` of 0.10-0.11, whose wheels do not require flashinfer-python.")]

# Serve flags that move memory beyond the KV cache (kvplan.memory.lora, spec_decode, offload)
EnableLora = Annotated[bool, typer.Option("--enable-lora/--no-enable-lora", help="vLLM's flag: LoRA adapters "
    "(stacked A/B buffers for --max-loras adapters at --max-lora-rank on every module).")]
MaxLoras = Annotated[int, typer.Option("--max-loras", help="With --enable-lora: adapters in one batch (GPU slots).")]
MaxLoraRank = Annotated[int, typer.Option("--max-lora-rank", help="With --enable-lora: the largest adapter rank.")]
MaxCpuLoras = Annotated[Optional[int], typer.Option(
    "--max-cpu-loras", help="With --enable-lora: adapters cached in host memory (default: --max-loras).")]
LoraDtype = Annotated[str, typer.Option("--lora-dtype", help="auto (the model dtype), float16 or bfloat16.")]
SpeculativeConfig = Annotated[Optional[str], typer.Option(
    "--speculative-config", help="vLLM's JSON, e.g. '{\"method\": \"eagle3\", \"model\": \"...\", "
    "\"num_speculative_tokens\": 3}': the drafter's weights, KV layers and profile.")]
CpuOffloadGb = Annotated[float, typer.Option(
    "--cpu-offload-gb", help="GiB of weights per GPU kept in pinned host memory (read over PCIe each step).")]
SwapSpace = Annotated[Optional[float], typer.Option(
    "--swap-space", help="V0: GiB of CPU swap per GPU (default 4); checked against host memory up to vLLM 0.17.")]
HostMemory = Annotated[Optional[str], typer.Option(
    "--host-memory", help="The host's RAM (e.g. 512GiB): vLLM's swap-space check, and the host memory the "
    "serve flags ask for against it.")]
EnableChunkedPrefill = Annotated[Optional[bool], typer.Option(
    "--enable-chunked-prefill/--no-enable-chunked-prefill", help="vLLM's switch (default: the version's): without "
    "it a step holds a whole max-length prompt (V1 honours it from 0.12; V0 turns it on by itself above 32K).")]


def plan_flags_help() -> str:
    """One line per plan flag (names and help, from the declarations above): the help of commands
    that pass unknown options on to the plan (``kvplan profile``), so they show what they take."""
    import typing

    lines = []
    for decl in (Model, Gpu, GpuMemory, Device, TensorParallelSize, PipelineParallelSize, DataParallelSize, Dtype,
                 Quantization, KvCacheDtype, GpuMemoryUtilization, MaxModelLen, MaxNumSeqs, MaxNumBatchedTokens,
                 BlockSize, EnforceEager, VllmVersion, Engine, KvCacheMemory, KvCacheMemoryBytes,
                 NumGpuBlocksOverride, GpusPerNode, DisableHybridKvCacheManager, FlashinferSampler, EnableLora,
                 MaxLoras, MaxLoraRank, MaxCpuLoras, LoraDtype, SpeculativeConfig, CpuOffloadGb, SwapSpace,
                 EnableChunkedPrefill, HostMemory, Entrypoint):
        info = typing.get_args(decl)[1]
        # in Annotated form typer keeps the first name as ``default``, the others in ``param_decls``
        names = ", ".join(d for d in (info.default, *info.param_decls) if isinstance(d, str) and d.startswith("-"))
        lines.append(f"{names}: {info.help or ''}".rstrip(": "))
    lines.append("--from-log: A vLLM start-up log: use its measured KV memory and flags.")
    return "\n\n".join(lines)


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


def given_flags(ctx: typer.Context) -> frozenset:
    """The names of the parameters the user gave (on the command line or through the environment),
    from click's record of where each value came from, never by comparing with the default: an
    explicit ``-tp 1`` or ``--dtype auto`` is given as much as ``-tp 4``."""
    return frozenset(name for name in ctx.params
                     if (source := ctx.get_parameter_source(name)) is not None and source.name != "DEFAULT")


def plan_request_from_flags(*, model=None, gpu=None, gpu_memory=None, device="cuda", tensor_parallel_size=1,
                            pipeline_parallel_size=1, data_parallel_size=1, dtype="auto", quantization=None,
                            kv_cache_dtype="auto", gpu_memory_utilization=None, max_model_len=None,
                            max_num_seqs=None, max_num_batched_tokens=None, block_size=None, enforce_eager=False,
                            vllm_version=None, engine=None, kv_cache_memory=None, kv_cache_memory_bytes=None,
                            num_gpu_blocks_override=None, gpus_per_node=8, disable_hybrid_kv_cache_manager=False,
                            flashinfer_sampler=None, enable_lora=False, max_loras=1, max_lora_rank=16,
                            max_cpu_loras=None, lora_dtype="auto", speculative_config=None, cpu_offload_gb=0.0,
                            swap_space=None, enable_chunked_prefill=None, host_memory=None, entrypoint="serve",
                            log=None,
                            given: Collection[str] = frozenset()):
    """A :class:`PlanRequest` from ``kvplan plan``'s flags (as strings where the plan command takes
    strings: ``32k`` lengths, ``79GiB`` sizes), with the plan command's rules for each.

    ``log`` is a parsed vLLM start-up log (``--from-log``): its model, GPU memory, measured KV
    memory and serve flags fill in every flag not named in ``given`` (the flags the user gave,
    :func:`given_flags`); a given flag wins over the log even when it equals the default."""
    from ..hardware import custom_gpu, find_gpu, parse_size, read_gpu_memory
    from ..memory import PlanRequest
    from ..memory.defaults import entrypoint_kind

    flags_from_log: dict = log.args if log is not None else {}
    version_notes: tuple[str, ...] = ()  # notes for the plan: a log's version fallback, a custom GPU memory
    if log is not None:
        model = model or log.model
        if log.device == "cpu" and device == "cuda":
            device = "cpu"  # the log is the CPU backend's (its block size, its KV line): plan that
        if not vllm_version and log.vllm_version:
            from ..memory.semantics import nearest_supported_version

            vllm_version, note = nearest_supported_version(log.vllm_version)
            version_notes = (f"{note} (read from {log.path or 'the log'})",) if note else ()
    if not model:
        raise UsageError("--model is required" + (" (or a --from-log whose args name the model)"
                                                  if log is not None else ""))
    from ..models import load_model

    spec = load_model(model)
    if gpu_memory:
        size, read_as = read_gpu_memory(gpu_memory, "--gpu-memory")
        version_notes += (read_as,) if read_as else ()
        label = f"{size / (1 << 30):.2f} GiB"
        if gpu:
            from dataclasses import replace as _replace

            base_gpu = find_gpu(gpu)
            g = _replace(base_gpu, name=f"{base_gpu.name} with {label} (custom memory)", memory_bytes=size,
                         aliases=())
            version_notes += (f"--gpu {gpu} --gpu-memory {gpu_memory}: a {base_gpu.name} (its compute capability, "
                              f"bandwidth and FLOP/s) with {label} of memory instead of its "
                              f"{base_gpu.memory_gib:.2f} GiB (a MIG slice, a partition, or memory other processes "
                              "hold); every memory figure uses the given size.",)
        else:
            g = custom_gpu(size, name=f"{label} GPU")
    elif gpu:
        g = find_gpu(gpu)
    elif log is not None and log.total_gpu_memory_gib:
        g = custom_gpu(int(log.total_gpu_memory_gib * (1 << 30)), "CPU from log" if device == "cpu" else "GPU from log")
    elif device == "cpu":
        g = custom_gpu(parse_size("16GiB"), "CPU")
    elif kv_cache_memory or kv_cache_memory_bytes or (log is not None and log.available_kv_bytes is not None):
        # The KV memory is given or measured, so the GPU's size no longer sets the blocks; it still
        # picks vLLM's batch defaults (the 70-160 GiB tier), which the name says.
        g = custom_gpu(80 * (1 << 30), "unspecified GPU (80 GiB assumed for the batch defaults)")
    else:
        raise UsageError("give --gpu NAME (see `kvplan gpus`) or --gpu-memory SIZE")

    def pick(name, value):
        return value if name in given else flags_from_log.get(name, value)

    kv_bytes = None
    source = "kv_cache_memory"
    if kv_cache_memory_bytes:
        kv_bytes = human_int(str(kv_cache_memory_bytes), "--kv-cache-memory-bytes")
    elif kv_cache_memory:
        kv_bytes = parse_size(kv_cache_memory, "--kv-cache-memory")
    elif log is not None and log.available_kv_bytes is not None:
        kv_bytes, source = log.available_kv_bytes, "log"
    mml = human_int(str(max_model_len), "--max-model-len", allow_auto=True) if max_model_len else None
    if mml is None and log is not None:
        mml = log.max_model_len or flags_from_log.get("max_model_len")
    mnbt = human_int(str(max_num_batched_tokens), "--max-num-batched-tokens") if max_num_batched_tokens else \
        flags_from_log.get("max_num_batched_tokens")
    req = PlanRequest(
        model=spec, gpu=g, device=device,
        tensor_parallel_size=pick("tensor_parallel_size", tensor_parallel_size),
        pipeline_parallel_size=pick("pipeline_parallel_size", pipeline_parallel_size),
        data_parallel_size=pick("data_parallel_size", data_parallel_size),
        dtype=str(pick("dtype", dtype)),
        quantization=pick("quantization", quantization),
        kv_cache_dtype=str(pick("kv_cache_dtype", kv_cache_dtype)),
        gpu_memory_utilization=pick("gpu_memory_utilization", gpu_memory_utilization if log is None or
                                    gpu_memory_utilization is not None else log.gpu_memory_utilization),
        max_model_len=mml,
        max_num_seqs=pick("max_num_seqs", max_num_seqs),
        max_num_batched_tokens=mnbt,
        block_size=pick("block_size", block_size),
        enforce_eager=bool(pick("enforce_eager", enforce_eager)),
        vllm_version=vllm_version,
        engine=engine or (log.engine if log is not None else None),
        kv_cache_memory_bytes=kv_bytes,
        num_gpu_blocks_override=pick("num_gpu_blocks_override", num_gpu_blocks_override),
        gpus_per_node=gpus_per_node,
        disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
        # a given --[no-]flashinfer-sampler, else the sampler the log's engine said it runs
        flashinfer_sampler=log.flashinfer_sampler if flashinfer_sampler is None and log is not None
        else flashinfer_sampler,
        kv_memory_source=source,
        notes=version_notes,
        enable_lora=bool(pick("enable_lora", enable_lora)), max_loras=pick("max_loras", max_loras),
        max_lora_rank=pick("max_lora_rank", max_lora_rank), max_cpu_loras=pick("max_cpu_loras", max_cpu_loras),
        lora_dtype=str(pick("lora_dtype", lora_dtype)),
        speculative_config=_speculative(pick("speculative_config", speculative_config), spec),
        cpu_offload_gb=float(pick("cpu_offload_gb", cpu_offload_gb) or 0.0), swap_space=pick("swap_space", swap_space),
        enable_chunked_prefill=pick("enable_chunked_prefill", enable_chunked_prefill),
        host_memory_bytes=parse_size(host_memory, "--host-memory") if host_memory else None,
        entrypoint=entrypoint_kind(entrypoint or "serve"),
    )
    if log is not None and source == "log":
        per_stage = log.available_kv_per_stage(req.tensor_parallel_size, req.pipeline_parallel_size)
        if per_stage is not None:
            from dataclasses import replace

            req = replace(req, kv_cache_memory_per_stage=per_stage)
    return req


def _speculative(value, target):
    """``--speculative-config`` parsed, with the drafter's config.json where kvplan can load it (a path,
    a catalog id, or the hub when online); otherwise the planner derives the head from the target."""
    if value is None:
        return None
    from dataclasses import replace

    from ..errors import UnknownModelError
    from ..memory.spec_decode import parse_speculative_config
    from ..models import load_model

    config = parse_speculative_config(value)
    if config.model and config.draft is None:
        try:
            config = replace(config, draft=load_model(config.model))
        except (UsageError, UnknownModelError):
            pass  # no config to read: an EAGLE head is derived from the target, a draft model is refused
    return config


#: the keyword arguments of :func:`plan_request_from_flags` that are flags (named as the flags)
PLAN_KEYS = ("model", "gpu", "gpu_memory", "device", "tensor_parallel_size", "pipeline_parallel_size",
             "data_parallel_size", "dtype", "quantization", "kv_cache_dtype", "gpu_memory_utilization",
             "max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size", "enforce_eager",
             "vllm_version", "engine", "kv_cache_memory", "kv_cache_memory_bytes", "num_gpu_blocks_override",
             "gpus_per_node", "disable_hybrid_kv_cache_manager", "flashinfer_sampler", "enable_lora", "max_loras",
             "max_lora_rank", "max_cpu_loras", "lora_dtype", "speculative_config", "cpu_offload_gb", "swap_space",
             "enable_chunked_prefill", "host_memory", "entrypoint")

#: ``kvplan plan``'s parameters that shape its output, not the plan
OUTPUT_OPTIONS = ("fmt", "compact", "requests", "tokenizer", "serve_config", "strict")


def plan_flags_of(values: Mapping[str, Any], *, skip_none: bool = False) -> dict:
    """The plan flags among a command's parameters (``locals()``, a config file's values);
    ``skip_none`` leaves unset ones to :func:`plan_request_from_flags`' defaults."""
    return {k: values[k] for k in PLAN_KEYS if k in values and not (skip_none and values[k] is None)}


def plan_from_flags(*, from_log: Optional[Path] = None, given: Optional[Collection[str]] = None, **flags):
    """``kvplan plan``'s result for its flags: (PlanResult, the parsed start-up log or None). With
    ``from_log`` the plan takes the log's measured values and is compared with what vLLM logged;
    ``given`` names the flags that win over the log (default: every flag passed here)."""
    from ..memory import plan
    from ..memory.compare import compare_with_log

    log = None
    if from_log is not None:
        from ..memory.startup_log import read_startup_log

        log = read_startup_log(from_log)
    req = plan_request_from_flags(log=log, given=frozenset(flags) if given is None else given, **flags)
    result = plan(req)
    if log is not None:
        if req.kv_cache_memory_bytes is None:
            from dataclasses import replace

            from ..memory.compare import kv_bytes_from_blocks

            measured = kv_bytes_from_blocks(log, result, req)  # the blocks vLLM counted, not an estimate
            if measured:
                req = replace(req, kv_cache_memory_bytes=measured, kv_memory_source="log")
                result = plan(req)
        result = compare_with_log(result, req, log)
    return result, log


@lru_cache(maxsize=None)
def cli_command(name: str):
    """The click command of ``kvplan NAME`` (built once: typer rebuilds every command's parameters
    from their annotations, ~0.1 s, each time it is asked)."""
    from .main import app

    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def plan_from_args(plan_args: Sequence[str]):
    """The PlanResult ``kvplan plan PLAN_ARGS`` computes, in this process: the plan command's own
    parser reads the flags (their names, defaults and checks), so a plan is spelled the same way
    everywhere. An unknown or malformed flag is a UsageError naming it."""
    command = cli_command("plan")
    try:
        ctx = command.make_context("plan", [str(a) for a in plan_args])
    except typer.TyperException as exc:  # typer's (vendored) click: no such option, a bad value
        raise UsageError(f"plan flags: {exc.format_message()}") from None
    # the plan command's output options (format, --requests' traffic, --serve-config) are not the plan
    flags = {k: v for k, v in ctx.params.items() if k not in OUTPUT_OPTIONS}
    return plan_from_flags(given=given_flags(ctx), **flags)[0]

