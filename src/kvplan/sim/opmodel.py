"""The GPU step-time model's builder: per-operator cost terms (:mod:`kvplan.sim.costterms`) over
measured vLLM kernel speeds (:mod:`kvplan.sim.kernels`) plus a few overheads fitted to the
development set, composed by :class:`kvplan.sim.stepmodel.StepModel`.

One engine step of ``tokens`` scheduled tokens over ``seqs`` sequences, reading ``kv`` KV entries
and computing ``pairs`` (query, key) pairs of prefill attention, takes

    gpu = Σ_layers [ GEMMs(m = tokens)            QKV, O, gate/up, down (+ MoE experts, router)
                   + 2 · all-reduce(tokens·d·2 B)  vLLM custom all-reduce, TP > 1
                   + attention                     c0 + per-seq + per-(token·head) + KV bytes + FLOPs
                   + elementwise                   norms, activation, residual, RoPE: bytes at peak
                   + per-layer fixed ]             launch gaps (CUDA graphs) or launches (eager)
          + LM head GEMM(m = seqs) + sampler(seqs) + per-step fixed
    cpu = scheduler + input preparation + output processing (per step, per sequence)
    step = max(gpu, cpu) with async scheduling (the CPU work of step k+1 overlaps step k),
           gpu + cpu without it
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Optional

from .costterms import (AllReduce, Attention, DenseLinears, Elementwise, EngineCore, LayerGaps, LinearAttentionState,
                        LMHead, MoEExperts, PipelineStages, Sampler)
from .kernel_transfer import transfer_for
from .stepmodel import CostTerm, StepModel, pad_to_capture

if TYPE_CHECKING:  # pragma: no cover
    from ..memory import PlanRequest, PlanResult
    from ..memory.engine_spec import EngineSpec
    from .engine_config import EngineConfig

MODEL_FORMAT = "kvplan-step-model/1"
MODEL_FORM = "per-operator sum over layers (measured kernel tables) + fitted overheads"


@dataclass(frozen=True)
class Overheads:
    """The constants the kernel tables do not measure. Each was fitted by ``benchmarks/gpu_fit.py``
    (coordinate search, 2 rounds, step 1.3) to the fit half of the development set
    (dev_cases.json, gpu_fidelity.FIT_SERIES: 44 cases) and to nothing else; docs/sim.md lists
    the fit and its error."""

    #: GPU time per step outside the layers: sampler, logits processing, graph launch, H2D copies.
    step_s: float = 0.0006
    #: GPU time per sequence per step (sampler rows, logits gather, per-request metadata).
    seq_s: float = 2.6e-6
    #: Per layer per step with CUDA graphs: the gaps between kernels the tables time one at a time.
    layer_s: float = 1.5e-5
    #: Extra per layer without CUDA graphs (--enforce-eager): ~10 kernel launches from Python.
    eager_layer_s: float = 1.0e-4
    #: Engine-core CPU time per step (schedule, prepare inputs, update from output) ...
    cpu_step_s: float = 0.000577
    #: ... and per scheduled sequence.
    cpu_seq_s: float = 2.6e-5
    #: API server latency per request seen by the client on an idle server (HTTP, detokenisation,
    #: streaming): added to TTFT and E2E. Fitted with the other overheads to 11.15 ms; the fit
    #: half's single-request runs alone (dennislee t2-01, t4-01, t6-01, t8-01) give 14.5 ms.
    request_s: float = 0.01115
    #: The API server (kvplan.sim.frontend): its work per request on the event loop (HTTP parsing,
    #: validation, input processing, a short prompt's tokenization) on the completions endpoint ...
    api_request_s: float = 0.00137
    #: ... per prompt token on its tokenizer thread ...
    api_prompt_token_s: float = 1.0e-6
    #: ... on the chat endpoint, rendering the chat template: transformers' Jinja (most models) or
    #: openai_harmony's native renderer (gpt-oss: serving_chat's use_harmony) ...
    api_chat_jinja_s: float = 6.6e-5
    api_chat_harmony_s: float = 0.0
    #: ... plus, in vLLM 0.11 (VllmSemantics.chat_template_parsed_per_request), parsing the whole
    #: Jinja template again per request: CPU seconds per template character, measured
    #: (benchmarks/chat_template_cost.py, benchmarks/data/chat_template_parse_cpu.json), times
    #: CHAT_TEMPLATE_CHARS ...
    api_chat_parse_s_per_char: float = 3.22e-6
    #: ... and per stream per engine step that gave it a token: detokenize (output_processor) and
    #: frame one SSE chunk (the stream generator).
    api_chunk_s: float = 7.81e-5
    #: ... or, a token nobody streams (a non-streamed request; the offline LLM(...) entrypoint, whose
    #: output processor runs in the caller's process): measured on the same server, not streamed
    api_token_unstreamed_s: float = 2.32e-5
    #: api_request_s, api_chat_jinja_s (the tiny model's five-line template) and api_chunk_s are the
    #: API server process's CPU seconds measured on the real vLLM 0.32 CPU server of the tests
    #: (benchmarks/frontend_cost.py, benchmarks/data/frontend_cost_cpu.json: 1.37 ms per completions
    #: request, +0.07 ms with the template, 78 us per streamed token, 23 us not streamed);
    #: api_prompt_token_s is a prior (a fast tokenizer at ~1 M tokens/s). A GPU host's server core
    #: runs the same Python this many times as fast (fitted):
    api_cpu_speed: float = 1.0
    #: Tensor parallelism across nodes or containers (TP > --gpus-per-node): NCCL over the host
    #: network instead of vLLM's custom all-reduce: latency per all-reduce and bus bandwidth.
    net_allreduce_latency_s: float = 5.0e-5
    net_bandwidth_gbs: float = 5.7
    #: GPUs without FP8 tensor cores (SM < 8.9: Ampere) run FP8 checkpoints with Marlin W8A16 and
    #: AWQ/GPTQ/MXFP4 with Marlin W4A16 (fp8.py ``use_marlin``, awq_marlin, mxfp4 MARLIN backend,
    #: read in the 0.11.0 wheel): 16-bit tensor cores at this share of their rate, the rest of the
    #: issue slots dequantizing. No kernel table measures Marlin on Ampere.
    marlin_fp8_compute_share: float = 0.8
    marlin_int4_compute_share: float = 0.9
    #: Marlin on Hopper (MXFP4 experts before vLLM 0.12 ships triton_kernels) issues Ampere's
    #: mma.sync, which reaches about 2/3 of the Hopper tensor cores' (wgmma) peak that the kernel
    #: tables measure (FlashAttention-3, Shah et al. 2024, sec. 2.2): the prior; fitted to the dev
    #: set's GPUStack gpt-oss-20b H100 random runs (vLLM 0.11.0, 2,000-32,000-token prompts).
    marlin_mma_sync_share_sm90: float = 0.47
    #: vLLM's Triton unified attention (SM 8.x with sinks or an fp8 KV cache) reads each query
    #: block's key prefix once per block of BLOCK_Q query tokens; this share of those reads comes
    #: from DRAM, the rest hit L2 (the programs of one sequence's neighbouring query blocks run
    #: together and read the same tiles). Fitted to the dev set (GPUStack gpt-oss-20b on A100,
    #: 2,000- to 32,000-token prompts); prior 1.0 (no reuse).
    triton_attention_dram_share: float = 0.6
    #: Share of the kernel tables' compute rate (GEMM and attention FLOPs) a GPU sustains while
    #: serving: the tables time each kernel alone at full clocks; under sustained load the SMs
    #: throttle to the power limit. Memory-bound times are not scaled.
    compute_sustain: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)


DEFAULT_OVERHEADS = Overheads()
#: A tool-capable chat template's length in characters (Qwen2.5/3, GLM-4.5 and Llama-3.1's are
#: 2.5-5k): one typical size for every Jinja template; the model's own is not read.
CHAT_TEMPLATE_CHARS = 4000


def _triton_block_q(heads: int, kv_heads: int) -> int:
    """Query tokens per program of vLLM's Triton unified attention (``unified_attention``, the
    same in the 0.10.2-0.19.0 wheels): BLOCK_M = 16 rows (the next power of two of the query heads
    per KV head when more), each query token filling heads / kv_heads of them; every program
    streams its query block's whole key prefix from the paged KV cache."""
    per_kv = max(1, heads // max(1, kv_heads))
    block_m = 16 if per_kv <= 16 else 1 << (per_kv - 1).bit_length()
    return max(1, block_m // per_kv)


def _weight_kind(t, quant) -> str:
    """The GEMM dtype a weight runs at: bfloat16, fp8, fp8_block, int4 or mxfp4 (nvfp4)."""
    if quant is None or not t.quantizable or (quant.experts_only and not t.expert):
        return "bfloat16"
    if any(skip and skip in t.name for skip in quant.modules_not_quantized):
        return "bfloat16"
    m = quant.method
    if m == "fp8" or (m.startswith("int") and quant.bits == 8) or (m == "compressed-tensors" and quant.bits == 8):
        return "fp8_block" if quant.weight_block else "fp8"
    if m == "mxfp4":
        return "mxfp4"
    if m in ("nvfp4", "modelopt_fp4"):
        return "nvfp4"
    if quant.bits <= 4:
        return "int4"
    return "bfloat16"


def build(request: "PlanRequest", plan: "EngineSpec | PlanResult | None" = None, *,
          async_scheduling: Optional[bool] = None, expert_parallel: bool = False,
          overheads: Optional[Overheads] = None, validation: Optional[dict] = None) -> StepModel:
    """The operator model for ``request``'s resolved engine (``plan``: its EngineSpec or the plan
    result carrying it; None: planned now) on its GPU (or the nearest measured GPU's efficiencies).
    ``async_scheduling`` None: the vLLM version's default for this layout (VllmSemantics)."""
    from .engine_config import EngineConfig, engine_spec_of

    cfg = EngineConfig.from_spec(engine_spec_of(request, plan), async_scheduling=async_scheduling,
                                 expert_parallel=expert_parallel)
    return build_for(cfg, overheads=overheads, validation=validation)


def build_for(cfg: EngineConfig, *, overheads: Optional[Overheads] = None,
              validation: Optional[dict] = None) -> StepModel:
    """The step model of a resolved engine configuration: its cost terms, in the order the model
    sums them (stepmodel's docstring says how to add one)."""
    from ..models.params import MoEMLP, layer_tensors
    from ..models.spec import LinearAttentionState as LinearStateMixer
    from ..models.spec import MLAttention, SlidingWindowAttention
    from . import kernels as K

    ov = overheads or DEFAULT_OVERHEADS
    gpu, spec = cfg.gpu, cfg.model
    tp, pp = cfg.tensor_parallel_size, cfg.pipeline_parallel_size
    table_name, exact = K.nearest_measured(gpu)
    table = K.load_table(table_name)
    # a borrowed table at this GPU's peaks, scaled to its published kernel measurements where there are some
    transfer = None if exact else transfer_for(gpu.name)
    gemm = K.gemm_table_for(table, gpu, compute_scale=ov.compute_sustain, transfer=transfer)
    gemm_as_measured = K.gemm_table_for(table, gpu, transfer=transfer) if ov.compute_sustain != 1.0 else gemm
    bw, _gemm_bw, f16, _f8 = K.peak_rates(table, gpu, transfer)
    quant = cfg.quantization
    kv_name = cfg.kv_cache_dtype
    kv_bytes = cfg.kv_bytes
    eager = cfg.enforce_eager
    cross_node = cfg.tp_across_nodes
    if tp <= 1:
        ar = None
    elif cross_node:
        def ar(nbytes: float) -> float:  # NCCL ring over the network
            return ov.net_allreduce_latency_s + 2.0 * (tp - 1) / tp * nbytes / (ov.net_bandwidth_gbs * 1e9)
    else:
        ar = K.AllReduce(table["allreduce"], tp, graph=not eager, transfer=transfer)
    wo = {k: K.weight_only_ratio(table, k) for k in ("int4", "mxfp4")}
    notes: list[str] = []
    if wo["mxfp4"] is None and wo["int4"] is not None:
        wo["mxfp4"] = wo["int4"]
        if quant is not None and quant.method == "mxfp4":
            notes.append(f"MXFP4 experts at the measured Marlin int4 speed ({table_name} has no MXFP4 MoE table)")

    # vLLM's kernel for quantized weights on a GPU without FP8/FP4 tensor cores: Marlin, weight-only
    marlin = {"fp8": (1.0, ov.marlin_fp8_compute_share), "fp8_block": (1.0, ov.marlin_fp8_compute_share),
              "int4": (0.5 + 2.0 / 128, ov.marlin_int4_compute_share),
              "mxfp4": (0.5 + 1.0 / 32, ov.marlin_int4_compute_share),
              "nvfp4": (0.5 + 1.0 / 16, ov.marlin_int4_compute_share)} if (gpu.sm or 90) < 89 else {}
    if marlin and quant is not None:
        notes.append(f"{quant.method} weights run as Marlin weight-only GEMMs on {gpu.name} (SM {gpu.sm} has no "
                     "FP8/FP4 tensor cores): 16-bit tensor cores, the weights dequantized in the kernel")
    elif (quant is not None and quant.method == "mxfp4" and cfg.device == "cuda" and (gpu.sm or 0) >= 90
          and not cfg.semantics.mxfp4_moe_triton_bundled):
        # a pip-installed vLLM before 0.12 has no triton_kernels: MXFP4 experts fall back to Marlin
        marlin = {"mxfp4": (0.5 + 1.0 / 32, ov.marlin_int4_compute_share * ov.marlin_mma_sync_share_sm90)}
        notes.append(f"MXFP4 experts as Marlin W4A16 on {gpu.name}: vLLM {cfg.semantics.label} ships no "
                     "triton_kernels (from 0.12 it does), so a pip install falls back to Marlin (mma.sync at "
                     f"{ov.marlin_mma_sync_share_sm90:.2f} of the tensor cores' peak); a FlashInfer build is faster")

    def gemm_t(m: float, n: float, k: float, kind: str) -> float:
        if kind in marlin:
            weight_bytes, share = marlin[kind]
            return gemm.weight_only_time(m, n, k, weight_bytes, share)
        if kind in ("int4", "mxfp4") or (kind == "nvfp4" and "nvfp4" not in gemm.eff):
            r = wo.get("mxfp4" if kind != "int4" else "int4") or wo.get("int4")
            base = gemm.time(m, n, k, "bfloat16")
            return base * (r(m) if r else 0.5)
        return gemm.time(m, n, k, kind)

    # -- per-layer operators, grouped by identical layers -----------------------------------------
    dense_groups: dict[tuple, int] = {}
    moe_groups: dict[tuple, int] = {}
    window = 0
    sliding_layers = full_kv_bytes = sliding_kv_bytes = 0.0
    # MLA: the latent's bytes and the absorbed decode's FLOPs per KV token (compute-bound: 128 heads
    # share one 576-value latent), in full or - DeepSeek-V3.2's sparse attention - over the
    # indexer's top-k tokens only; the indexer's own keys are read over the whole context
    mla_bytes = mla_flops = sparse_bytes = sparse_flops = 0.0
    sparse_topk = int(spec.raw_flag("index_topk") or 0)
    # platforms/cuda.py get_attn_backend_cls (read in the 0.10.1.1-0.11.0 wheels; the backends'
    # supports_sink in 0.19.0): attention sinks (gpt-oss) or an fp8 KV cache on SM 8.x select
    # TRITON_ATTN, not FlashAttention
    triton_attention = (cfg.device == "cuda" and 80 <= (gpu.sm or 0) < 90
                        and (spec.model_type == "gpt_oss" or kv_name.startswith("fp8")))
    heads_total = kv_heads_total = 0.0
    pair_flops = sliding_pair_flops = 0.0
    # the KV bytes a prefill (query, key) pair streams in vLLM's Triton unified attention (below)
    pair_kv_bytes = sliding_pair_kv_bytes = 0.0
    state_bytes = 0.0
    layers = spec.layers
    for layer in layers:
        mix = layer.mixer
        gemms: dict[tuple, float] = {}  # (name, k, kind) -> n, fused per input
        for t in layer_tensors(spec, layer):
            if not (t.quantizable or t.name == "router") or t.name.endswith("bias"):
                continue
            per_rank = t.numel_per_rank(tp)
            k_in = t.group_dim or spec.hidden_size
            if t.shard == "row":
                k_in = max(1, k_in // tp) if t.group_dim else k_in
            if t.expert:
                continue
            kind = "bfloat16" if t.name == "router" else _weight_kind(t, quant)
            key = (t.name in ("q_proj", "k_proj", "v_proj") and "qkv" or t.name, k_in, kind)
            gemms[key] = gemms.get(key, 0.0) + per_rank / k_in
        shapes = tuple((n, k_in, kind) for (name, k_in, kind), n in sorted(gemms.items()))
        dense_groups[shapes] = dense_groups.get(shapes, 0) + 1
        if isinstance(layer.mlp, MoEMLP):
            mlp = layer.mlp
            exp_t = next(t for t in layer_tensors(spec, layer) if t.expert)
            # gated experts (SwiGLU) have a fused gate+up of 2·inter; Nemotron-H's relu² experts 1·inter
            up = 2 if getattr(mlp, "gated", True) else 1
            if cfg.expert_parallel:
                # FusedMoEParallelConfig.make (0.11.0, 0.19.0): ep_size = TP x DP, each rank owns whole
                # experts (E / ep of them) and a token's k picks land on it k / ep times on average
                ep = tp * cfg.data_parallel_size
                moe = (mlp.num_experts / ep, mlp.experts_per_token / ep, float(mlp.expert_intermediate_size),
                       _weight_kind(exp_t, quant), up)
            else:
                moe = (mlp.num_experts, mlp.experts_per_token, mlp.expert_intermediate_size / tp,
                       _weight_kind(exp_t, quant), up)
            moe_groups[moe] = moe_groups.get(moe, 0) + 1
        # attention reads, heads, FLOPs
        if isinstance(mix, MLAttention):
            heads = max(1, mix.num_heads // tp)
            per_tok = mix.latent_dim * kv_bytes
            # FlashMLA / Triton MLA decode with the weights absorbed: q·latent over kv_lora + rope,
            # then p·latent over kv_lora, per head (vllm attention/backends/mla)
            flops = 2.0 * heads * (2 * mix.kv_lora_rank + mix.qk_rope_head_dim)
            if mix.indexer_bytes_per_token and sparse_topk:
                sparse_bytes += per_tok
                sparse_flops += flops
                full_kv_bytes += mix.indexer_bytes_per_token
            else:
                mla_bytes += per_tok
                mla_flops += flops
            heads_total += heads
            pair_flops += 2.0 * heads * (mix.qk_nope_head_dim + mix.qk_rope_head_dim + mix.v_head_dim)
        elif isinstance(mix, LinearStateMixer):
            # the recurrent state is read and written once per sequence per step
            state_bytes += 2.0 * max(1, mix.num_v_heads // tp) * mix.head_k_dim * mix.head_v_dim * 2.0
        else:
            heads = max(1, mix.num_heads // tp)
            kvh = max(1, mix.num_kv_heads // tp)
            per_tok = kvh * (mix.head_dim + mix.head_dim_v) * kv_bytes
            flops = 2.0 * heads * (mix.head_dim + mix.head_dim_v)
            if isinstance(mix, SlidingWindowAttention) and mix.window:
                sliding_kv_bytes += per_tok
                window = max(window, int(mix.window))
                sliding_layers += 1
                sliding_pair_flops += flops
                sliding_pair_kv_bytes += per_tok / _triton_block_q(heads, kvh)
            else:
                full_kv_bytes += per_tok
                pair_flops += flops
                pair_kv_bytes += per_tok / _triton_block_q(heads, kvh)
            heads_total += heads
            kv_heads_total += kvh
    n_layers = len(layers)
    head_dim = getattr(layers[0].mixer, "head_dim", 128) if layers else 128
    att, att_key = K.attention_fit(table, kv_name, head_dim)
    dec, pre = att["decode"], att["prefill"]
    if not 0.0 < (pre.get("flops_eff") or 0.0) <= 1.0:
        pre, pre_src = K.physical_prefill_fit(table_name, kv_name, head_dim)
        notes.append(f"{table_name}'s prefill attention fit ({att_key}) is faster than the GPU's peak (a failed fit "
                     f"of the measured rows): the fit of {pre_src} is used")
    kv_eff = dec["bandwidth_eff"] or 0.8
    fl_eff = pre["flops_eff"] or 0.5
    attn_layers = max(1, sum(1 for lay in layers if not isinstance(lay.mixer, LinearStateMixer)))
    mla_f = f16 * ov.compute_sustain  # MLA decode runs on the 16-bit tensor cores (an fp8 latent is upcast)
    d = spec.hidden_size
    vocab_rank = -(-spec.vocab_size // 64) * 64 / tp

    direct_cache: dict = {}

    def direct_for(e: int, k: int, inter: float, kind: str):
        """A measured fused-MoE curve for this shape: this GPU's, else a same-architecture GPU's
        scaled by the two GPUs' measured bf16 GEMM times for the expert GEMM; at another expert
        width (the same experts at another TP), the nearest measured width's, scaled by the
        modelled ratio of the two widths. Returns (curve, other GPU's GEMM table, width) or None."""
        key = (e, k, inter, kind)
        if key not in direct_cache:
            hit = K.moe_direct(table, kind, d, inter, e, k)
            if hit is not None:
                direct_cache[key] = (hit, None, inter)
                for sup in table.get("source", {}).get("moe_supplements", ()):
                    if sup["moe_dtype"] == K.AIC_MOE_DTYPE.get(kind):  # not the table's own vLLM version
                        notes.append(f"{kind} experts ({e}x{d}x{int(inter)}) at {table_name}'s fused-MoE speed "
                                     f"measured with vLLM {sup['vllm_version']}'s kernel "
                                     f"({', '.join(sup['kernel_source'])})")
            else:
                direct_cache[key] = None
                for other in K.same_arch_tables(table_name):
                    ot = K.load_table(other)
                    hit = K.moe_direct(ot, kind, d, inter, e, k)
                    if hit is not None:
                        from ..hardware import find_gpu

                        og = K.gemm_table_for(ot, find_gpu(other))
                        direct_cache[key] = (hit, og, inter)
                        notes.append(f"{kind} experts ({e}x{d}x{int(inter)}) at {other}'s measured fused-MoE speed, "
                                     f"scaled by the two GPUs' measured GEMM times")
                        break
                if direct_cache[key] is None and e == int(e) and k == int(k):
                    near = K.moe_direct_nearest_width(table, kind, d, inter, int(e), int(k))
                    if near is not None:
                        width, curve = near
                        direct_cache[key] = (curve, None, width)
                        notes.append(f"{kind} experts ({e}x{d}x{int(inter)} per rank) from {table_name}'s fused-MoE "
                                     f"measurement at width {int(width)}, scaled by the modelled ratio of the widths")
        return direct_cache[key]

    def moe_t(m: int, e: int, k: int, inter: float, kind: str, up: int = 2) -> float:
        dm = direct_for(e, k, inter, kind) if up == 2 and kind not in marlin else None
        if dm is not None:
            curve, other, width = dm
            t = curve(m)
            touched = e * (1.0 - (1.0 - k / e) ** m)
            me = m * k / touched
            if other is not None:
                t *= gemm.time(me, 2 * inter, d) / other.time(me, 2 * inter, d)
            if width != inter or gemm_as_measured is not gemm:
                # the same experts at another width, or sustained clocks: the measured curve times
                # the grouped GEMMs' modelled ratio (bf16 roofline over the measured efficiencies)
                def grouped(g, w: float) -> float:
                    return g.time(me, touched * up * w, d) + g.time(me, touched * d, w)
                t *= grouped(gemm, inter) / grouped(gemm_as_measured, width)
            return t
        touched = e * (1.0 - (1.0 - k / e) ** m)
        me = m * k / touched
        if kind in marlin:  # fused_marlin_moe: the expert GEMMs as Marlin weight-only GEMMs
            fac = K.moe_factor(table, "bfloat16")(m)
            return (gemm_t(me, touched * up * inter, d, kind) + gemm_t(me, touched * d, inter, kind)) * fac
        base_kind = kind if kind in ("fp8", "fp8_block") else "bfloat16"
        fac = K.moe_factor(table, base_kind)(m)
        # one fused kernel streams every touched expert: the experts stacked along n
        t = (gemm.time(me, touched * up * inter, d, base_kind) + gemm.time(me, touched * d, inter, base_kind)) * fac
        if kind in ("int4", "mxfp4", "nvfp4"):
            r = wo.get("mxfp4" if kind != "int4" else "int4") or wo.get("int4")
            t *= r(m) if r else 0.5
        return t

    elem_bytes_per_token = 0.0
    for layer in layers:
        ff = getattr(layer.mlp, "intermediate_size", 0) or getattr(layer.mlp, "expert_intermediate_size", 0)
        # norms (read + write d twice), residual adds, activation over gate/up, RoPE on q/k: bf16
        elem_bytes_per_token += (layer.norms * 2 + 4) * d * 2.0 + 3.0 * ff / tp * 2.0

    def pad(s: int) -> int:
        return s if eager else pad_to_capture(s)

    # -- the terms, in the order the model sums each part ----------------------------------------
    terms: list[CostTerm] = [DenseLinears(name="linear layers (GEMM)", groups=tuple(
        (count, shapes) for shapes, count in dense_groups.items()), gemm_time=gemm_t)]
    if moe_groups:
        terms.append(MoEExperts(name="MoE experts", groups=tuple((count, moe) for moe, count in moe_groups.items()),
                                moe_time=moe_t))
    if ar is not None:
        terms.append(AllReduce(name="all-reduce", layers=n_layers, hidden=d, latency=ar, over_network=cross_node))
    terms.append(LMHead(name="LM head", vocab_per_rank=vocab_rank, hidden=d, pad=pad, gemm_time=gemm_t))
    terms.append(Sampler(name="sampler and step launch", fixed_s=ov.step_s, seq_s=ov.seq_s))
    terms.append(LayerGaps(name="per-layer gaps" + (" and eager launches" if eager else ""),
                           fixed_s=n_layers * (ov.layer_s + (ov.eager_layer_s if eager else 0.0))))
    pair_f = f16 * ov.compute_sustain * fl_eff
    pair_s, window_pair_s = pair_flops / pair_f, sliding_pair_flops / pair_f
    if triton_attention:
        # kernel_unified_attention_2d streams every key of a query's prefix once per block of
        # BLOCK_Q query tokens: at long contexts the KV traffic, not the FLOPs, bounds it
        dram = ov.triton_attention_dram_share
        pair_s = max(pair_s, pair_kv_bytes * dram / (bw * kv_eff))
        window_pair_s = max(window_pair_s, sliding_pair_kv_bytes * dram / (bw * kv_eff))
    # one kernel per token-head (the decode and prefill fits agree within 25%: their mean is used)
    terms.append(Attention(
        name="attention", fixed_s=attn_layers * dec["c0_s"],
        kv_token_s=full_kv_bytes / (bw * kv_eff) + max(mla_bytes / (bw * kv_eff), mla_flops / (mla_f * fl_eff)),
        window_kv_s=sliding_kv_bytes / (bw * kv_eff) + max(sparse_bytes / (bw * kv_eff),
                                                           sparse_flops / (mla_f * fl_eff)),
        window=window or (sparse_topk if sparse_bytes else 0),
        pair_s=pair_s, window_pair_s=window_pair_s if window else 0.0,
        prefill_fixed_s=attn_layers * pre["c0_s"], token_head_s=(dec["per_seq_head_s"] + pre["per_token_head_s"]) / 2.0,
        heads=heads_total, seq_s=attn_layers * dec["per_seq_s"]))
    terms.append(Elementwise(name="elementwise (norms, activation, RoPE)", bytes_per_token=elem_bytes_per_token,
                             bandwidth=bw * 0.8))
    if state_bytes:
        terms.append(LinearAttentionState(name="linear-attention state", bytes_per_seq=state_bytes,
                                          bandwidth=bw * 0.8))
    if pp > 1:
        # a step passes every stage in turn (no micro-batch overlap): the layers already sum all
        # stages; each stage boundary adds a send/recv of the activations
        terms.append(PipelineStages(name="pipeline stage boundaries", fixed_s=(pp - 1) * 2e-5))
    terms.append(EngineCore(name="engine core (CPU)", fixed_s=ov.cpu_step_s, seq_s=ov.cpu_seq_s))
    # evaluate the experts once so the lookups that add notes (a transferred MoE curve) have run
    for term in terms:
        if isinstance(term, MoEExperts):
            term.padded(1)
    if any("fused-MoE speed" in n for n in notes):
        notes[:] = [n for n in notes if "Marlin int4 speed" not in n]
    if cfg.expert_parallel:
        ep = tp * cfg.data_parallel_size
        notes.append(f"expert parallel over {ep} ranks: each runs {ep}-th of the experts at full width; "
                     "without data parallelism the MoE output is all-reduced as with TP (no all-to-all kernels: "
                     "FusedMoEParallelConfig.use_all2all_kernels needs DP > 1)"
                     + ("; the DP all-to-all (dispatch/combine) is not modelled" if cfg.data_parallel_size > 1 else ""))
    if cross_node:
        notes.append(f"TP {tp} spans {-(-tp // max(1, cfg.gpus_per_node))} nodes/containers: all-reduce over "
                     f"the network ({ov.net_bandwidth_gbs:g} GB/s, {ov.net_allreduce_latency_s * 1e6:.0f} us each, "
                     "fitted), not vLLM's custom all-reduce")
    if pp > 1:
        notes.append(f"pipeline parallel {pp}: stages run one after the other; one send/recv per boundary")
    if sliding_layers:
        notes.append(f"sliding-window layers read at most {window} tokens per sequence (mean context per step)")
    if triton_attention:
        notes.append(f"{gpu.name} runs this attention with vLLM's Triton kernel (sinks or an fp8 KV cache on "
                     "SM 8.x): prefill at the FlashAttention fit's FLOP rate or the kernel's KV traffic (each "
                     f"block of {16 // min(16, max(1, round(heads_total / max(1.0, kv_heads_total))))} query tokens "
                     "streams its whole prefix), whichever is slower")
    if mla_bytes or sparse_bytes:
        notes.append("MLA decode: the latent's bytes or the absorbed attention's FLOPs per KV token, whichever is "
                     "slower (many heads share one latent: compute-bound at long context)"
                     + (f"; DeepSeek-V3.2 sparse attention over the indexer's top {sparse_topk} tokens per "
                        "sequence, the indexer's keys over the whole context" if sparse_bytes else ""))
    if cfg.semantics.chat_template_parsed_per_request and spec.model_type != "gpt_oss":
        notes.append(f"on the chat endpoint vLLM {cfg.semantics.label} parses the whole chat template again for every "
                     f"request (resolve_chat_template_kwargs; cached from 0.12): "
                     f"{ov.api_chat_parse_s_per_char * CHAT_TEMPLATE_CHARS / ov.api_cpu_speed * 1e3:.1f} ms of the "
                     f"API server's time per request for a {CHAT_TEMPLATE_CHARS:,}-character template")
    version = table.get("vllm_version", "?")
    tables_desc = f"{table_name} (AIConfigurator, vLLM {version} kernels)"
    if transfer is not None:
        notes.append(f"{gpu.name} has no measured kernel tables: {transfer.describe()}")
    elif not exact:
        notes.append(f"{gpu.name} has no measured kernel tables: roofline at its own catalog peaks with the "
                     f"efficiencies measured on {table_name}")
    clock = {
        "model": MODEL_FORM,
        "kernel_tables": table_name, "kernel_tables_exact": exact, "kernels_vllm_version": version,
        "kernel_source": table["source"]["repo"] + "@" + table["source"]["commit"][:12],
        "attention_fit": att_key, "cuda_graphs": not eager, "async_scheduling": cfg.async_scheduling,
        "overheads": ov.to_dict(),
        "validation": validation or validation_error(gpu.name, table_name),
    }
    # the offline entrypoint (LLM(...), `vllm bench throughput` / `latency`): no HTTP round trip and
    # nothing streamed; the caller's process still processes every request and token (v1 LLMEngine)
    offline = cfg.entrypoint == "offline"
    if offline:
        notes.append("offline entrypoint (LLM(...)): no API server; the caller's process adds the requests and "
                     f"processes each token at the measured non-streamed cost ({ov.api_token_unstreamed_s * 1e6:.0f} us)")
    return StepModel(
        terms=tuple(terms), async_overlap=cfg.async_scheduling, cuda_graphs=not eager,
        request_overhead_s=0.0 if offline else ov.request_s, api_request_s=ov.api_request_s / ov.api_cpu_speed,
        api_prompt_token_s=ov.api_prompt_token_s / ov.api_cpu_speed,
        api_chunk_s=(ov.api_token_unstreamed_s if offline else ov.api_chunk_s) / ov.api_cpu_speed,
        api_chat_render_s={"jinja": (ov.api_chat_jinja_s + (ov.api_chat_parse_s_per_char * CHAT_TEMPLATE_CHARS
                                                            if cfg.semantics.chat_template_parsed_per_request else 0.0))
                           / ov.api_cpu_speed,
                           "harmony": ov.api_chat_harmony_s / ov.api_cpu_speed},
        source=f"kernel model for {gpu.name} TP{tp}" + (f" PP{pp}" if pp > 1 else "") + f": {tables_desc}",
        device=gpu.name, clock=clock, notes=tuple(notes))


def validation_error(gpu_name: str, table_name: Optional[str] = None) -> dict:
    """The error measured by benchmarks/gpu_fidelity.py for this GPU's cases (docs/sim.md). A GPU
    that borrows another GPU's kernel tables (``table_name``) quotes only its own measured error:
    the lending GPU's error does not transfer (its peaks, memory system and software differ)."""
    from . import validation

    v = validation.by_gpu().get(gpu_name)
    if v is None:
        borrowed = (f"; it borrows the kernel efficiencies measured on {table_name}, whose error does not "
                    "transfer" if table_name and table_name != gpu_name else "")
        return {"measured": False, "note": f"no published end-to-end vLLM runs on {gpu_name} in the "
                                           f"development set: the error on this GPU is unknown{borrowed}"}
    return {"measured": True, **v}


def traffic_regimes(trace) -> list[str]:
    """The regimes of gpu_fidelity's tables a trace is in: closed loop / burst / request rate, and
    ShareGPT or random for vllm bench's datasets."""
    bench = getattr(trace, "bench", None) or {}
    if getattr(trace, "max_concurrency", None):
        out = ["closed loop"]
    elif bench.get("request_rate") == "inf" or all(r.arrival_s == 0.0 for r in trace.requests[:2]):
        out = ["burst"]
    else:
        out = ["request rate"]
    if bench.get("dataset_name") in ("sharegpt", "random"):
        out.append(bench["dataset_name"])
    return out


def regime_validation(trace) -> dict:
    """Per regime of ``trace``: the leave-one-source-out error measured there (or that it is not)."""
    from . import validation

    table = validation.by_regime()
    return {name: ({"measured": True, **table[name]} if name in table else
                   {"measured": False, "note": f"no development cases in the {name} regime"})
            for name in traffic_regimes(trace)}


def clock_for_gpu(gpu) -> dict:
    """The clock a GPU's default step-time model states, without building one (for tune)."""
    from . import kernels as K

    if not gpu.bandwidth_gbs or not gpu.bf16_tflops:
        return {"model": "none (no catalog peaks)", "kernel_tables": None, "validation": {"measured": False}}
    name, exact = K.nearest_measured(gpu)
    return {"model": MODEL_FORM, "kernel_tables": name, "kernel_tables_exact": exact,
            "kernels_vllm_version": K.load_table(name).get("vllm_version"),
            "validation": validation_error(gpu.name, name)}
