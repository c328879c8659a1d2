"""The GPU step-time model: per-operator times summed over the model's layers, from measured
vLLM kernel speeds (:mod:`kvplan.sim.kernels`) plus a few overheads fitted to the development set.

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

Everything that depends on ``tokens`` or ``seqs`` alone is memoised per value (the simulator
asks the same few hundred values millions of times), the rest is linear: a step costs two dict
lookups and a few multiplications.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # pragma: no cover
    from ..memory import PlanRequest, PlanResult

MODEL_FORMAT = "kvplan-step-model/1"
MODEL_FORM = "per-operator sum over layers (measured kernel tables) + fitted overheads"


@dataclass(frozen=True)
class Overheads:
    """The constants the kernel tables do not measure. Each was fitted by ``benchmarks/gpu_fit.py``
    (coordinate search, 2 rounds, step 1.3) to the fit half of the development set
    (/work/shared/perf/dev_cases.json, gpu_fidelity.FIT_SERIES: 44 cases) and to nothing else;
    docs/sim.md lists the fit and its error. Last refit in session 7, after the clock had changed
    under the earlier fit: seq_s, cpu_step_s, cpu_seq_s, request_s, api_request_s and
    net_bandwidth_gbs moved; the others kept their values."""

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
    #: streaming): added to TTFT and E2E. First set from the fit half's single-request runs
    #: (dennislee t2-01, t4-01, t6-01, t8-01: 14.5 ms), refitted with the rest to 11.15 ms.
    request_s: float = 0.01115
    #: The API server is one process: each request holds it for this long (HTTP parsing, request
    #: validation, input processing) before it reaches the engine, one after the other ...
    api_request_s: float = 0.0104
    #: ... plus tokenisation per prompt token.
    api_prompt_token_s: float = 1.0e-6
    #: Tensor parallelism across nodes or containers (TP > --gpus-per-node): NCCL over the host
    #: network instead of vLLM's custom all-reduce: latency per all-reduce and bus bandwidth.
    net_allreduce_latency_s: float = 5.0e-5
    net_bandwidth_gbs: float = 5.7

    def to_dict(self) -> dict:
        return asdict(self)


DEFAULT_OVERHEADS = Overheads()
#: vLLM's CUDA-graph capture sizes (0.11+ default, max_cudagraph_capture_size 512): a batch of up
#: to 512 tokens runs padded to the next size (vllm/config/compilation.py).
_CAPTURE = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))


def _pad(tokens: int) -> int:
    if tokens > _CAPTURE[-1]:
        return tokens
    lo, hi = 0, len(_CAPTURE) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _CAPTURE[mid] >= tokens:
            hi = mid
        else:
            lo = mid + 1
    return _CAPTURE[lo]


@dataclass(frozen=True)
class OperatorStepTime:
    """A step-time model with the interface of :class:`kvplan.sim.steptime.StepTimeProfile`
    (``time``, ``step_time``, ``to_dict``, ``source``, ``request_overhead_s``)."""

    per_kv_token_s: float
    per_attn_pair_s: float
    prefill_fixed_s: float  # attention launch of the prefill kernel, per layer, in steps with prefill
    sliding_per_kv_token_s: float
    sliding_window: int
    fixed_gpu_s: float
    cpu_step_s: float
    cpu_seq_s: float
    async_overlap: bool
    request_overhead_s: float
    api_request_s: float
    api_prompt_token_s: float
    source: str
    device: str
    clock: dict
    notes: tuple[str, ...] = ()
    components: dict = field(default_factory=dict)
    _tok_fn: Any = field(default=None, compare=False, repr=False)
    _seq_fn: Any = field(default=None, compare=False, repr=False)
    _tok: dict = field(default_factory=dict, compare=False, repr=False)
    _seq: dict = field(default_factory=dict, compare=False, repr=False)

    def time(self, tokens: int, num_seqs: int, kv_read_tokens: float, attn_pairs: float) -> float:
        a = self._tok.get(tokens)
        if a is None:
            a = self._tok[tokens] = self._tok_fn(tokens)
        b = self._seq.get(num_seqs)
        if b is None:
            b = self._seq[num_seqs] = self._seq_fn(num_seqs)
        gpu = a + b + self.fixed_gpu_s + self.per_kv_token_s * kv_read_tokens
        if self.sliding_window:
            cap = num_seqs * self.sliding_window
            gpu += self.sliding_per_kv_token_s * (kv_read_tokens if kv_read_tokens < cap else cap)
        if attn_pairs:
            gpu += self.prefill_fixed_s + self.per_attn_pair_s * attn_pairs
        cpu = self.cpu_step_s + self.cpu_seq_s * num_seqs
        if self.async_overlap:
            return gpu if gpu > cpu else cpu
        return gpu + cpu

    def step_time(self, shape) -> float:
        return self.time(shape.prefill_tokens + shape.decode_tokens, shape.num_seqs, shape.kv_read_tokens,
                         shape.attn_pairs)

    def breakdown(self, tokens: int, num_seqs: int, kv_read_tokens: float, attn_pairs: float) -> dict:
        """Seconds per component for one step (for docs and tests; not the hot path)."""
        parts = {k: f(tokens) for k, f in self.components.get("per_token", {}).items()}
        parts.update({k: f(num_seqs) for k, f in self.components.get("per_seq", {}).items()})
        parts["kv_read"] = self.per_kv_token_s * kv_read_tokens
        parts["prefill_attention"] = (self.prefill_fixed_s + self.per_attn_pair_s * attn_pairs) if attn_pairs else 0.0
        parts["fixed"] = self.fixed_gpu_s
        parts["cpu"] = self.cpu_step_s + self.cpu_seq_s * num_seqs
        return parts

    def to_dict(self) -> dict[str, Any]:
        return {"format": MODEL_FORMAT, "source": self.source, "device": self.device, "clock": dict(self.clock),
                "per_kv_token_s": self.per_kv_token_s, "per_attn_pair_s": self.per_attn_pair_s,
                "prefill_fixed_s": self.prefill_fixed_s, "sliding_per_kv_token_s": self.sliding_per_kv_token_s,
                "sliding_window": self.sliding_window, "fixed_gpu_s": self.fixed_gpu_s,
                "cpu_step_s": self.cpu_step_s, "cpu_seq_s": self.cpu_seq_s, "async_overlap": self.async_overlap,
                "request_overhead_s": self.request_overhead_s, "api_request_s": self.api_request_s,
                "api_prompt_token_s": self.api_prompt_token_s, "notes": list(self.notes),
                # what one step costs at a few shapes, so a reader sees the clock without running it
                "examples_s": {f"decode_{n}": round(self.time(n, n, n * 1024, 0.0), 6) for n in (1, 32, 256)}
                | {"prefill_2048": round(self.time(2048, 1, 2048, 2048 * 2048 / 2.0), 6)}}


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


def build(request: "PlanRequest", plan_result: "PlanResult", *, async_scheduling: bool = True,
          overheads: Optional[Overheads] = None, validation: Optional[dict] = None) -> OperatorStepTime:
    """The operator model for ``request`` on its GPU (or the nearest measured GPU's efficiencies)."""
    from ..memory.planner import _quantization
    from ..models.params import MoEMLP, layer_tensors
    from ..models.spec import LinearAttentionState, MLAttention, SlidingWindowAttention
    from . import kernels as K

    ov = overheads or DEFAULT_OVERHEADS
    gpu, spec = request.gpu, request.model
    tp, pp = request.tensor_parallel_size, request.pipeline_parallel_size
    table_name, exact = K.nearest_measured(gpu)
    table = K.load_table(table_name)
    gemm = K.gemm_table_for(table, gpu)
    bw = (gpu.bandwidth_gbs or table["peaks"]["bandwidth_gbs"]) * 1e9
    f16 = (gpu.bf16_tflops or table["peaks"]["bf16_tflops"]) * 1e12
    quant = _quantization(request)
    kv_name = plan_result.flags.kv_cache_dtype
    kv_bytes = 1.0 if kv_name.startswith("fp8") else 2.0
    eager = plan_result.flags.enforce_eager
    ar = K.AllReduce(table["allreduce"], tp, graph=not eager) if tp > 1 else None
    cross_node = tp > max(1, request.gpus_per_node)
    if cross_node:
        def ar(nbytes: float) -> float:  # NCCL ring over the network
            return ov.net_allreduce_latency_s + 2.0 * (tp - 1) / tp * nbytes / (ov.net_bandwidth_gbs * 1e9)
    wo = {k: K.weight_only_ratio(table, k) for k in ("int4", "mxfp4")}
    notes: list[str] = []
    if wo["mxfp4"] is None and wo["int4"] is not None:
        wo["mxfp4"] = wo["int4"]
        if quant is not None and quant.method == "mxfp4":
            notes.append(f"MXFP4 experts at the measured Marlin int4 speed ({table_name} has no MXFP4 MoE table)")

    def gemm_t(m: float, n: float, k: float, kind: str) -> float:
        if kind in ("int4", "mxfp4") or (kind == "nvfp4" and "nvfp4" not in gemm.eff):
            r = wo.get("mxfp4" if kind != "int4" else "int4") or wo.get("int4")
            base = gemm.time(m, n, k, "bfloat16")
            return base * (r(m) if r else 0.5)
        return gemm.time(m, n, k, kind)

    # -- per-layer operators, grouped by identical layers -----------------------------------------
    groups: dict[tuple, list] = {}
    window = 0
    sliding_layers = full_kv_bytes = sliding_kv_bytes = 0.0
    heads_total = 0.0
    pair_flops = 0.0
    state_bytes = 0.0
    layers = spec.layers
    for layer in layers:
        mix = layer.mixer
        gemms: dict[tuple, float] = {}  # (k, kind) -> n, fused per input
        moe = None
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
        if isinstance(layer.mlp, MoEMLP):
            mlp = layer.mlp
            exp_t = next(t for t in layer_tensors(spec, layer) if t.expert)
            # gated experts (SwiGLU) have a fused gate+up of 2·inter; Nemotron-H's relu² experts 1·inter
            up = 2 if getattr(mlp, "gated", True) else 1
            moe = (mlp.num_experts, mlp.experts_per_token, mlp.expert_intermediate_size / tp, _weight_kind(exp_t, quant),
                   up)
        sig = (tuple(sorted(gemms.items())), moe)
        groups.setdefault(sig, [0])[0] += 1
        # attention reads, heads, FLOPs
        if isinstance(mix, MLAttention):
            heads = max(1, mix.num_heads // tp)
            per_tok = mix.latent_dim * kv_bytes
            full_kv_bytes += per_tok
            heads_total += heads
            pair_flops += 2.0 * heads * (mix.qk_nope_head_dim + mix.qk_rope_head_dim + mix.v_head_dim)
        elif isinstance(mix, LinearAttentionState):
            # the recurrent state is read and written once per sequence per step
            state_bytes += 2.0 * max(1, mix.num_v_heads // tp) * mix.head_k_dim * mix.head_v_dim * 2.0
        else:
            heads = max(1, mix.num_heads // tp)
            kvh = max(1, mix.num_kv_heads // tp)
            per_tok = kvh * (mix.head_dim + mix.head_dim_v) * kv_bytes
            if isinstance(mix, SlidingWindowAttention) and mix.window:
                sliding_kv_bytes += per_tok
                window = max(window, int(mix.window))
                sliding_layers += 1
            else:
                full_kv_bytes += per_tok
            heads_total += heads
            pair_flops += 2.0 * heads * (mix.head_dim + mix.head_dim_v)
    n_layers = len(layers)
    head_dim = getattr(layers[0].mixer, "head_dim", 128) if layers else 128
    att, att_key = K.attention_fit(table, kv_name, head_dim)
    dec, pre = att["decode"], att["prefill"]
    kv_eff = dec["bandwidth_eff"] or 0.8
    fl_eff = pre["flops_eff"] or 0.5
    attn_layers = max(1, sum(1 for lay in layers if not isinstance(lay.mixer, LinearAttentionState)))
    per_kv_token_s = full_kv_bytes / (bw * kv_eff)
    sliding_per_kv_token_s = sliding_kv_bytes / (bw * kv_eff)
    per_attn_pair_s = pair_flops / (f16 * fl_eff)
    # one kernel per token-head (both fits agree within 25%: the mean of the two is used)
    tok_head_s = (dec["per_seq_head_s"] + pre["per_token_head_s"]) / 2.0
    d = spec.hidden_size
    vocab_rank = -(-spec.vocab_size // 64) * 64 / tp

    direct_cache: dict = {}

    def direct_for(e: int, k: int, inter: float, kind: str):
        """A measured fused-MoE curve for this exact shape: this GPU's, else a same-architecture
        GPU's scaled by the two GPUs' measured bf16 GEMM times for the expert GEMM."""
        key = (e, k, inter, kind)
        if key not in direct_cache:
            hit = K.moe_direct(table, kind, d, inter, e, k)
            if hit is not None:
                direct_cache[key] = (hit, None)
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
                        direct_cache[key] = (hit, og)
                        notes.append(f"{kind} experts ({e}x{d}x{int(inter)}) at {other}'s measured fused-MoE speed, "
                                     f"scaled by the two GPUs' measured GEMM times")
                        break
        return direct_cache[key]

    def moe_t(m: int, e: int, k: int, inter: float, kind: str, up: int = 2) -> float:
        dm = direct_for(e, k, inter, kind) if up == 2 else None
        if dm is not None:
            curve, other = dm
            t = curve(m)
            if other is not None:
                touched = e * (1.0 - (1.0 - k / e) ** m)
                me = m * k / touched
                t *= gemm.time(me, 2 * inter, d) / other.time(me, 2 * inter, d)
            return t
        touched = e * (1.0 - (1.0 - k / e) ** m)
        me = m * k / touched
        base_kind = kind if kind in ("fp8", "fp8_block") else "bfloat16"
        fac = K.moe_factor(table, base_kind)(m)
        # one fused kernel streams every touched expert: the experts stacked along n
        t = (gemm.time(me, touched * up * inter, d, base_kind) + gemm.time(me, touched * d, inter, base_kind)) * fac
        if kind in ("int4", "mxfp4", "nvfp4"):
            r = wo.get("mxfp4" if kind != "int4" else "int4") or wo.get("int4")
            t *= r(m) if r else 0.5
        return t

    group_list = [(cnt[0], sig) for sig, cnt in groups.items()]
    elem_bytes_per_token = 0.0
    for layer in layers:
        ff = getattr(layer.mlp, "intermediate_size", 0) or getattr(layer.mlp, "expert_intermediate_size", 0)
        # norms (read + write d twice), residual adds, activation over gate/up, RoPE on q/k: bf16
        elem_bytes_per_token += (layer.norms * 2 + 4) * d * 2.0 + 3.0 * ff / tp * 2.0

    def layers_per_token(m: int) -> float:
        mm = m if eager else _pad(m)
        tot = 0.0
        for count, (gemms, moe) in group_list:
            t = 0.0
            for (name, k_in, kind), n in gemms:
                t += gemm_t(mm, n, k_in, kind)
            if moe is not None:
                t += moe_t(mm, *moe)
            tot += count * t
        return tot

    def comm_per_token(m: int) -> float:
        if ar is None:
            return 0.0
        mm = m if eager else _pad(m)
        return 2.0 * n_layers * ar(mm * d * 2.0)

    def attn_per_token(m: int) -> float:
        return tok_head_s * m * heads_total + elem_bytes_per_token * m / (bw * 0.8)

    def gemm_and_comm(m: int) -> float:
        return layers_per_token(m) + comm_per_token(m)

    # Measured kernel times are not monotone in m (another kernel wins at 16 rows than at 8, the
    # padded size jumps at a capture boundary): a simulator whose step gets cheaper with more work
    # reorders the scheduler's choices for no physical reason. The GEMM + all-reduce part is
    # therefore the running maximum over the sizes that really run (the capture sizes with CUDA
    # graphs, every size eager; above them a 64-token grid, linear between), which also bounds the
    # lookups per configuration.
    envelope: dict = {}
    sizes_below = list(range(1, _CAPTURE[-1] + 1)) if eager else list(_CAPTURE)
    running = 0.0

    def envelope_at_or_below(limit: int) -> None:
        nonlocal running
        while sizes_below and sizes_below[0] <= limit:
            size = sizes_below.pop(0)
            running = max(running, gemm_and_comm(size))
            envelope[size] = running

    grid: dict = {}

    def grid_at(x: int) -> float:
        # x a multiple of 64 above the capture sizes: the running maximum along the grid
        value = grid.get(x)
        if value is None:
            below = _CAPTURE[-1]
            if x - 64 > below:
                below_value = grid_at(x - 64)
            else:
                envelope_at_or_below(below)
                below_value = envelope[below]
            value = grid[x] = max(below_value, gemm_and_comm(x))
        return value

    def tok_fn(m: int) -> float:
        if m <= _CAPTURE[-1]:
            size = m if eager else _pad(m)
            if size not in envelope:
                envelope_at_or_below(size)
            return envelope[size] + attn_per_token(m)
        lo = m - m % 64  # >= 512, the largest capture size, a multiple of 64
        lo_value, hi_value = grid_at(lo), grid_at(lo + 64)
        return lo_value + (hi_value - lo_value) * (m - lo) / 64.0 + attn_per_token(m)

    def lm_head(s: int) -> float:
        return gemm_t(s if eager else _pad(s), vocab_rank, d, "bfloat16") if s else 0.0

    def seq_fn(s: int) -> float:
        return lm_head(s) + ov.seq_s * s + attn_layers * dec["per_seq_s"] * s + state_bytes * s / (bw * 0.8)

    # evaluate once so the lookups that add notes (a transferred MoE curve) have run
    tok_fn(1)
    if any("fused-MoE speed" in n for n in notes):
        notes[:] = [n for n in notes if "Marlin int4 speed" not in n]
    fixed = (ov.step_s + n_layers * (ov.layer_s + (ov.eager_layer_s if eager else 0.0))
             + attn_layers * dec["c0_s"])
    if cross_node:
        notes.append(f"TP {tp} spans {-(-tp // max(1, request.gpus_per_node))} nodes/containers: all-reduce over "
                     f"the network ({ov.net_bandwidth_gbs:g} GB/s, {ov.net_allreduce_latency_s * 1e6:.0f} us each, "
                     "fitted), not vLLM's custom all-reduce")
    if pp > 1:
        # a step passes every stage in turn (no micro-batch overlap): the layers already sum all
        # stages; each stage boundary adds a send/recv of the activations
        fixed += (pp - 1) * 2e-5
        notes.append(f"pipeline parallel {pp}: stages run one after the other; one send/recv per boundary")
    if sliding_layers:
        notes.append(f"sliding-window layers read at most {window} tokens per sequence (mean context per step)")
    version = table.get("vllm_version", "?")
    tables_desc = f"{table_name} (AIConfigurator, vLLM {version} kernels)"
    if not exact:
        notes.append(f"{gpu.name} has no measured kernel tables: roofline at its own catalog peaks with the "
                     f"efficiencies measured on {table_name}")
    clock = {
        "model": MODEL_FORM,
        "kernel_tables": table_name, "kernel_tables_exact": exact, "kernels_vllm_version": version,
        "kernel_source": table["source"]["repo"] + "@" + table["source"]["commit"][:12],
        "attention_fit": att_key, "cuda_graphs": not eager, "async_scheduling": async_scheduling,
        "overheads": ov.to_dict(),
        "validation": validation or validation_error(gpu.name, table_name),
    }
    model = OperatorStepTime(
        per_kv_token_s=per_kv_token_s, per_attn_pair_s=per_attn_pair_s,
        prefill_fixed_s=attn_layers * pre["c0_s"], sliding_per_kv_token_s=sliding_per_kv_token_s,
        sliding_window=window, fixed_gpu_s=fixed, cpu_step_s=ov.cpu_step_s, cpu_seq_s=ov.cpu_seq_s,
        async_overlap=async_scheduling, request_overhead_s=ov.request_s,
        api_request_s=ov.api_request_s, api_prompt_token_s=ov.api_prompt_token_s,
        source=f"kernel model for {gpu.name} TP{tp}" + (f" PP{pp}" if pp > 1 else "") + f": {tables_desc}",
        device=gpu.name, clock=clock, notes=tuple(notes),
        components={"per_token": {"gemm": layers_per_token, "allreduce": comm_per_token,
                                  "attention_tokens": attn_per_token},
                    "per_seq": {"lm_head": lm_head}},
        _tok_fn=tok_fn, _seq_fn=seq_fn)
    return model


def validation_error(gpu_name: str, table_name: Optional[str] = None) -> dict:
    """The error measured by benchmarks/gpu_fidelity.py for this GPU's cases (docs/sim.md). A GPU
    that borrows another GPU's kernel tables (``table_name``) quotes only its own measured error:
    the lending GPU's error does not transfer (its peaks, memory system and software differ)."""
    from .validation import VALIDATION

    v = VALIDATION.get(gpu_name)
    if v is None:
        borrowed = (f"; it borrows the kernel efficiencies measured on {table_name}, whose error does not "
                    "transfer" if table_name and table_name != gpu_name else "")
        return {"measured": False, "note": f"no published end-to-end vLLM runs on {gpu_name} in the "
                                           f"development set: the error on this GPU is unknown{borrowed}"}
    return {"measured": True, **v}


def clock_for_gpu(gpu) -> dict:
    """The clock a GPU's default step-time model states, without building one (for tune)."""
    from . import kernels as K

    if not gpu.bandwidth_gbs or not gpu.bf16_tflops:
        return {"model": "none (no catalog peaks)", "kernel_tables": None, "validation": {"measured": False}}
    name, exact = K.nearest_measured(gpu)
    return {"model": MODEL_FORM, "kernel_tables": name, "kernel_tables_exact": exact,
            "kernels_vllm_version": K.load_table(name).get("vllm_version"),
            "validation": validation_error(gpu.name, name)}
