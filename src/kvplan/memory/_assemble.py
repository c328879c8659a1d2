"""Stage 3 of ``plan()``: the :class:`PlanResult` assembled from the resolved configuration and
its KV sizing: the memory and KV figures, the start-up verdict (with the layout that would start a
failing one), the capacity log lines, the serve command, the naive formula and the what-ifs.

The fit search, the serve command's own verdict and the what-ifs re-plan changed requests:
``replan`` is ``plan`` itself, passed in so that this module does not import the planner.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from ..errors import UsageError
from ..models import params as mparams
from . import admission
from ._resolve import ResolvedConfig
from ._sizing import BlockSizing, KVSizing
from .budget import BudgetTerms
from .borderline import SETTLE, error_band_bytes, is_borderline
from .defaults import entrypoint_kind
from .engine_spec import EngineSpec
from .kv_specs import kv_spec_for
from .launch import data_parallel_launch, display, multi_node, serve_argv, serve_yaml
from .request import PlanRequest
from .lora import lora_memory
from .offload import num_cpu_blocks, swap_space_bytes
from .result import (
    Headroom,
    HostMemory,
    KVGroupInfo,
    LoRAInfo,
    KVInfo,
    MemoryInfo,
    ModelInfo,
    NaiveFormula,
    ParallelInfo,
    PlanResult,
    ResolvedFlags,
    SpecDecodeInfo,
    StartupInfo,
    WhatIf,
    to_gib,
)
from .semantics import VllmSemantics

#: errors of vLLM's configuration checks: it stops before it profiles memory
CONFIG_ERRORS = ("max_model_len_above_derived", "tp_heads", "block_size", "scheduler_config", "lora_config",
                 "speculative_config", "swap_space")

Replan = Callable[..., PlanResult]  # plan(req, what_ifs=..., fit_search=...)


def assemble(config: ResolvedConfig, sized: KVSizing, *, what_ifs: bool, fit_search: Optional[bool],
             replan: Replan) -> PlanResult:
    """The result object; ``fit_search`` (default: with the what-ifs) adds the smallest layout that
    starts a failing configuration and whether the serve command offered starts."""
    req, sem, spec, gpu = config.request, config.semantics, config.model, config.gpu
    layout, blocks = config.layout, sized.blocks
    max_model_len = sized.max_model_len
    errors, notes = sized.errors, list(sized.notes)
    first_error = errors[0] if errors else None
    suggested = first_error.suggested_max_model_len if first_error else None
    if first_error and first_error.kind in CONFIG_ERRORS:
        notes.append("vLLM stops at its configuration checks, before it profiles memory or logs a KV cache line; "
                     "the KV figures show what the rest of the configuration would give.")

    search = what_ifs if fit_search is None else fit_search
    startup = _startup(config, sized, first_error, search, replan)
    run_len = max_model_len
    if first_error and first_error.kind in ("max_model_len_too_large", "max_model_len_above_derived") and suggested:
        run_len = suggested
        notes.append(f"The serve command uses --max-model-len {suggested}: the largest length vLLM accepts here; "
                     f"{max_model_len} fails at start-up.")
    serve_starts = not errors
    if errors and run_len != max_model_len and search:
        serve_starts = replan(replace(req, max_model_len=run_len), what_ifs=False, fit_search=False).startup.ok
    flags = _serve_flags(req, config.gpu_memory_utilization, run_len, config.max_num_seqs, config.dtype,
                         sized.max_num_batched_tokens)
    budget = sized.budget
    argv = serve_argv(spec.name, flags)
    resolved = ResolvedFlags(
        device=req.device, gpu=gpu.name, gpu_memory_bytes=gpu.memory_bytes, dtype=config.dtype,
        quantization=config.quantization.method if config.quantization else None,
        kv_cache_dtype=config.kv_cache_dtype.name, gpu_memory_utilization=config.gpu_memory_utilization,
        max_model_len=max_model_len, max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=sized.max_num_batched_tokens, block_size=layout.block_size,
        enforce_eager=req.enforce_eager, hybrid_kv_cache_manager=config.hybrid_kv_cache_manager,
        in_flight_tokens=config.in_flight_tokens, chunked_prefill=config.chunked_prefill,
        lora=_lora_info(config, budget), speculative=_spec_info(config, budget), cpu_offload_gb=req.cpu_offload_gb,
    )
    model_info = ModelInfo(
        id=spec.name, source=spec.source, architecture=(spec.architectures or (spec.model_type,))[0],
        summary=spec.describe(), num_layers=spec.num_layers, params=mparams.count_params(spec),
        params_active=mparams.active_params(spec), published_params=spec.published_params,
        max_position_embeddings=spec.max_len_keys.get("max_position_embeddings"),
    )
    tensor_parallel_size, pipeline_parallel_size = config.tensor_parallel_size, config.pipeline_parallel_size
    data_parallel_size, world_size = config.data_parallel_size, config.world_size
    nodes = -(-world_size // req.gpus_per_node)
    if world_size <= req.gpus_per_node:  # replicas share a node: as many as fit side by side
        nodes = -(-data_parallel_size // (req.gpus_per_node // world_size))
    else:
        nodes *= data_parallel_size
    parallel = ParallelInfo(tensor_parallel_size, pipeline_parallel_size, data_parallel_size, world_size,
                            world_size * data_parallel_size, req.gpus_per_node, nodes)
    naive = _naive(config, max_model_len, blocks)
    what_if_rows = _what_ifs(replace(req, max_model_len=run_len), config.gpu_memory_utilization,
                             config.kv_cache_dtype.name, replan, sem) if what_ifs else ()
    room = headroom(config, sized)
    if room is not None and startup.ok and not room.ok:
        startup = replace(startup, warnings=startup.warnings + (headroom_warning(room, config.gpu_memory_utilization),))
    install_note = _install_dependent_verdict(what_if_rows, startup.ok)
    if install_note:  # the sign of the margin is not known: as a verdict within the estimate's error
        notes += install_note
        startup = replace(startup, borderline=True, settle_with=startup.settle_with or SETTLE_INSTALL)
    memory, kv = _memory(config, sized), _kv(config, sized)
    serve_command = display(argv)
    return PlanResult(
        vllm_semantics=sem.label, engine=sem.engine, model=model_info, parallel=parallel, flags=resolved,
        memory=memory, kv=kv, startup=startup,
        capacity_table=sized.capacity_table, what_if=tuple(what_if_rows),
        naive=naive, serve_argv=tuple(argv), serve_command=serve_command,
        serve_config_yaml=serve_yaml(spec.name, flags),
        multi_node=multi_node(argv, tensor_parallel_size, pipeline_parallel_size, req.gpus_per_node),
        notes=tuple(notes), measured=dict(req.measured or {}),
        serve_command_starts=serve_starts, what_if_max_model_len=run_len if what_ifs else None,
        what_if_at_fallback_length=bool(what_ifs and run_len != max_model_len),
        derived_max_model_len=int(config.derived_max_model_len), headroom=room,
        dp_launch=data_parallel_launch(argv, tp=tensor_parallel_size, pp=pipeline_parallel_size,
                                       dp=data_parallel_size, gpus_per_node=req.gpus_per_node,
                                       version=tuple(sem.version)),
        engine_spec=_engine_spec(config, resolved, memory, kv, startup, serve_command),
    )


def _engine_spec(config: ResolvedConfig, flags: ResolvedFlags, memory: MemoryInfo, kv: KVInfo,
                 startup: StartupInfo, serve_command: str) -> EngineSpec:
    """The engine the simulator runs, from the same values the result reports (never recomputed)."""
    return EngineSpec(
        model=config.model, gpu=config.gpu, device=flags.device, semantics=config.semantics,
        tensor_parallel_size=config.tensor_parallel_size, pipeline_parallel_size=config.pipeline_parallel_size,
        data_parallel_size=config.data_parallel_size, gpus_per_node=config.request.gpus_per_node,
        dtype=flags.dtype, quantization=config.quantization, kv_cache_dtype=flags.kv_cache_dtype,
        enforce_eager=bool(flags.enforce_eager), gpu_memory_utilization=flags.gpu_memory_utilization,
        max_model_len=flags.max_model_len, max_num_seqs=flags.max_num_seqs,
        max_num_batched_tokens=flags.max_num_batched_tokens, in_flight_tokens=flags.in_flight_tokens,
        block_size=kv.block_size, num_gpu_blocks=kv.num_gpu_blocks, kv_cache_tokens=kv.kv_cache_tokens,
        kv_groups=kv.groups, kv_bytes_per_token_per_gpu=kv.bytes_per_token_per_gpu,
        weights_bytes_per_gpu=max(memory.weights_bytes_per_stage or (int(memory.weights_gib_per_gpu * (1 << 30)),)),
        starts=startup.ok, startup_error=startup.error, serve_command=serve_command,
        entrypoint=config.request.entrypoint)


def headroom(config: ResolvedConfig, sized: KVSizing) -> Optional[Headroom]:
    """The one headroom rule's figures (result.Headroom); None on CPU, whose KV cache is sized
    from its own setting, not from a share of a GPU."""
    if config.device != "cuda":
        return None
    from .budget import cudagraph_estimate_bytes

    sem, req, budget = config.semantics, config.request, sized.budget
    total = config.gpu.memory_bytes
    after = 0
    if not sem.subtracts_cudagraph_estimate and not req.enforce_eager:
        layers = max(len(st.layers) for st in mparams.weights_per_rank(
            req.model, config.tensor_parallel_size, config.pipeline_parallel_size, 2, None))
        after = cudagraph_estimate_bytes(req.model, config.tensor_parallel_size, 2, config.max_num_seqs, layers)
    inside = budget.non_kv_bytes + sized.blocks.num_gpu_blocks * sized.blocks.bytes_per_block
    outside = budget.preexisting_bytes if sem.charged_preexisting(1, 1) == 0 else 0
    return Headroom(to_gib(total), to_gib(inside + outside + after), to_gib(inside), to_gib(outside), to_gib(after),
                    to_gib(error_band_bytes(total)))


def headroom_warning(room: Headroom, gpu_memory_utilization: float) -> str:
    return (f"Only {room.left_gib:.2f} GiB of the GPU's {room.total_gib:.2f} GiB is left outside vLLM's budget at "
            f"--gpu-memory-utilization {gpu_memory_utilization:g} (peak {room.peak_gib:.2f} GiB), less than the "
            f"{room.band_gib:.2f} GiB the estimate's error band needs: fragmentation, NCCL buffers or another process "
            "can push it into CUDA out of memory (kvplan preflight's plan_memory check, the same rule).")


def _memory(config: ResolvedConfig, sized: KVSizing) -> MemoryInfo:
    budget, available = sized.budget, sized.available_kv_bytes
    bytes_per_block = config.layout.bytes_per_block
    return MemoryInfo(
        total_gib_per_gpu=to_gib(config.gpu.memory_bytes),
        requested_gib=to_gib(budget.requested_bytes),
        weights_gib_per_gpu=to_gib(budget.weights_bytes),
        non_torch_gib=to_gib(budget.non_torch_bytes),
        activation_peak_gib=to_gib(budget.activation_bytes),
        cudagraph_gib=to_gib(budget.cudagraph_bytes),
        non_kv_gib=to_gib(budget.non_kv_bytes),
        available_kv_cache_gib=to_gib(min(available)),
        available_kv_cache_bytes=int(min(available)),
        kv_cache_used_gib=to_gib(sized.blocks.num_gpu_blocks * sized.blocks.bytes_per_block),
        preexisting_gib=to_gib(budget.preexisting_bytes),
        source=sized.source,
        weights_bytes_per_stage=tuple(s.bytes_per_rank for s in config.weights),
        available_kv_bytes_per_stage=tuple(int(a) for a in available),
        num_gpu_blocks_per_stage=tuple(max(int(a), 0) // b for a, b in zip(available, bytes_per_block)),
        lora_gib=to_gib(budget.lora_bytes), draft_weights_gib=to_gib(budget.draft_weights_bytes),
        cpu_offload_gib=to_gib(budget.offloaded_bytes), loaded_gib=to_gib(budget.loaded_bytes),
        host=_host_memory(config, sized),
        unmodelled_gib=to_gib(_unmodelled_bytes(sized)),
    )


def _host_memory(config: ResolvedConfig, sized: KVSizing) -> HostMemory | None:
    """CPU memory one GPU worker needs for --cpu-offload-gb, --max-cpu-loras and V0's --swap-space."""
    req, sem = config.request, config.semantics
    offload = sized.budget.offloaded_bytes
    lora_cache = 0
    if config.lora is not None:  # whole adapters (unsharded), as loaded from their checkpoints
        lora_cache = lora_memory(config.model, config.lora, sem, 1, range(config.model.num_layers), True, True,
                                 config.dtype_bytes).host_bytes
    cpu_blocks = num_cpu_blocks(sem, req.swap_space, sized.blocks.bytes_per_block)
    swap = swap_space_bytes(req.swap_space) if sem.engine == "V0" else 0
    if not (offload or lora_cache or swap):
        return None
    return HostMemory(to_gib(offload), to_gib(lora_cache), to_gib(swap), cpu_blocks)


def _lora_info(config: ResolvedConfig, budget: BudgetTerms) -> LoRAInfo | None:
    lora = config.lora
    if lora is None:
        return None
    whole = lora_memory(config.model, lora, config.semantics, 1, range(config.model.num_layers), True, True,
                        config.dtype_bytes)
    return LoRAInfo(lora.max_loras, lora.max_lora_rank, lora.cpu_loras, lora.lora_dtype, to_gib(budget.lora_bytes),
                    to_gib(whole.adapter_bytes), whole.extra_vocab, config.semantics.lora_cudagraph_cases)


def _spec_info(config: ResolvedConfig, budget: BudgetTerms) -> SpecDecodeInfo | None:
    d = config.drafter
    if d is None:
        return None
    return SpecDecodeInfo(d.method, d.num_speculative_tokens, d.model, len(d.layers), to_gib(d.weights_bytes),
                          d.lookahead_tokens, d.derived)


def _unmodelled_bytes(sized: KVSizing) -> int:
    """What the estimate states it does not size (budget.Unmodelled), on the reported stage."""
    if sized.source != "estimate":
        return 0
    return sum(term.bytes for term in sized.budget.unmodelled)


def _kv(config: ResolvedConfig, sized: KVSizing) -> KVInfo:
    layout, blocks, stages = config.layout, sized.blocks, config.stages
    layer_specs = {i: g.spec for g in layout.groups for i in g.layers}
    per_stage_tok = [sum(layer_specs[i].bytes_per_token() or 0 for i in st) for st in stages]
    # per token of the whole model, unsharded (TP 1), at the asked block size
    logical_tok = sum(kv_spec_for(layer.mixer, 1, config.block_size, config.kv_cache_dtype,
                                  config.dtype_bytes).bytes_per_token() or 0 for layer in config.model.layers)
    cpu_blocks = num_cpu_blocks(config.semantics, config.request.swap_space, blocks.bytes_per_block)
    groups = tuple(KVGroupInfo(g.spec.kind, len(g.layers), g.spec.page_size_bytes,
                               g.spec.blocks_per_request(blocks.ctx), g.spec) for g in layout.groups)
    return KVInfo(
        bytes_per_token_per_gpu=int(max(per_stage_tok)),
        bytes_per_token_total=int(sum(per_stage_tok) * config.tensor_parallel_size),
        bytes_per_token_logical=int(logical_tok), block_size=layout.block_size,
        bytes_per_block=blocks.bytes_per_block, bytes_per_block_per_stage=layout.bytes_per_block,
        num_gpu_blocks=blocks.num_gpu_blocks, usable_blocks=max(blocks.num_gpu_blocks - 1, 0),
        blocks_per_request=blocks.blocks_per_request, kv_cache_tokens=blocks.kv_cache_tokens,
        max_concurrency=round(blocks.max_concurrency, 4), max_concurrency_for_tokens=sized.max_model_len,
        log_lines=_log_lines(config.semantics, config.device, blocks, cpu_blocks),
        groups=groups, padding_layers=layout.padding_layers, padding_waste=round(layout.padding_waste(), 4),
    )


def _startup(config: ResolvedConfig, sized: KVSizing, first_error: Optional[admission.StartupError],
             search: bool, replan: Replan) -> StartupInfo:
    gpu_memory_bytes = config.gpu.memory_bytes
    margin = None
    if not sized.weights_oom and not (
            first_error and first_error.kind in CONFIG_ERRORS):
        margin = sized.blocks.check_memory_bytes - sized.needed_bytes
    # the estimate's own error band, widened by what it states it does not model
    band = error_band_bytes(gpu_memory_bytes) + _unmodelled_bytes(sized) if sized.source == "estimate" else None
    kv_verdict = first_error is None or first_error.kind in ("max_model_len_too_large", "no_kv_memory")
    borderline = bool(band is not None and margin is not None and kv_verdict
                      and (is_borderline(margin, gpu_memory_bytes) or abs(margin) <= band))
    fits_with = None
    if first_error and search:
        from .layout_fit import smallest_fitting_layout

        fits_with = smallest_fitting_layout(config.request, first_error.kind,
                                            lambda r: replan(r, what_ifs=False, fit_search=False))
    return StartupInfo(ok=not sized.errors, error=first_error.message if first_error else None,
                       error_kind=first_error.kind if first_error else None,
                       suggested_max_model_len=first_error.suggested_max_model_len if first_error else None,
                       max_fitting_model_len=sized.max_fitting_model_len,
                       warnings=config.warnings, fits_with=fits_with,
                       kv_margin_gib=to_gib(margin) if margin is not None else None,
                       estimate_error_gib=to_gib(band) if band is not None else None,
                       borderline=borderline, settle_with=SETTLE if borderline else None)


def _log_lines(sem: VllmSemantics, device: str, blocks: BlockSizing, cpu_blocks: int) -> tuple[str, ...]:
    """The capacity lines vLLM logs at start-up, in the version's wording."""
    pool = sem.pool_name(device)
    max_model_len = blocks.ctx.max_model_len
    style = sem.capacity_log_style
    if style == "v1-033":
        return (f"{pool} KV cache size: {blocks.kv_cache_tokens:,} tokens, Maximum concurrency for "
                f"{max_model_len:,} tokens per request: {blocks.max_concurrency:.2f}x",)
    if style.startswith("v1"):
        return (f"{pool} KV cache size: {blocks.kv_cache_tokens:,} tokens",
                f"Maximum concurrency for {max_model_len:,} tokens per request: {blocks.max_concurrency:.2f}x")
    lines = f"# {sem.v0_device_name} blocks: {blocks.num_gpu_blocks}, # CPU blocks: {cpu_blocks}"
    if style == "v0-concurrency":
        return (lines, f"Maximum concurrency for {max_model_len} tokens per request: {blocks.max_concurrency:.2f}x")
    return (lines,)


def _serve_flags(req: PlanRequest, gpu_memory_utilization: float, max_model_len: int, max_num_seqs: int,
                 dtype: str, max_num_batched_tokens: int) -> dict:
    flags: dict = {}
    if req.tensor_parallel_size > 1:
        flags["tensor_parallel_size"] = req.tensor_parallel_size
    if req.pipeline_parallel_size > 1:
        flags["pipeline_parallel_size"] = req.pipeline_parallel_size
    if req.data_parallel_size > 1:
        flags["data_parallel_size"] = req.data_parallel_size
    if req.dtype not in ("auto", None):
        flags["dtype"] = dtype
    if req.quantization:
        flags["quantization"] = req.quantization
    if req.kv_cache_dtype not in ("auto", None):
        flags["kv_cache_dtype"] = req.kv_cache_dtype
    flags["gpu_memory_utilization"] = gpu_memory_utilization
    flags["max_model_len"] = max_model_len
    flags["max_num_seqs"] = max_num_seqs
    if req.max_num_batched_tokens:
        flags["max_num_batched_tokens"] = req.max_num_batched_tokens
    elif req.entrypoint != "serve" and entrypoint_kind(req.entrypoint) == "offline":
        # the offline entrypoint's default budget, which `vllm serve` would not pick by itself
        flags["max_num_batched_tokens"] = max_num_batched_tokens
    if req.block_size:
        flags["block_size"] = req.block_size
    if req.kv_cache_memory_bytes is not None and req.kv_memory_source == "kv_cache_memory":
        flags["kv_cache_memory_bytes"] = req.kv_cache_memory_bytes
    if req.num_gpu_blocks_override:
        flags["num_gpu_blocks_override"] = req.num_gpu_blocks_override
    flags["enforce_eager"] = req.enforce_eager
    if req.enable_chunked_prefill is not None:
        flags["enable_chunked_prefill" if req.enable_chunked_prefill else "no_enable_chunked_prefill"] = True
    # the scheduler's flags, as given: the line starts the server that was simulated
    if req.enable_prefix_caching is not None:
        flags["enable_prefix_caching" if req.enable_prefix_caching else "no_enable_prefix_caching"] = True
    if req.long_prefill_token_threshold:
        flags["long_prefill_token_threshold"] = req.long_prefill_token_threshold
    if req.async_scheduling is not None:
        flags["async_scheduling" if req.async_scheduling else "no_async_scheduling"] = True
    if req.enable_lora:
        flags["enable_lora"] = True
        flags["max_loras"] = req.max_loras
        flags["max_lora_rank"] = req.max_lora_rank
        if req.max_cpu_loras is not None:
            flags["max_cpu_loras"] = req.max_cpu_loras
        if req.lora_dtype != "auto":
            flags["lora_dtype"] = req.lora_dtype
        if req.fully_sharded_loras:
            flags["fully_sharded_loras"] = True
    if req.speculative_config is not None:
        flags["speculative_config"] = req.speculative_config.as_json()
    if req.cpu_offload_gb:
        flags["cpu_offload_gb"] = req.cpu_offload_gb
    if req.swap_space is not None:
        flags["swap_space"] = req.swap_space
    return flags


def _naive(config: ResolvedConfig, max_model_len: int, blocks: BlockSizing) -> NaiveFormula:
    spec, dtype_bytes = config.model, config.dtype_bytes
    kv_bytes = config.kv_cache_dtype.element_bytes
    claimed = spec.num_layers * 2 * spec.hidden_size * max_model_len * dtype_bytes
    # What one request of max_model_len tokens really occupies, on all GPUs of the replica.
    exact = blocks.blocks_per_request * sum(blocks.layout.bytes_per_block) * config.tensor_parallel_size
    why = []
    if spec.is_mla:
        why.append("MLA stores one compressed latent per token (kv_lora_rank + rope dims), not K and V for every "
                   "head, and it is not split by tensor parallelism.")
    elif spec.num_kv_heads < spec.num_attention_heads:
        why.append(f"Grouped-query attention: {spec.num_kv_heads} KV heads, not {spec.num_attention_heads} "
                   f"(the formula's 'hidden' assumes one K and V per query head: "
                   f"{spec.num_attention_heads // spec.num_kv_heads}x too much).")
    kinds = spec.mixer_kinds()
    if kinds.get("sliding") or kinds.get("linear"):
        why.append("Sliding-window / recurrent layers keep a bounded amount per request, not the whole context.")
    if kv_bytes < dtype_bytes:
        why.append(f"The KV cache is stored in {kv_bytes:g} byte(s) per element, not {dtype_bytes}.")
    why.append(f"vLLM allocates whole blocks of {blocks.layout.block_size} tokens: "
               f"{blocks.blocks_per_request} blocks for {max_model_len:,} tokens.")
    ratio = claimed / exact if exact else float("inf")
    return NaiveFormula("batch × layers × 2 × hidden × max_len × bytes", int(claimed), int(exact),
                        round(ratio, 2), tuple(why))


#: The what-if of a plan whose sampler depends on how vLLM was installed (semantics docstring).
NO_FLASHINFER = "without FlashInfer (pip install vllm)"
SETTLE_INSTALL = ("say how vLLM is installed: --vllm-install docker (the release image) or --vllm-install pip "
                  "(a plain pip install), or give its start-up log (--from-log), which names its sampler")


def _install_dependent_verdict(rows, starts: bool) -> list[str]:
    """A note when a plan that starts fails without FlashInfer: the plan cannot know the install.
    (The other way cannot happen: the native sampler only needs more memory.)"""
    for w in rows:
        if starts and w.change == NO_FLASHINFER and not w.ok:
            return ["The verdict depends on how vLLM was installed: this plan assumes FlashInfer is installed "
                    "(the release image); a plain `pip install vllm` of this version has none, its native "
                    f"top-k/top-p sort needs more memory and vLLM fails ({w.available_kv_cache_gib:.2f} GiB of "
                    "KV cache). Pass --vllm-install pip or --vllm-install docker, or --from-log with the "
                    "start-up log, to settle it."]
    return []


def _what_ifs(req: PlanRequest, gpu_memory_utilization: float, kv_cache_dtype: str, replan: Replan,
              sem: VllmSemantics) -> list[WhatIf]:
    variants: list[tuple[str, dict]] = []
    if (req.device == "cuda" and req.flashinfer_sampler is None and req.vllm_install is None
            and req.kv_cache_memory_bytes is None and sem.flashinfer_sampler_depends_on_install):
        variants.append((NO_FLASHINFER, {"flashinfer_sampler": False}))
    if req.device == "cuda" and not kv_cache_dtype.startswith("fp8"):
        variants.append(("--kv-cache-dtype fp8", {"kv_cache_dtype": "fp8"}))
    tp2 = req.tensor_parallel_size * 2
    if req.model.num_attention_heads % tp2 == 0 and req.kv_cache_memory_bytes is None:
        variants.append((f"--tensor-parallel-size {tp2}", {"tensor_parallel_size": tp2}))
    if gpu_memory_utilization < 0.95 and req.kv_cache_memory_bytes is None:
        variants.append(("--gpu-memory-utilization 0.95", {"gpu_memory_utilization": 0.95}))
    out = []
    for label, change in variants:
        try:
            r = replan(replace(req, **change), what_ifs=False)
        except UsageError:
            continue
        if "gpu_memory_utilization" in change and r.headroom is not None and not r.headroom.ok:
            continue  # the one headroom rule: a higher utilisation that leaves too little is no offer
        out.append(WhatIf(label, change, r.startup.ok, r.memory.available_kv_cache_gib, r.kv.kv_cache_tokens,
                          r.kv.max_concurrency, r.flags.max_model_len))
    return out
