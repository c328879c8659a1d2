"""Parameter counts and weight bytes per GPU, from the architecture alone.

vLLM measures weights while loading ("Model loading took X GiB"); it never computes them. kvplan
must predict them before any GPU exists, so this module enumerates every tensor vLLM creates and
shards it the way vLLM's parallel layers do (``vllm/model_executor/layers/linear.py``,
``vocab_parallel_embedding.py``, ``fused_moe``):

* column-parallel (q/k/v, gate/up, expert w13): output split over TP; row-parallel (o, down,
  expert w2): input split over TP;
* K/V projections keep ``max(1, kv_heads // tp)`` heads per rank: replicated when kv_heads < tp;
* embeddings and lm_head are padded to a multiple of 64 rows, then split over TP;
* norms, routers, row-parallel biases and MLA's down-projections are replicated;
* pipeline parallelism gives each stage its layers (``get_pp_indices``), the embedding to the first
  stage and lm_head to the last.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Optional

from .spec import (
    DenseMLP,
    FullAttention,
    Layer,
    LinearAttentionState,
    Mamba2State,
    MLAttention,
    ModelSpec,
    MoEMLP,
    Quantization,
)
from .vision import VisionReading, read_vision_tower

VOCAB_PADDING = 64  # vllm DEFAULT_VOCAB_PADDING_SIZE


def vision_tower(spec: ModelSpec) -> VisionReading:
    """The model's vision tower, read from its nested config (kvplan.models.vision)."""
    return read_vision_tower(spec.raw if isinstance(spec.raw, Mapping) else {}, spec.hidden_size)

@dataclass(frozen=True)
class Tensor:
    """One weight tensor: its logical size and how vLLM shards it."""

    name: str
    numel: int
    shard: str  # "col" / "row": split over TP; "rep": replicated; "vocab": padded then split
    quantizable: bool = False  # a linear layer's weight that a quantization method compresses
    expert: bool = False
    group_dim: int = 0  # the input dim, for group-wise scales
    kv: bool = False  # K/V projection: replicated beyond kv_heads ranks
    kv_heads: int = 0

    def numel_per_rank(self, tp: int) -> float:
        if self.shard == "rep":
            return self.numel
        if self.shard == "vocab":
            rows = self.numel // self.group_dim if self.group_dim else self.numel
            padded = -(-rows // VOCAB_PADDING) * VOCAB_PADDING
            return -(-padded // tp) * (self.numel // rows)
        if self.kv and self.kv_heads:
            per_head = self.numel // self.kv_heads
            return max(1, self.kv_heads // tp) * per_head
        return self.numel / tp


def _attention_tensors(spec: ModelSpec, layer: Layer) -> Iterator[Tensor]:
    h = spec.hidden_size
    m = layer.mixer
    if isinstance(m, MLAttention):
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            yield Tensor("q_a_proj", h * m.q_lora_rank, "rep", True, group_dim=h)
            yield Tensor("q_a_layernorm", m.q_lora_rank, "rep")
            yield Tensor("q_b_proj", m.q_lora_rank * m.num_heads * qk, "col", True, group_dim=m.q_lora_rank)
        else:
            yield Tensor("q_proj", h * m.num_heads * qk, "col", True, group_dim=h)
        yield Tensor("kv_a_proj_with_mqa", h * m.latent_dim, "rep", True, group_dim=h)
        yield Tensor("kv_a_layernorm", m.kv_lora_rank, "rep")
        yield Tensor("kv_b_proj", m.kv_lora_rank * m.num_heads * (m.qk_nope_head_dim + m.v_head_dim),
                     "col", True, group_dim=m.kv_lora_rank)
        yield Tensor("o_proj", m.num_heads * m.v_head_dim * h, "row", True, group_dim=m.num_heads * m.v_head_dim)
        if m.index_head_dim:  # V3.2's indexer: wq_b, wk, k_norm, weights_proj (replicated)
            yield Tensor("indexer_wq_b", (m.q_lora_rank or h) * m.index_n_heads * m.index_head_dim, "rep", True,
                         group_dim=m.q_lora_rank or h)
            yield Tensor("indexer_wk", h * m.index_head_dim, "rep", True, group_dim=h)
            yield Tensor("indexer_k_norm", 2 * m.index_head_dim, "rep")
            yield Tensor("indexer_weights_proj", h * m.index_n_heads, "rep")
        return
    if isinstance(m, Mamba2State):
        # vllm mamba_mixer2.MambaMixer2: in_proj (z, x, B, C, dt), conv1d over (x, B, C), A/D/dt_bias,
        # a gated RMSNorm over the intermediate width, out_proj
        inter, gs = m.intermediate, 2 * m.n_groups * m.state_size
        yield Tensor("in_proj", h * (2 * inter + gs + m.num_v_heads), "col", True, group_dim=h)
        yield Tensor("conv1d", (inter + gs) * m.conv_kernel + ((inter + gs) if m.conv_bias else 0), "col")
        yield Tensor("A+D+dt_bias", 3 * m.num_v_heads, "col")
        yield Tensor("norm", inter, "col")
        yield Tensor("out_proj", inter * h, "row", True, group_dim=inter)
        return
    if isinstance(m, LinearAttentionState):
        kd, vd = m.num_k_heads * m.head_k_dim, m.num_v_heads * m.head_v_dim
        yield Tensor("in_proj_qkvz", h * (2 * kd + 2 * vd), "col", True, group_dim=h)
        yield Tensor("in_proj_ba", h * 2 * m.num_v_heads, "col", True, group_dim=h)
        yield Tensor("conv1d", (2 * kd + vd) * m.conv_kernel, "col")
        yield Tensor("A_log+dt_bias", 2 * m.num_v_heads, "col")
        yield Tensor("norm", m.head_v_dim, "rep")
        yield Tensor("out_proj", vd * h, "row", True, group_dim=vd)
        return
    assert isinstance(m, FullAttention)
    gate = 2 if spec.raw_flag("attn_output_gate") else 1
    q_out = m.num_heads * m.head_dim
    yield Tensor("q_proj", h * q_out * gate, "col", True, group_dim=h)
    yield Tensor("k_proj", h * m.num_kv_heads * m.head_dim, "col", True, group_dim=h, kv=True,
                 kv_heads=m.num_kv_heads)
    yield Tensor("v_proj", h * m.num_kv_heads * m.head_dim_v, "col", True, group_dim=h, kv=True,
                 kv_heads=m.num_kv_heads)
    yield Tensor("o_proj", m.num_heads * m.head_dim_v * h, "row", True, group_dim=m.num_heads * m.head_dim_v)
    if m.qkv_bias:
        yield Tensor("q_bias", q_out * gate, "col")
        yield Tensor("kv_bias", 2 * m.num_kv_heads * m.head_dim, "col", kv=True, kv_heads=m.num_kv_heads)
    if spec.model_type == "gpt_oss":
        yield Tensor("o_bias", h, "rep")
        yield Tensor("sinks", m.num_heads, "col")
    if m.qk_norm:
        yield Tensor("qk_norm", 2 * m.head_dim, "rep")


def _mlp_tensors(spec: ModelSpec, layer: Layer) -> Iterator[Tensor]:
    h = spec.hidden_size
    mlp = layer.mlp
    if isinstance(mlp, DenseMLP):
        if mlp.intermediate_size == 0:  # a block with no MLP (a lone Mamba mixer of Nemotron-H)
            return
        mats = 3 if mlp.gated else 2
        up = mats - 1
        yield Tensor("gate_up_proj", h * mlp.intermediate_size * up, "col", True, group_dim=h)
        yield Tensor("down_proj", mlp.intermediate_size * h, "row", True, group_dim=mlp.intermediate_size)
        if mlp.bias:
            yield Tensor("up_bias", mlp.intermediate_size * up, "col")
            yield Tensor("down_bias", h, "rep")
        return
    assert isinstance(mlp, MoEMLP)
    e, inter = mlp.num_experts, mlp.expert_intermediate_size
    yield Tensor("router", h * e, "rep")
    if mlp.router_bias:
        yield Tensor("router_bias", e, "rep")
    up = 2 if getattr(mlp, "gated", True) else 1
    yield Tensor("experts_w13", e * h * up * inter, "col", True, expert=True, group_dim=h)
    yield Tensor("experts_w2", e * inter * h, "row", True, expert=True, group_dim=inter)
    if mlp.expert_bias:
        yield Tensor("experts_b13", e * 2 * inter, "col", expert=True)
        yield Tensor("experts_b2", e * h, "rep", expert=True)
    if mlp.shared_experts and mlp.shared_intermediate_size:
        s = mlp.shared_intermediate_size
        yield Tensor("shared_gate_up", h * up * s, "col", True, group_dim=h)
        yield Tensor("shared_down", s * h, "row", True, group_dim=s)
        if mlp.shared_expert_gate:
            yield Tensor("shared_expert_gate", h, "rep")


def _memo(spec: ModelSpec) -> dict:
    """Figures derived from ``spec`` alone, kept on it: a frozen spec's fields never change, and one
    ``tune`` sweep plans the same model hundreds of times (the tensors of every layer, each time).
    ``dataclasses.replace`` makes a new spec, with an empty memo."""
    memo = spec.__dict__.get("_params_memo")
    if memo is None:
        memo = {}
        object.__setattr__(spec, "_params_memo", memo)  # not a field: equality, repr and asdict ignore it
    return memo


def layer_tensors(spec: ModelSpec, layer: Layer) -> list[Tensor]:
    memo = _memo(spec)
    key = ("layer_tensors", layer)
    cached = memo.get(key)
    if cached is None:
        out = list(_attention_tensors(spec, layer)) + list(_mlp_tensors(spec, layer))
        out.append(Tensor("layer_norms", layer.norms * spec.hidden_size, "rep"))
        cached = memo[key] = tuple(out)
    return list(cached)  # the caller's own list (the Tensors are frozen)


def embedding_tensors(spec: ModelSpec) -> list[Tensor]:
    v, h = spec.vocab_size, spec.hidden_size
    return [Tensor("embed_tokens", v * h, "vocab", group_dim=h)]


def head_tensors(spec: ModelSpec) -> list[Tensor]:
    v, h = spec.vocab_size, spec.hidden_size
    out = [Tensor("final_norm", h, "rep")]
    out.append(Tensor("lm_head", v * h, "vocab", group_dim=h))
    return out


def vision_params(spec: ModelSpec, tp: int = 1) -> int:
    """The vision tower's parameters on one of ``tp`` ranks (0 for a text-only model, or a tower kvplan
    does not read): its blocks' linears split over TP, norms, embeddings and unsharded projectors whole
    (:mod:`kvplan.models.vision`, one reader per family)."""
    tower = vision_tower(spec).tower
    return tower.params(tp) if tower is not None else 0


def count_params(spec: ModelSpec, include_vision: bool = True) -> int:
    """Logical parameter count (unsharded, unpadded), as a model card reports it."""
    memo = _memo(spec)
    key = ("count_params", include_vision)
    if key not in memo:
        memo[key] = _count_params(spec, include_vision)
    return memo[key]


def _count_params(spec: ModelSpec, include_vision: bool) -> int:
    total = sum(t.numel for t in embedding_tensors(spec))
    total += sum(t.numel for t in head_tensors(spec))
    if spec.tie_word_embeddings:
        total -= spec.vocab_size * spec.hidden_size
    for layer in spec.layers:
        total += sum(t.numel for t in layer_tensors(spec, layer))
    if include_vision:
        total += vision_params(spec)
    return int(total)


def active_params(spec: ModelSpec) -> int:
    """Parameters touched per token (MoE: only the routed top-k experts plus shared ones)."""
    total = count_params(spec, include_vision=False)
    for layer in spec.layers:
        if isinstance(layer.mlp, MoEMLP):
            m = layer.mlp
            per_expert = (3 if m.gated else 2) * spec.hidden_size * m.expert_intermediate_size
            total -= (m.num_experts - m.experts_per_token) * per_expert
    return total


def bytes_per_param(t: Tensor, quant: Optional[Quantization], dtype_bytes: int) -> float:
    """Storage bytes per parameter, scales included (spec §6 of our vLLM memory notes)."""
    if quant is None or not t.quantizable:
        return dtype_bytes
    if quant.experts_only and not t.expert:
        return dtype_bytes
    if any(skip and skip in t.name for skip in quant.modules_not_quantized):
        return dtype_bytes
    method = quant.method
    if method == "fp8" or (method.startswith("int") and quant.bits == 8 and not quant.group_size):
        if quant.weight_block:
            bn, bk = quant.weight_block
            return 1 + 4 / (bn * bk)  # float32 scale per block
        return 1.0
    if method == "mxfp4":
        return 0.5 + 1 / 32  # e8m0 scale every 32 values
    if method in ("nvfp4", "modelopt_fp4"):
        return 0.5 + 1 / 16
    if method == "bitsandbytes":
        return 0.5 + 4 / 64 / 32 + 1 / 64 if quant.bits == 4 else 1.0
    g = quant.group_size if quant.group_size and quant.group_size > 0 else max(t.group_dim, 1)
    if quant.bits == 4:
        return 0.5 + 2.5 / g  # int4 packed + fp16 scales + int4 zeros per group
    return quant.bits / 8 + (2 + quant.bits / 8) / g


def storage_bytes_per_param(t: Tensor, quant: Optional[Quantization], dtype_bytes: int) -> float:
    """Bytes per parameter of the tensor's own values, without the scales and zero points that
    :func:`bytes_per_param` adds: vLLM allocates those as separate tensors (``weight_scale``,
    ``qzeros``...), which matters where allocations are rounded (kvplan.memory.allocator)."""
    full = bytes_per_param(t, quant, dtype_bytes)
    if quant is None or full == dtype_bytes:
        return full
    if quant.method in ("mxfp4", "nvfp4", "modelopt_fp4") or (quant.method == "bitsandbytes" and quant.bits == 4):
        return 0.5
    if quant.method == "fp8":
        return 1.0
    return min(full, quant.bits / 8)


def _round_up(x: float, m: int) -> int:
    return int(-(-int(x) // m) * m)


def mxfp4_padding(sm: Optional[int], version: tuple[int, ...]) -> tuple[int, int]:
    """(intermediate multiple, hidden multiple) to which vLLM pads MXFP4 expert weights per GPU
    (``vllm/model_executor/layers/quantization/mxfp4.py``: ``_should_use_marlin`` in 0.10.1,
    ``get_mxfp4_backend`` in 0.11, then ``Mxfp4MoEMethod.create_weights``):

    * FlashInfer on Blackwell (sm 100, FlashInfer ships with the wheel): 256 and 256;
    * Marlin everywhere else on CUDA: intermediate to 128, hidden to 256 (the Marlin MoE kernel
      needs n % 256 == 0 and k % 128 == 0). Hopper takes the triton_kernels path (intermediate
      to 64, no hidden padding) only when the optional ``triton_kernels`` package is installed
      and torch >= 2.8 (vLLM >= 0.10.2); it is not a dependency of the wheel
      (``has_triton_kernels`` only probes for the module), so Marlin's larger layout is the
      default here: the conservative side for a start/fail verdict.
    A GPU of unknown architecture also gets the Marlin layout (the portable fallback)."""
    if sm is not None and sm // 10 == 10:
        return 256, 256
    return 128, 256


def _mxfp4_expert_bytes(spec: ModelSpec, mlp: MoEMLP, tp: int, padding: tuple[int, int]) -> float:
    """MXFP4 expert tensors as created on one rank: uint8 weights (two values per byte), one
    uint8 e8m0 scale per 32 values, bf16 biases, at the padded sizes."""
    inter = _round_up(mlp.expert_intermediate_size / tp, padding[0])
    hidden = _round_up(spec.hidden_size, padding[1])
    e = mlp.num_experts
    values = e * (2 * inter * hidden + hidden * inter)
    nbytes = values / 2 + values / 32
    if mlp.expert_bias:
        nbytes += e * (2 * inter + hidden) * 2
    return nbytes


def pp_layer_ranges(num_layers: int, pp: int) -> list[range]:
    """vllm/distributed/utils.py get_pp_indices: remainder layers go to the stages counting back
    from the second-to-last (the last stage also holds lm_head)."""
    base, rem = divmod(num_layers, pp)
    sizes = [base] * pp
    for i in range(rem):
        sizes[pp - 2 - i if pp > 1 else 0] += 1
    out, start = [], 0
    for size in sizes:
        out.append(range(start, start + size))
        start += size
    return out


@dataclass(frozen=True)
class StageWeights:
    stage: int
    layers: range
    bytes_per_rank: int
    params_per_rank: int
    #: the tensors as vLLM allocates them on one rank, in creation order (bytes): a vision tower's block
    #: linears first, then the language model's (fused q/k/v, quantized weights without their scales);
    #: padded MXFP4 experts, counted as totals, are not listed (kvplan.memory.allocator rounds these)
    tensor_bytes: tuple[int, ...] = ()


def weights_per_rank(spec: ModelSpec, tp: int = 1, pp: int = 1, dtype_bytes: int = 2,
                     quant: Optional[Quantization] = None,
                     moe_padding: Optional[tuple[int, int]] = None) -> list[StageWeights]:
    """Weight bytes held by one GPU of each pipeline stage (all TP ranks of a stage are equal).
    ``moe_padding`` (from :func:`mxfp4_padding`) lays MXFP4 experts out as the GPU's kernel does."""
    key = ("weights_per_rank", tp, pp, dtype_bytes, quant, moe_padding)
    try:
        memo = _memo(spec)
        cached = memo.get(key)
    except TypeError:  # an unhashable quantization: computed each time
        return _weights_per_rank(spec, tp, pp, dtype_bytes, quant, moe_padding)
    if cached is None:
        cached = memo[key] = tuple(_weights_per_rank(spec, tp, pp, dtype_bytes, quant, moe_padding))
    return list(cached)


def _weights_per_rank(spec: ModelSpec, tp: int, pp: int, dtype_bytes: int, quant: Optional[Quantization],
                      moe_padding: Optional[tuple[int, int]]) -> list[StageWeights]:
    ranges = pp_layer_ranges(spec.num_layers, pp)
    vision = vision_params(spec, tp) * dtype_bytes  # on stage 0's ranks (sharded for Qwen-VL towers)
    stages = []
    for s, layer_range in enumerate(ranges):
        tensors: list[Tensor] = []
        if s == 0:
            tensors += embedding_tensors(spec)
        padded = 0.0
        for i in layer_range:
            layer = spec.layers[i]
            tensors_i = layer_tensors(spec, layer)
            if moe_padding and quant is not None and quant.method == "mxfp4" and isinstance(layer.mlp, MoEMLP):
                padded += _mxfp4_expert_bytes(spec, layer.mlp, tp, moe_padding)
                tensors_i = [t for t in tensors_i if not (t.expert and t.name != "router")]
            tensors += tensors_i
        if s == pp - 1:
            head = head_tensors(spec)
            if spec.tie_word_embeddings and pp == 1:
                head = [t for t in head if t.name != "lm_head"]
            tensors += head
        numel = 0.0
        nbytes = 0.0
        for t in tensors:
            n = t.numel_per_rank(tp)
            numel += n
            nbytes += n * bytes_per_param(t, quant, dtype_bytes)
        extra = (vision if s == 0 else 0) + padded
        # the tower is built before the language model (every family read in kvplan.models.vision)
        tower = vision_tower(spec).tower if s == 0 else None
        first = tower.block_allocations(tp, dtype_bytes) if tower is not None else ()
        stages.append(StageWeights(s, layer_range, int(nbytes + extra), int(numel),
                                   first + _allocations(tensors, tp, dtype_bytes, quant)))
    return stages


_FUSED_QKV = ("q_proj", "k_proj", "v_proj")  # QKVParallelLinear: one weight for the three


def _allocations(tensors: list[Tensor], tp: int, dtype_bytes: int, quant: Optional[Quantization]) -> tuple[int, ...]:
    """The tensors' values as vLLM allocates them on one rank, in creation order: q, k and v of a
    layer fused into one weight (``QKVParallelLinear``). The scales and zero points of quantized
    weights are left out: separate small tensors that the allocator packs into shared segments (and
    Marlin repacks or drops after loading)."""
    out: list[int] = []
    qkv = 0.0
    for t in tensors:
        values = t.numel_per_rank(tp) * storage_bytes_per_param(t, quant, dtype_bytes)
        if t.name in _FUSED_QKV:
            qkv += values
            if t.name == "v_proj":
                out.append(int(qkv))
                qkv = 0.0
            continue
        if qkv:  # a q_proj with no k/v after it (MLA without a q LoRA) stands alone
            out.append(int(qkv))
            qkv = 0.0
        out.append(int(values))
    if qkv:
        out.append(int(qkv))
    return tuple(out)
