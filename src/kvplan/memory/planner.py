"""``plan()``: a model, a GPU and vLLM's serve flags in; vLLM's memory and KV-cache numbers out.

The order of the steps is vLLM's own start-up order (``EngineCore._initialize_kv_caches``): the
config checks, the per-layer KV specs and their groups, the memory budget of every worker, the
block count (minimum over workers), the admission check, and the capacity line it logs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from ..errors import UsageError
from ..hardware import GIB, Gpu
from ..models import params as mparams
from ..models.spec import ChunkedLocalAttention, ModelSpec, Quantization
from . import admission
from .borderline import SETTLE, error_band_bytes, is_borderline
from .budget import BudgetTerms, estimate_budget
from .defaults import (
    MODEL_DTYPES,
    align_hybrid_block_size,
    batch_defaults,
    check_max_model_len,
    default_block_size,
    derive_max_model_len,
    no_length_key_warning,
    resolve_kv_dtype,
    resolve_model_dtype,
)
from .grouping import KVLayout, build_layout
from .kv_specs import (
    AttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SizingContext,
    kv_spec_for,
    promote_to_full,
    with_block_size,
)
from .launch import display, multi_node, serve_argv, serve_yaml
from .result import (
    CapacityRow,
    KVGroupInfo,
    KVInfo,
    MemoryInfo,
    ModelInfo,
    NaiveFormula,
    ParallelInfo,
    PlanResult,
    ResolvedFlags,
    StartupInfo,
    WhatIf,
)
from .semantics import VllmSemantics, semantics

CONFIG_ERRORS = ("max_model_len_above_derived", "tp_heads", "block_size")
LADDER = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)


@dataclass(frozen=True)
class PlanRequest:
    """The serve flags, named as vLLM names them, plus what kvplan needs to know of the GPU."""

    model: ModelSpec
    gpu: Gpu
    device: str = "cuda"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    dtype: str = "auto"
    quantization: Optional[str] = None
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: Optional[float] = None
    max_model_len: Optional[int] = None  # None: derived; -1: auto-fit
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    block_size: Optional[int] = None
    enforce_eager: bool = False
    vllm_version: Optional[str] = None
    kv_cache_memory_bytes: Optional[int] = None  # measured or chosen KV memory per GPU
    kv_cache_memory_per_stage: Optional[tuple[int, ...]] = None  # measured, per pipeline stage
    num_gpu_blocks_override: Optional[int] = None
    gpus_per_node: int = 8
    disable_hybrid_kv_cache_manager: bool = False
    entrypoint: str = "serve"
    engine: Optional[str] = None  # V0/V1 where VLLM_USE_V1 chose (0.7–0.10)
    kv_memory_source: str = "kv_cache_memory"  # or "log" when read from a startup log
    measured: Optional[dict] = None
    notes: tuple[str, ...] = ()  # said by whoever built the request (e.g. a log's version fallback)


@dataclass(frozen=True)
class _Sizing:
    """Everything computed for one configuration (used for the main plan and each ladder row)."""

    layout: KVLayout
    ctx: SizingContext
    num_blocks: int
    blocks_per_request: int
    concurrency: float
    tokens: int
    check_memory: int
    bpb: int
    stage: int


def _validate(req: PlanRequest) -> None:
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpus_per_node"):
        if getattr(req, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    util = req.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise UsageError(f"--gpu-memory-utilization must be in (0, 1], got {util}")
    for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_gpu_blocks_override"):
        value = getattr(req, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if req.max_model_len is not None and req.max_model_len < 1 and req.max_model_len != -1:
        raise UsageError("--max-model-len must be positive, or -1/auto to fit the KV cache")
    if req.device not in ("cuda", "cpu"):
        raise UsageError(f"--device must be cuda or cpu, got {req.device!r}")


def _quantization(req: PlanRequest) -> Optional[Quantization]:
    q = req.model.quantization
    if req.quantization in (None, "", "none"):
        return q
    method = req.quantization.lower()
    if q is not None and q.method.startswith(method.split("_")[0]):
        return q
    if method in ("fp8", "ptpc_fp8", "fbgemm_fp8"):
        return Quantization("fp8", 8)  # online dynamic fp8: 1 B/param, per-tensor scales
    if method == "bitsandbytes":
        return Quantization("bitsandbytes", 4, group_size=64)
    raise UsageError(f"--quantization {req.quantization}: the checkpoint {req.model.name} is not quantized "
                     f"with {req.quantization} (its config.json has "
                     f"{'quant_method ' + q.method if q else 'no quantization_config'}); vLLM would refuse it")


def _layout(req: PlanRequest, sem: VllmSemantics, kv, block_size: int, dtype_bytes: int,
            stages: list[range]) -> tuple[KVLayout, bool]:
    spec, tp = req.model, req.tensor_parallel_size
    specs = [_version_quirks(kv_spec_for(l.mixer, tp, block_size, kv, dtype_bytes), sem) for l in spec.layers]
    chunked = any(isinstance(l.mixer, ChunkedLocalAttention) for l in spec.layers)
    # HMA is off before 0.10, on request, and for chunked-local models (Llama-4) where the
    # version's VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE default says so (≤0.14).
    hma = (sem.hybrid_kv_cache_manager and not req.disable_hybrid_kv_cache_manager
           and not (chunked and not sem.chunked_local_keeps_hma))
    if not hma:
        specs = [promote_to_full(s) for s in specs]
    mamba = [s for s in specs if isinstance(s, MambaSpec)]
    attn = [s for s in specs if isinstance(s, AttentionSpec)]
    if mamba and attn:
        token_bytes = attn[0].bytes_per_token()
        new_bs = align_hybrid_block_size(spec, block_size, token_bytes, max(m.state_bytes for m in mamba))
        page = new_bs * token_bytes
        specs = [replace(s, block_size=new_bs, page_size_padded=page) if isinstance(s, MambaSpec)
                 else with_block_size(s, new_bs) for s in specs]
    return build_layout(specs, stages, sem.group_size_threshold), hma


def _version_quirks(spec, sem: VllmSemantics):
    """Older engines sized MLA differently (see VllmSemantics.mla_*)."""
    if not isinstance(spec, MLAAttentionSpec):
        return spec
    if sem.mla_counts_k_and_v:
        return replace(spec, head_size_v=spec.head_size)
    align = sem.mla_entry_alignment
    if align > 1 and spec.state_bytes_per_token is None:
        raw = int(spec.head_size * spec.dtype_bytes)
        return replace(spec, state_bytes_per_token=-(-raw // align) * align)
    return spec


def _size(layout: KVLayout, sem: VllmSemantics, L: int, mnbt: int, in_flight: int,
          available: list[int], override: Optional[int]) -> _Sizing:
    ctx = SizingContext(L, mnbt, in_flight)
    bpbs = layout.bytes_per_block
    if override is not None:
        available = [override * b for b in bpbs]
    per_stage = [max(a, 0) // b for a, b in zip(available, bpbs)]
    num_blocks = min(per_stage)
    worst = per_stage.index(num_blocks)
    bpb = bpbs[worst]
    check = available[worst] - (bpb if sem.check_reserves_null_block else 0)
    bpr = layout.blocks_per_request(ctx, sem.per_group_blocks_per_request)
    conc = num_blocks / bpr if bpr else 0.0
    style = sem.capacity_log_style
    if style in ("v1-021", "v1-033"):
        tokens = int(conc * L)
    elif style == "v1-011":
        tokens = num_blocks // len(layout.groups) * layout.block_size
    else:
        tokens = num_blocks * layout.block_size
        conc = tokens / L
    return _Sizing(layout, ctx, num_blocks, bpr, conc, tokens, check, bpb, worst)


def _log_lines(sem: VllmSemantics, device: str, s: _Sizing, cpu_blocks: int) -> tuple[str, ...]:
    pool = sem.pool_name(device)
    L = s.ctx.max_model_len
    style = sem.capacity_log_style
    if style == "v1-033":
        return (f"{pool} KV cache size: {s.tokens:,} tokens, Maximum concurrency for {L:,} tokens per request: "
                f"{s.concurrency:.2f}x",)
    if style.startswith("v1"):
        return (f"{pool} KV cache size: {s.tokens:,} tokens",
                f"Maximum concurrency for {L:,} tokens per request: {s.concurrency:.2f}x")
    blocks = f"# {sem.v0_device_name} blocks: {s.num_blocks}, # CPU blocks: {cpu_blocks}"
    if style == "v0-concurrency":
        return (blocks, f"Maximum concurrency for {L} tokens per request: {s.concurrency:.2f}x")
    return (blocks,)


def plan(req: PlanRequest, what_ifs: bool = True, fit_search: Optional[bool] = None) -> PlanResult:
    """Compute vLLM's start-up memory and KV-cache numbers for one configuration. ``what_ifs``
    adds the what-if rows; ``fit_search`` (default: with the what-ifs) the smallest TP × PP that
    starts a failing configuration, and whether the serve command offered starts."""
    _validate(req)
    sem = semantics(req.vllm_version, req.engine)
    spec, gpu = req.model, req.gpu
    tp, pp, dp = req.tensor_parallel_size, req.pipeline_parallel_size, req.data_parallel_size
    errors: list[admission.StartupError] = []
    warnings: list[str] = []
    notes: list[str] = list(req.notes)

    model_dtype = resolve_model_dtype(spec, req.dtype, gpu, req.device, sem)
    dtype_bytes = MODEL_DTYPES[model_dtype]
    quant = _quantization(req)
    kv = resolve_kv_dtype(spec, req.kv_cache_dtype, model_dtype)
    if kv.name.startswith("fp8") and req.device == "cuda":
        fp8 = sem.fp8_kv_cache(gpu.sm, req.device, req.engine is not None)
        if fp8 == "refused":
            errors.append(admission.StartupError(
                "fp8_kv_unsupported", "VLLM_USE_V1=1 is not supported with --kv-cache-dtype."))
        elif fp8 == "v0_fallback":
            sem = replace(sem, engine_override="V0")
            notes.append(f"vLLM {sem.label} runs an fp8 KV cache on V1 only with FlashAttention 3 on Hopper: on "
                         f"{gpu.name} (sm {gpu.sm}) it falls back to the V0 engine, and this plan follows V0's rules.")
        if fp8 in ("converted", "v0_fallback") or (gpu.sm is None and not gpu.supports_fp8):
            warnings.append(f"{gpu.name} has no native fp8: vLLM stores an fp8 KV cache but converts it in the "
                            "attention kernel (slower).")

    derived_len, _ = derive_max_model_len(spec, sem)
    no_key = no_length_key_warning(spec, req.max_model_len)
    if no_key:
        warnings.append(no_key)
        if req.max_model_len not in (None, -1):
            derived_len = req.max_model_len
    auto_fit = req.max_model_len == -1
    L, len_error = check_max_model_len(spec, sem, req.max_model_len)
    if len_error:
        errors.append(len_error)
    if spec.num_attention_heads % tp:
        errors.append(admission.heads_not_divisible(spec.num_attention_heads, tp))
    if req.device == "cpu" and req.block_size and req.block_size % 32:
        errors.append(admission.StartupError(
            "block_size", f"No common block size for {req.block_size} (CPU_ATTN: [MultipleOf(32)])"))

    world = tp * pp
    mnbt_default, mns_default = batch_defaults(sem, gpu, req.device, world, req.entrypoint)
    mns = req.max_num_seqs or mns_default

    def default_mnbt(length: int) -> int:
        if sem.engine == "V0":
            # V0 turned chunked prefill on by itself above 32K tokens of context, with a
            # 2,048-token batch; otherwise a batch holds a whole max-length prompt.
            return 2048 if length > 32768 and sem.version >= (0, 6) else max(length, 2048)
        return min(mns * length, mnbt_default) if sem.batch_cap_by_max_len else mnbt_default

    mnbt = req.max_num_batched_tokens or default_mnbt(L)
    if not req.max_num_seqs and sem.version >= (0, 9):
        mns = min(mns, mnbt)
    async_on = sem.async_scheduling_default and req.device == "cuda"
    # VllmConfig.max_concurrent_batches: async → 2 (pp 1) or pp + 1 with the V2 runner (the default
    # from 0.32); the V1 runner turns async off under pipeline parallelism.
    if async_on and pp == 1:
        concurrent_batches = 2
    elif async_on and sem.version >= (0, 32):
        concurrent_batches = pp + 1
    else:
        concurrent_batches = pp
    in_flight = concurrent_batches * mnbt if sem.sliding_window_uses_in_flight_tokens else mnbt

    block_size = req.block_size or default_block_size(spec, gpu, req.device, sem, kv.name)
    stages = mparams.pp_layer_ranges(spec.num_layers, pp)
    layout, hma = _layout(req, sem, kv, block_size, dtype_bytes, stages)
    if layout.block_size != block_size:
        notes.append(f"Attention block size raised from {block_size} to {layout.block_size} tokens so that one "
                     "attention page holds a whole recurrent state (vLLM _align_hybrid_block_size).")
    warnings.extend(layout.padding_warnings())

    # --- budget per pipeline stage -------------------------------------------------------------
    util = req.gpu_memory_utilization or sem.default_gpu_memory_utilization
    moe_padding = mparams.mxfp4_padding(gpu.sm, sem.version) if quant and quant.method == "mxfp4" else None
    weights = mparams.weights_per_rank(spec, tp, pp, dtype_bytes, quant, moe_padding)
    if req.kv_cache_memory_per_stage is not None and len(req.kv_cache_memory_per_stage) != pp:
        raise UsageError(f"{len(req.kv_cache_memory_per_stage)} KV memory figures for {pp} pipeline stages")

    def budgets_at(length: int, batched: int) -> tuple[list[BudgetTerms], list[int]]:
        """The memory budget of every stage when vLLM starts at ``length`` with ``batched`` tokens per
        step, and the KV bytes it leaves: one function for the plan and each row of its capacity
        ladder, so a row equals ``kvplan plan --max-model-len <row>``."""
        terms = [estimate_budget(
            spec, sem, gpu.memory_bytes, util, st.bytes_per_rank, tp, pp, dtype_bytes, batched, mns,
            length, len(st.layers), st.stage == pp - 1, req.enforce_eager, req.device, req.kv_cache_memory_bytes)
            for st in weights]
        if req.kv_cache_memory_per_stage is not None:
            return terms, list(req.kv_cache_memory_per_stage)
        return terms, [b.available_kv_bytes for b in terms]

    budgets, available = budgets_at(L, mnbt)
    source = req.kv_memory_source if req.kv_cache_memory_bytes is not None else "estimate"
    b0 = max(budgets, key=lambda b: b.weights_bytes)

    if req.device == "cuda" and req.kv_cache_memory_bytes is None and sem.version >= (0, 11):
        free = gpu.memory_bytes - b0.preexisting_bytes
        if free < b0.requested_bytes:
            errors.append(admission.free_memory_below_requested(sem, free, gpu.memory_bytes, util,
                                                               b0.requested_bytes))
    weights_oom = req.device == "cuda" and b0.weights_bytes + b0.preexisting_bytes > gpu.memory_bytes
    if weights_oom:
        errors.append(admission.weights_do_not_fit(b0.weights_bytes, gpu.memory_bytes, b0.preexisting_bytes,
                                                   tp, pp))

    # --- blocks, admission, auto-fit -----------------------------------------------------------
    sizing = _size(layout, sem, L, mnbt, in_flight, available, req.num_gpu_blocks_override)

    def needed_for(length: int) -> int:
        c = SizingContext(length, mnbt, in_flight)
        return layout.needed_bytes(c, sem.needed_memory_rule, stages[sizing.stage], sizing.stage)

    def tokens_fit(length: int) -> bool:
        if sem.engine == "V0":
            return length <= sizing.num_blocks * layout.block_size
        return needed_for(length) <= sizing.check_memory

    if sem.engine == "V0":
        max_fit = min(max(derived_len, L), sizing.num_blocks * layout.block_size)
    else:
        max_fit = admission.largest_fitting_len(needed_for, sizing.check_memory, max(derived_len, L)) \
            if sizing.check_memory > 0 else 0
    if auto_fit:
        if max_fit == 0:
            errors.append(admission.StartupError(
                "no_kv_memory", "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a "
                "single token. Try increasing `gpu_memory_utilization`."))
        else:
            L = min(derived_len, max_fit)
            notes.append(f"Auto-fit max_model_len: {L} (vLLM --max-model-len auto)")
            if not req.max_num_batched_tokens:
                mnbt = default_mnbt(L)
            sizing = _size(layout, sem, L, mnbt, in_flight, available, req.num_gpu_blocks_override)

    if weights_oom:
        pass  # vLLM never gets as far as sizing the KV cache
    elif sizing.check_memory <= 0 or sizing.num_blocks <= 0:
        errors.append(admission.no_memory_for_cache_blocks(sem))
    elif not tokens_fit(L):
        suggested = min(max_fit, L)
        errors.append(admission.max_model_len_too_large(
            sem, L, needed_for(L), sizing.check_memory, suggested, layout.block_size, sizing.num_blocks, pp))

    if pp > 1:
        per_stage = ", ".join(
            f"stage {i} ({len(st)} layers): {_gib(max(a, 0)):.2f} GiB, {max(int(a), 0) // b:,} blocks"
            for i, (st, a, b) in enumerate(zip(stages, available, layout.bytes_per_block)))
        notes.append(f"Per pipeline stage, as each stage's worker measures it: {per_stage}. vLLM gives every "
                     f"stage the smallest block count (stage {sizing.stage}).")
    if sizing.concurrency >= mns and not errors:
        notes.append(f"The KV cache holds {sizing.concurrency:.0f} requests of {L:,} tokens, more than "
                     f"--max-num-seqs {mns}: the scheduler's limit, not memory, caps concurrency.")
    cpu_blocks = 0
    if sem.engine == "V0":
        cpu_blocks = (4 * GIB) // sizing.bpb if sizing.bpb else 0
    log_lines = _log_lines(sem, req.device, sizing, cpu_blocks)

    # --- per-token bytes -----------------------------------------------------------------------
    layer_specs = {i: g.spec for g in layout.groups for i in g.layers}
    per_stage_tok = [sum(layer_specs[i].bytes_per_token() or 0 for i in st) for st in stages]
    per_gpu_tok = max(per_stage_tok)
    total_tok = sum(per_stage_tok) * tp
    logical_kv = resolve_kv_dtype(spec, req.kv_cache_dtype, model_dtype)
    logical_tok = sum(kv_spec_for(l.mixer, 1, block_size, logical_kv, dtype_bytes).bytes_per_token() or 0
                      for l in spec.layers)

    # --- capacity ladder -----------------------------------------------------------------------
    top = max(derived_len, L)
    lengths = sorted({x for x in LADDER if x <= top} | {L, derived_len})
    table = []
    for length in lengths:
        lm = req.max_num_batched_tokens or default_mnbt(length)
        inflight_l = (concurrent_batches * lm) if sem.sliding_window_uses_in_flight_tokens else lm
        row = _size(layout, sem, length, lm, inflight_l, budgets_at(length, lm)[1] if length != L else available,
                    req.num_gpu_blocks_override)
        allowed = length <= derived_len or length <= spec.max_len_keys.get("model_max_length", 0)
        table.append(CapacityRow(length, round(row.concurrency, 4), row.tokens,
                                 allowed and sizing.num_blocks > 0 and tokens_fit(length),
                                 round(row.concurrency * dp, 4)))

    # --- result pieces -------------------------------------------------------------------------
    first_error = errors[0] if errors else None
    suggested = first_error.suggested_max_model_len if first_error else None
    kv_used = sizing.num_blocks * sizing.bpb
    mem = MemoryInfo(
        total_gib_per_gpu=_gib(gpu.memory_bytes),
        requested_gib=_gib(b0.requested_bytes),
        weights_gib_per_gpu=_gib(b0.weights_bytes),
        non_torch_gib=_gib(b0.non_torch_bytes),
        activation_peak_gib=_gib(b0.activation_bytes),
        cudagraph_gib=_gib(b0.cudagraph_bytes),
        non_kv_gib=_gib(b0.non_kv_bytes),
        available_kv_cache_gib=_gib(min(available)),
        available_kv_cache_bytes=int(min(available)),
        kv_cache_used_gib=_gib(kv_used),
        preexisting_gib=_gib(b0.preexisting_bytes),
        source=source,
        weights_bytes_per_stage=tuple(s.bytes_per_rank for s in weights),
        available_kv_bytes_per_stage=tuple(int(a) for a in available),
        num_gpu_blocks_per_stage=tuple(max(int(a), 0) // b for a, b in zip(available, layout.bytes_per_block)),
    )
    groups = tuple(KVGroupInfo(g.spec.kind, len(g.layers), g.spec.page_size_bytes,
                               g.spec.blocks_per_request(sizing.ctx), g.spec) for g in layout.groups)
    kvinfo = KVInfo(
        bytes_per_token_per_gpu=int(per_gpu_tok), bytes_per_token_total=int(total_tok),
        bytes_per_token_logical=int(logical_tok), block_size=layout.block_size, bytes_per_block=sizing.bpb,
        bytes_per_block_per_stage=layout.bytes_per_block,
        num_gpu_blocks=sizing.num_blocks, usable_blocks=max(sizing.num_blocks - 1, 0),
        blocks_per_request=sizing.blocks_per_request, kv_cache_tokens=sizing.tokens,
        max_concurrency=round(sizing.concurrency, 4), max_concurrency_for_tokens=L, log_lines=log_lines,
        groups=groups, padding_layers=layout.padding_layers, padding_waste=round(layout.padding_waste(), 4),
    )
    if first_error and first_error.kind in CONFIG_ERRORS:
        notes.append("vLLM stops at its configuration checks, before it profiles memory or logs a KV cache line; "
                     "the KV figures show what the rest of the configuration would give.")
    margin = None
    if sem.engine == "V1" and not weights_oom and not (first_error and first_error.kind in CONFIG_ERRORS):
        margin = sizing.check_memory - needed_for(L)
    band = error_band_bytes(gpu.memory_bytes) if source == "estimate" else None
    kv_verdict = first_error is None or first_error.kind in ("max_model_len_too_large", "no_kv_memory")
    borderline = bool(band is not None and margin is not None and kv_verdict and is_borderline(margin, gpu.memory_bytes))
    search = what_ifs if fit_search is None else fit_search
    fits_with = None
    if errors and search:
        from .layout_fit import smallest_fitting_layout

        fits_with = smallest_fitting_layout(req, first_error.kind, lambda r: plan(r, what_ifs=False, fit_search=False))
    startup = StartupInfo(ok=not errors, error=first_error.message if first_error else None,
                          error_kind=first_error.kind if first_error else None,
                          suggested_max_model_len=suggested, max_fitting_model_len=int(max_fit),
                          warnings=tuple(warnings), fits_with=fits_with,
                          kv_margin_gib=_gib(margin) if margin is not None else None,
                          estimate_error_gib=_gib(band) if band is not None else None,
                          borderline=borderline, settle_with=SETTLE if borderline else None)

    run_len = L
    if first_error and first_error.kind in ("max_model_len_too_large", "max_model_len_above_derived") and suggested:
        run_len = suggested
        notes.append(f"The serve command uses --max-model-len {suggested}: the largest length vLLM accepts here; "
                     f"{L} fails at start-up.")
    serve_starts = not errors
    if errors and run_len != L and search:
        serve_starts = plan(replace(req, max_model_len=run_len), what_ifs=False, fit_search=False).startup.ok
    flags = _serve_flags(req, util, run_len, mns, model_dtype)
    argv = serve_argv(spec.name, flags)
    resolved = ResolvedFlags(
        device=req.device, gpu=gpu.name, gpu_memory_bytes=gpu.memory_bytes, dtype=model_dtype,
        quantization=quant.method if quant else None, kv_cache_dtype=kv.name, gpu_memory_utilization=util,
        max_model_len=L, max_num_seqs=mns, max_num_batched_tokens=mnbt, block_size=layout.block_size,
        enforce_eager=req.enforce_eager, hybrid_kv_cache_manager=hma, in_flight_tokens=in_flight,
    )
    n_params = mparams.count_params(spec)
    model_info = ModelInfo(
        id=spec.name, source=spec.source, architecture=(spec.architectures or (spec.model_type,))[0],
        summary=spec.describe(), num_layers=spec.num_layers, params=n_params,
        params_active=mparams.active_params(spec), published_params=spec.published_params,
        max_position_embeddings=spec.max_len_keys.get("max_position_embeddings"),
    )
    nodes = -(-world // req.gpus_per_node)
    parallel = ParallelInfo(tp, pp, dp, world, world * dp, req.gpus_per_node, nodes * dp)
    naive = _naive(spec, L, dtype_bytes, sizing, tp, pp, kv.element_bytes)
    return PlanResult(
        vllm_semantics=sem.label, engine=sem.engine, model=model_info, parallel=parallel, flags=resolved,
        memory=mem, kv=kvinfo, startup=startup, capacity_table=tuple(table),
        what_if=tuple(_what_ifs(replace(req, max_model_len=run_len), util, kv.name)) if what_ifs else (),
        naive=naive, serve_argv=tuple(argv), serve_command=display(argv),
        serve_config_yaml=serve_yaml(spec.name, flags), multi_node=multi_node(argv, tp, pp, req.gpus_per_node),
        notes=tuple(notes), measured=dict(req.measured or {}),
        serve_command_starts=serve_starts, what_if_max_model_len=run_len if what_ifs else None,
        what_if_at_fallback_length=bool(what_ifs and run_len != L), derived_max_model_len=int(derived_len),
    )


def _gib(n: float) -> float:
    return round(n / GIB, 4)


def _serve_flags(req: PlanRequest, util: float, max_len: int, mns: int, dtype: str) -> dict:
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
    flags["gpu_memory_utilization"] = util
    flags["max_model_len"] = max_len
    flags["max_num_seqs"] = mns
    if req.max_num_batched_tokens:
        flags["max_num_batched_tokens"] = req.max_num_batched_tokens
    if req.block_size:
        flags["block_size"] = req.block_size
    if req.kv_cache_memory_bytes is not None and req.kv_memory_source == "kv_cache_memory":
        flags["kv_cache_memory_bytes"] = req.kv_cache_memory_bytes
    if req.num_gpu_blocks_override:
        flags["num_gpu_blocks_override"] = req.num_gpu_blocks_override
    flags["enforce_eager"] = req.enforce_eager
    return flags


def _naive(spec: ModelSpec, L: int, dtype_bytes: int, s: _Sizing, tp: int, pp: int,
           kv_bytes: float) -> NaiveFormula:
    claimed = spec.num_layers * 2 * spec.hidden_size * L * dtype_bytes
    # What one request of L tokens really occupies, on all GPUs of the replica.
    exact = s.blocks_per_request * sum(s.layout.bytes_per_block) * tp
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
    why.append(f"vLLM allocates whole blocks of {s.layout.block_size} tokens: "
               f"{s.blocks_per_request} blocks for {L:,} tokens.")
    ratio = claimed / exact if exact else float("inf")
    return NaiveFormula("batch × layers × 2 × hidden × max_len × bytes", int(claimed), int(exact),
                        round(ratio, 2), tuple(why))


def _what_ifs(req: PlanRequest, util: float, kv_name: str) -> list[WhatIf]:
    variants: list[tuple[str, dict]] = []
    if req.device == "cuda" and not kv_name.startswith("fp8"):
        variants.append(("--kv-cache-dtype fp8", {"kv_cache_dtype": "fp8"}))
    tp2 = req.tensor_parallel_size * 2
    if req.model.num_attention_heads % tp2 == 0 and req.kv_cache_memory_bytes is None:
        variants.append((f"--tensor-parallel-size {tp2}", {"tensor_parallel_size": tp2}))
    if util < 0.95 and req.kv_cache_memory_bytes is None:
        variants.append(("--gpu-memory-utilization 0.95", {"gpu_memory_utilization": 0.95}))
    out = []
    for label, change in variants:
        try:
            r = plan(replace(req, **change), what_ifs=False)
        except UsageError:
            continue
        out.append(WhatIf(label, change, r.startup.ok, r.memory.available_kv_cache_gib, r.kv.kv_cache_tokens,
                          r.kv.max_concurrency, r.flags.max_model_len))
    return out
