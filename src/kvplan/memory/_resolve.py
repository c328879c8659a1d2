"""Stage 1 of ``plan()``: the request resolved into everything sizing needs, once.

Model spec + GPU + serve flags + the vLLM version's semantics in; a frozen :class:`ResolvedConfig`
out: the engine's rules (after an fp8 fall-back to V0), the dtypes, the lengths and batch limits
vLLM's config checks settle on, the per-layer KV specs grouped into a layout, the weights of every
pipeline stage, and the errors, warnings and notes of these checks. Nothing later re-derives a
flag: the budget, the blocks and the result all read this object.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from ..errors import UsageError
from ..hardware import Gpu
from ..models import params as mparams
from ..models.spec import ChunkedLocalAttention, ModelSpec, Quantization
from . import admission
from . import error_texts as et
from .defaults import (
    MODEL_DTYPES,
    align_hybrid_block_size,
    batch_defaults,
    check_max_model_len,
    default_block_size,
    derive_max_model_len,
    entrypoint_kind,
    no_length_key_warning,
    resolve_kv_dtype,
    resolve_model_dtype,
)
from .grouping import KVLayout, build_layout
from .lora import LoRAConfig
from .kv_specs import (
    AttentionSpec,
    KVDtype,
    MambaSpec,
    MLAAttentionSpec,
    kv_spec_for,
    promote_to_full,
    with_block_size,
)
from .offload import OffloadedWeights, offloaded_weights, swap_space_check
from .request import PlanRequest, validate
from .semantics import VllmSemantics, semantics
from .spec_decode import Drafter, build_drafter


@dataclass(frozen=True)
class ResolvedConfig:
    """One configuration as vLLM's start-up settles it, before any memory is sized."""

    request: PlanRequest
    semantics: VllmSemantics  # the version's rules (engine_override V0 after an fp8 fall-back)
    dtype: str  # the model dtype vLLM runs (``--dtype`` resolved)
    dtype_bytes: int
    quantization: Optional[Quantization]  # the checkpoint's, or the online method asked
    kv_cache_dtype: KVDtype
    gpu_memory_utilization: float  # asked, or the version's default
    derived_max_model_len: int  # the model's own limit (or the asked length without a length key)
    max_model_len: int  # as asked and checked; with auto_fit the sizing stage fits it
    auto_fit: bool  # --max-model-len -1 / auto
    max_num_seqs: int
    max_num_batched_tokens: int  # at max_model_len
    default_max_num_batched_tokens: int  # batch_defaults' figure, before any max_model_len cap
    max_concurrent_batches: int  # VllmConfig.max_concurrent_batches
    in_flight_tokens: int  # tokens a sliding window keeps for the batches in flight
    block_size: int  # asked or the backend's default, before the hybrid alignment
    stages: tuple[range, ...]  # the layers of every pipeline stage
    layout: KVLayout
    hybrid_kv_cache_manager: bool
    weights: tuple[mparams.StageWeights, ...]  # per pipeline stage, one rank
    errors: tuple[admission.StartupError, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    chunked_prefill: bool = True  # whether prefills are chunked (--enable-chunked-prefill as the version settles it)
    lora: Optional[LoRAConfig] = None  # --enable-lora
    drafter: Optional[Drafter] = None  # --speculative-config
    offloaded: tuple[OffloadedWeights, ...] = ()  # --cpu-offload-gb, per pipeline stage
    v2_model_runner: bool = False  # vLLM's V2 model runner (0.22+, VllmSemantics.v2_model_runner)

    @property
    def model(self) -> ModelSpec:
        return self.request.model

    @property
    def gpu(self) -> Gpu:
        return self.request.gpu

    @property
    def device(self) -> str:
        return self.request.device

    @property
    def tensor_parallel_size(self) -> int:
        return self.request.tensor_parallel_size

    @property
    def pipeline_parallel_size(self) -> int:
        return self.request.pipeline_parallel_size

    @property
    def data_parallel_size(self) -> int:
        return self.request.data_parallel_size

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def max_num_batched_tokens_at(self, max_model_len: int) -> int:
        """The step's token budget vLLM would use at ``max_model_len``: the asked one, else the default."""
        return self.request.max_num_batched_tokens or _default_max_num_batched_tokens(
            self.semantics, self.model, self.max_num_seqs, self.default_max_num_batched_tokens, max_model_len,
            self.chunked_prefill)

    def in_flight_tokens_for(self, max_num_batched_tokens: int) -> int:
        return _in_flight_tokens(self.semantics, self.max_concurrent_batches, max_num_batched_tokens)


def resolve(req: PlanRequest) -> ResolvedConfig:
    """vLLM's config checks, in its order: dtypes, the fp8 KV rule, the lengths, the batch
    limits, the block size and the KV layout, the utilisation and the weights."""
    validate(req)
    sem = semantics(req.vllm_version, req.engine)
    spec, gpu, device = req.model, req.gpu, req.device
    tensor_parallel_size, pipeline_parallel_size = req.tensor_parallel_size, req.pipeline_parallel_size
    errors: list[admission.StartupError] = []
    warnings: list[str] = []
    notes: list[str] = list(req.notes)
    if req.flashinfer_sampler is None and req.vllm_install == "pip" and device == "cuda" \
            and sem.flashinfer_sampler_depends_on_install:
        # the wheel of 0.8-0.11.0 does not require flashinfer-python (its Requires-Dist), so
        # TopKTopPSampler falls back: "FlashInfer is not available. Falling back to the PyTorch-native
        # implementation"
        req = replace(req, flashinfer_sampler=False)
        notes.append(f"The profile run's dummy sampler is planned with PyTorch's native top-k/top-p (--vllm-install "
                     f"pip): the {sem.label} wheel does not require flashinfer-python, so vLLM falls back "
                     "to it; it sorts every row of logits.")
    elif req.flashinfer_sampler is not None and device == "cuda" and sem.engine == "V1":
        notes.append("The profile run's dummy sampler is planned with " + (
            "FlashInfer's top-k/top-p (--flashinfer-sampler, or the start-up log's sampler line)." if req.flashinfer_sampler
            else "PyTorch's native top-k/top-p (--no-flashinfer-sampler, or the start-up log's sampler line): it sorts "
                 "every row of logits."))

    old_gpu = sem.compute_capability_engine(gpu.sm, device, req.engine is not None)
    if old_gpu == "refused":
        errors.append(admission.StartupError(
            "v1_unsupported", "VLLM_USE_V1=1 is not supported with Compute Capability < 8.0."))
    elif old_gpu == "v0_fallback":
        sem = replace(sem, engine_override="V0")
        notes.append(f"vLLM {sem.label} runs the V1 engine only on compute capability 8.0 and newer: on {gpu.name} "
                     f"(sm {gpu.sm}) it logs \"Compute Capability < 8.0 is not supported by the V1 Engine. Falling "
                     "back to V0.\" and this plan follows the V0 engine's rules (--engine v1 makes vLLM refuse).")

    model_dtype = resolve_model_dtype(spec, req.dtype, gpu, device, sem)
    dtype_bytes = MODEL_DTYPES[model_dtype]
    quantization = resolve_quantization(req)
    kv_cache_dtype = resolve_kv_dtype(spec, req.kv_cache_dtype, model_dtype)
    if kv_cache_dtype.name.startswith("fp8") and device == "cuda":
        fp8 = sem.fp8_kv_cache(gpu.sm, device, req.engine is not None)
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

    derived_max_model_len, _ = derive_max_model_len(spec, sem)
    no_key = no_length_key_warning(spec, req.max_model_len)
    if no_key:
        warnings.append(no_key)
        if req.max_model_len not in (None, -1):
            derived_max_model_len = req.max_model_len
    max_model_len, len_error = check_max_model_len(spec, sem, req.max_model_len)
    if len_error:
        errors.append(len_error)
    if spec.num_attention_heads % tensor_parallel_size:
        errors.append(admission.heads_not_divisible(spec.num_attention_heads, tensor_parallel_size))
    if device == "cpu" and req.block_size and req.block_size % 32:
        errors.append(admission.StartupError(
            "block_size", f"No common block size for {req.block_size} (CPU_ATTN: [MultipleOf(32)])"))

    lora = _lora(req, sem, errors, notes)
    drafter, sem = _drafter(req, sem, dtype_bytes, quantization, errors, notes)
    v2_runner = device == "cuda" and sem.v2_model_runner(
        spec.architectures, moe=spec.is_moe, quantized=quantization is not None,
        hybrid="linear" in spec.mixer_kinds(), spec_method=drafter.method if drafter else None)
    if v2_runner and drafter is not None and drafter.layers:
        notes.append(f"vLLM {sem.label} runs this model on its V2 model runner, whose memory profile samples with "
                     "the plain sampler (no dummy rejection sampler)" + (
                         "" if sem.v2_runner_estimates_cudagraphs else " and charges no CUDA-graph estimate") + ".")
    chunked_prefill = _chunked_prefill(req, sem, max_model_len, drafter is not None, notes)

    world_size = tensor_parallel_size * pipeline_parallel_size
    default_batched, default_seqs = batch_defaults(sem, gpu, device, world_size, req.entrypoint)
    if entrypoint_kind(req.entrypoint) == "offline" and sem.engine == "V1":
        serve_batched, serve_seqs = batch_defaults(sem, gpu, device, world_size, "serve")
        notes.append(f"Planned for the offline LLM(...) entrypoint (vLLM's LLM_CLASS usage context): vLLM {sem.label} "
                     f"defaults it to {default_batched:,} batched tokens and {default_seqs:,} sequences here "
                     f"(`vllm serve`: {serve_batched:,} and {serve_seqs:,}); the command below pins them.")
    max_num_seqs = req.max_num_seqs or default_seqs
    # The default token budget at the asked length is capped with the default max_num_seqs; the
    # lengths sized later (auto-fit, the capacity ladder) with max_num_seqs as capped below.
    max_num_batched_tokens = req.max_num_batched_tokens or _default_max_num_batched_tokens(
        sem, spec, max_num_seqs, default_batched, max_model_len, chunked_prefill)
    if not req.max_num_seqs and sem.default_max_num_seqs_capped_by_batch:
        max_num_seqs = min(max_num_seqs, max_num_batched_tokens)
    errors.extend(admission.scheduler_config_errors(max_num_batched_tokens, max_num_seqs, max_model_len,
                                                    chunked_prefill))
    concurrent_batches = _max_concurrent_batches(sem, device, pipeline_parallel_size)

    if req.block_size and device == "cuda":
        error = admission.block_size_refused(req.block_size, sem)
        if error is not None:
            errors.append(error)
    block_size = req.block_size or default_block_size(spec, gpu, device, sem, kv_cache_dtype.name)
    stages = mparams.pp_layer_ranges(spec.num_layers, pipeline_parallel_size)
    if drafter is not None and drafter.layers:  # the drafter's KV layers follow the target's, on the last stage
        stages[-1] = range(stages[-1].start, spec.num_layers + len(drafter.layers))
    layout, hybrid_kv_cache_manager = _layout(req, sem, kv_cache_dtype, block_size, dtype_bytes, stages, drafter)
    if layout.block_size != block_size:
        notes.append(f"Attention block size raised from {block_size} to {layout.block_size} tokens so that one "
                     "attention page holds a whole recurrent state (vLLM _align_hybrid_block_size).")
    warnings.extend(layout.padding_warnings())

    left_out = mparams.vision_tower(spec).left_out_note(dtype_bytes)
    if left_out:
        notes.append(left_out)

    gpu_memory_utilization = req.gpu_memory_utilization or sem.default_gpu_memory_utilization
    mxfp4 = quantization is not None and quantization.method == "mxfp4"
    moe_padding = mparams.mxfp4_padding(gpu.sm, sem.version) if mxfp4 else None
    weights = mparams.weights_per_rank(spec, tensor_parallel_size, pipeline_parallel_size, dtype_bytes, quantization,
                                       moe_padding)
    offloaded = _offloaded(req, weights, dtype_bytes, quantization, device, notes)
    swap = swap_space_check(sem, req.swap_space, tensor_parallel_size, req.host_memory_bytes)
    if swap and swap[0] == "error":
        errors.append(admission.StartupError("swap_space", swap[1]))
    elif swap:
        warnings.append(swap[1])
    if req.kv_cache_memory_per_stage is not None and len(req.kv_cache_memory_per_stage) != pipeline_parallel_size:
        raise UsageError(f"{len(req.kv_cache_memory_per_stage)} KV memory figures for "
                         f"{pipeline_parallel_size} pipeline stages")

    return ResolvedConfig(
        request=req, semantics=sem, dtype=model_dtype, dtype_bytes=dtype_bytes, quantization=quantization,
        kv_cache_dtype=kv_cache_dtype, gpu_memory_utilization=gpu_memory_utilization,
        derived_max_model_len=derived_max_model_len, max_model_len=max_model_len, auto_fit=req.max_model_len == -1,
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        default_max_num_batched_tokens=default_batched, max_concurrent_batches=concurrent_batches,
        in_flight_tokens=_in_flight_tokens(sem, concurrent_batches, max_num_batched_tokens),
        block_size=block_size, stages=tuple(stages), layout=layout, hybrid_kv_cache_manager=hybrid_kv_cache_manager,
        weights=tuple(weights), errors=tuple(errors), warnings=tuple(warnings), notes=tuple(notes),
        chunked_prefill=chunked_prefill, lora=lora, drafter=drafter, offloaded=offloaded, v2_model_runner=v2_runner,
    )


#: V0's SchedulerConfig floor for multimodal models ("at least the number of multimodal tokens")
V0_MULTIMODAL_MIN_BATCHED_TOKENS = 5120


def _default_max_num_batched_tokens(sem: VllmSemantics, spec: ModelSpec, max_num_seqs: int, default: int,
                                    max_model_len: int, chunked_prefill: bool = True) -> int:
    if sem.engine == "V0":
        # V0 chunks prefills with a small batch (VllmSemantics.v0_chunked_batch_tokens); otherwise a
        # batch holds a whole max-length prompt, and a multimodal model's at least 5,120 tokens
        # (SchedulerConfig, read in 0.6.4.post1, 0.7.0, 0.8.5 and 0.9.2).
        tokens = sem.v0_chunked_batch_tokens if chunked_prefill else max(max_model_len, 2048)
        return max(tokens, V0_MULTIMODAL_MIN_BATCHED_TOKENS) if spec.has_vision else tokens
    if not chunked_prefill:  # 0.12+ (VllmSemantics.v1_chunked_prefill_switch): a whole prompt per step
        default = max(max_model_len, default)
    return min(max_num_seqs * max_model_len, default) if sem.batch_cap_by_max_len else default


def _chunked_prefill(req: PlanRequest, sem: VllmSemantics, max_model_len: int, speculative: bool,
                     notes: list[str]) -> bool:
    """``--enable-chunked-prefill`` as the version settles it. V0 (``_set_default_args_v0``, 0.8.5;
    ``create_engine_config``, 0.6.4.post1): off unless asked, but turned on by itself above 32K tokens of
    context on CUDA, except with a sliding window, speculative decoding or LoRA (and, from 0.8, for MLA and
    multimodal models). V1: always on up to 0.11; from 0.12 the switch is honoured."""
    model = req.model
    if sem.engine == "V0":
        if req.enable_chunked_prefill is not None:
            return req.enable_chunked_prefill
        if max_model_len <= 32768 or req.device != "cuda" or not sem.v0_chunks_long_context:
            return False
        # get_sliding_window(): none when the config sets use_sliding_window false (Qwen2); multimodal
        # models are skipped in every V0 read (0.6.4.post1, 0.7.0: `not is_multimodal_model`), MLA from 0.8
        sliding = None if model.raw_flag("use_sliding_window") is False else model.sliding_window
        skip = (sliding is not None or speculative or req.enable_lora or model.has_vision or (
            sem.v0_long_context_chunking_skips_mla_and_multimodal and model.is_mla))
        if skip and (speculative or req.enable_lora):
            notes.append(f"vLLM {sem.label} (V0) does not turn chunked prefill on by itself above 32K tokens with "
                         "LoRA or speculative decoding: every profile step holds a whole max-length prompt.")
        return not skip
    if req.enable_chunked_prefill is False and not sem.v1_chunked_prefill_switch:
        notes.append(f"vLLM {sem.label} (V1) always chunks prefills: --no-enable-chunked-prefill has no effect.")
        return True
    return req.enable_chunked_prefill is not False


def _lora(req: PlanRequest, sem: VllmSemantics, errors: list, notes: list[str]) -> Optional[LoRAConfig]:
    """``--enable-lora`` and its flags, with the checks ``LoRAConfig`` makes (as start-up errors)."""
    if not req.enable_lora:
        return None
    config = LoRAConfig(req.max_loras, req.max_lora_rank, req.max_cpu_loras, req.lora_dtype, req.fully_sharded_loras,
                        req.lora_extra_vocab_size)
    ranks = sem.lora_max_ranks
    if config.max_lora_rank not in ranks:
        errors.append(admission.StartupError(
            "lora_config", et.LORA_RANK_NOT_ALLOWED.format(rank=config.max_lora_rank, ranks=ranks) + "."))
    if config.max_cpu_loras is not None and config.max_cpu_loras < config.max_loras:
        errors.append(admission.StartupError("lora_config", et.LORA_CPU_LORAS.format(
            cpu_loras=config.max_cpu_loras, max_loras=config.max_loras)))
    if req.model.vocab_size > sem.lora_max_vocab:
        errors.append(admission.StartupError("lora_config", et.LORA_VOCAB.format(limit=sem.lora_max_vocab)))
    refusal = sem.lora_refuses_cpu_offload
    if refusal and req.cpu_offload_gb > 0:
        errors.append(admission.StartupError("lora_config", et.LORA_CPU_OFFLOAD.format(text=refusal)))
    if config.fully_sharded_loras and req.tensor_parallel_size > 1 and config.max_lora_rank % req.tensor_parallel_size:
        errors.append(admission.StartupError(
            "lora_config", f"{config.max_lora_rank} is not divisible by {req.tensor_parallel_size}"))
    return config


def _drafter(req: PlanRequest, sem: VllmSemantics, dtype_bytes: int, quantization, errors: list,
             notes: list[str]) -> tuple[Optional[Drafter], VllmSemantics]:
    """``--speculative-config``: the drafter vLLM builds (spec_decode.build_drafter), and the engine's
    rules after a V1 -> V0 fall-back for a draft model in 0.8-0.9."""
    if req.speculative_config is None:
        return None, sem
    drafter = build_drafter(req.speculative_config, req.model, sem, req.tensor_parallel_size, dtype_bytes,
                            quantization)
    notes.extend(drafter.notes)
    if drafter.method == "draft_model":
        support = sem.draft_model_speculation
        if support == "refused":
            errors.append(admission.StartupError(
                "speculative_config", et.SPEC_DRAFT_MODEL.format() + ". Please consider using other speculative "
                "decoding methods such as ngram, medusa, eagle, or " + ("deepseek_mtp." if sem.version < (0, 11)
                                                                        else "mtp.")))
        elif support == "v0_fallback" and req.engine is None:
            sem = replace(sem, engine_override="V0")
            notes.append(f"vLLM {sem.label} runs a draft model only on the V0 engine: it falls back to V0, and "
                         "this plan follows V0's rules.")
    return drafter, sem


def _offloaded(req: PlanRequest, weights: list, dtype_bytes: int, quantization, device: str,
               notes: list[str]) -> tuple[OffloadedWeights, ...]:
    """``--cpu-offload-gb``: the parameters each stage's GPU moves to pinned CPU memory."""
    if not req.cpu_offload_gb or device != "cuda":
        return ()
    out = tuple(offloaded_weights(req.model, req.cpu_offload_gb, w.layers, req.tensor_parallel_size, dtype_bytes,
                                  quantization) for w in weights)
    moved = max(o.bytes for o in out)
    notes.append(f"--cpu-offload-gb {req.cpu_offload_gb:g}: {moved / (1 << 30):.2f} GiB of decoder-layer weights per "
                 f"GPU live in pinned CPU memory (whole parameters, in layer order, until the limit is passed) and "
                 "are read over PCIe at every step.")
    return out


def _max_concurrent_batches(sem: VllmSemantics, device: str, pipeline_parallel_size: int) -> int:
    """VllmConfig.max_concurrent_batches: async → 2 (pp 1) or pp + 1 with the V2 runner (the
    default from 0.32); the V1 runner turns async off under pipeline parallelism."""
    async_on = sem.async_scheduling_default and device == "cuda"
    if async_on and pipeline_parallel_size == 1:
        return 2
    if async_on and sem.v2_runner_keeps_async_under_pp:
        return pipeline_parallel_size + 1
    return pipeline_parallel_size


def _in_flight_tokens(sem: VllmSemantics, max_concurrent_batches: int, max_num_batched_tokens: int) -> int:
    if sem.sliding_window_uses_in_flight_tokens:
        return max_concurrent_batches * max_num_batched_tokens
    return max_num_batched_tokens


def resolve_quantization(req: PlanRequest) -> Optional[Quantization]:
    """``--quantization`` against the checkpoint's own: the checkpoint's method, online fp8 or
    bitsandbytes, or the refusal vLLM gives for any other method."""
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


def _layout(req: PlanRequest, sem: VllmSemantics, kv_cache_dtype: KVDtype, block_size: int, dtype_bytes: int,
            stages: list[range], drafter: Optional[Drafter] = None) -> tuple[KVLayout, bool]:
    """The per-layer KV specs grouped as vLLM groups them, and whether the hybrid KV cache manager is on.
    A drafter's attention layers join the pool after the target's, on the last stage."""
    spec = req.model
    layers = list(spec.layers)
    draft_tp = req.tensor_parallel_size
    if drafter is not None and drafter.layers:
        layers += drafter.layers
        draft_tp = drafter.tensor_parallel_size
    specs = [_version_quirks(kv_spec_for(layer.mixer, req.tensor_parallel_size if i < spec.num_layers else draft_tp,
                                         block_size, kv_cache_dtype, dtype_bytes), sem)
             for i, layer in enumerate(layers)]
    chunked = any(isinstance(layer.mixer, ChunkedLocalAttention) for layer in layers)
    # HMA is off before 0.10, on request, and for chunked-local models (Llama-4) where the
    # version's VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE default says so (≤0.14).
    hybrid_kv_cache_manager = (sem.hybrid_kv_cache_manager and not req.disable_hybrid_kv_cache_manager
                               and not (chunked and not sem.chunked_local_keeps_hma))
    if not hybrid_kv_cache_manager:
        specs = [promote_to_full(s) for s in specs]
    mamba = [s for s in specs if isinstance(s, MambaSpec)]
    attn = [s for s in specs if isinstance(s, AttentionSpec)]
    if mamba and attn:
        token_bytes = attn[0].bytes_per_token()
        new_block_size = align_hybrid_block_size(spec, block_size, token_bytes, max(m.state_bytes for m in mamba))
        page = new_block_size * token_bytes
        specs = [replace(s, block_size=new_block_size, page_size_padded=page) if isinstance(s, MambaSpec)
                 else with_block_size(s, new_block_size) for s in specs]
    return build_layout(specs, stages, sem.group_size_threshold), hybrid_kv_cache_manager


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
