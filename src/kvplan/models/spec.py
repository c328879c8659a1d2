"""Frozen descriptions of a model's architecture: what the memory accounting needs, nothing more.

A :class:`ModelSpec` lists every decoder layer with its *token mixer* (the part that keeps state
per request: an attention variant or a recurrent state) and its MLP (dense or mixture of experts).
The memory package turns each mixer into a KV-cache spec the way vLLM's
``vllm/v1/kv_cache_interface.py`` does, so the layer kinds here mirror vLLM's spec classes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union


# ---------------------------------------------------------------------------------------------
# Token mixers: one per layer. Each is pure data; kvplan.memory maps it to a KV-cache spec.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FullAttention:
    """Causal attention over the whole context (vLLM ``FullAttentionSpec``)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    head_dim_v: int
    qkv_bias: bool = False
    qk_norm: bool = False

    kind = "full"


@dataclass(frozen=True)
class SlidingWindowAttention(FullAttention):
    """Attention over the last ``window`` tokens (vLLM ``SlidingWindowSpec``)."""

    window: int = 0

    kind = "sliding"


@dataclass(frozen=True)
class ChunkedLocalAttention(FullAttention):
    """Attention within fixed chunks of ``chunk`` tokens, as Llama-4's local layers
    (vLLM ``ChunkedLocalAttentionSpec``)."""

    chunk: int = 0

    kind = "chunked"


@dataclass(frozen=True)
class MLAttention:
    """Multi-head latent attention (DeepSeek-V2/V3): one compressed latent per token, shared by
    all heads, so vLLM stores ``kv_lora_rank + qk_rope_head_dim`` values and never splits them
    across tensor-parallel ranks (vLLM ``MLAAttentionSpec``)."""

    num_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: Optional[int]
    # DeepSeek-V3.2's sparse-attention indexer keeps its own K cache per layer: vLLM 0.11+
    # (deepseek_v2.py Indexer) stores index_head_dim fp8 values + one fp32 scale per 128 as uint8
    # (128 + 4 = 132 bytes per token), a second MLA-type spec in the same KV group.
    indexer_bytes_per_token: int = 0
    index_head_dim: int = 0
    index_n_heads: int = 0

    kind = "mla"

    @property
    def latent_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class LinearAttentionState:
    """A recurrent state of fixed size per request (Mamba, gated delta net, linear attention).

    ``state_shapes`` are the per-rank-independent logical shapes of vLLM's state tensors as
    functions of tensor parallelism; kvplan.memory evaluates them. ``variant`` names the
    layer family (``gated_delta_net``, ``mamba2``, ...).
    """

    variant: str
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int
    num_heads: int = 0

    kind = "linear"


@dataclass(frozen=True)
class Mamba2State(LinearAttentionState):
    """A Mamba-2 mixer (Nemotron-H, Granite-4.0-H, Bamba): vLLM's
    ``MambaStateShapeCalculator.mamba2_state_shape`` - a conv state ``(conv_kernel - 1,
    (intermediate + 2·n_groups·state_size) / tp)`` and a temporal state ``(mamba_heads / tp,
    head_dim, state_size)``, the groups extended to the TP size when they do not divide it.
    ``ssm_state_bytes`` is the temporal state's element size (``mamba_ssm_cache_dtype``; the
    conv state takes the model dtype)."""

    state_size: int = 128
    n_groups: int = 1
    ssm_state_bytes: int = 0  # 0: the model dtype
    conv_bias: bool = True

    @property
    def intermediate(self) -> int:
        return self.num_v_heads * self.head_v_dim


TokenMixer = Union[FullAttention, SlidingWindowAttention, ChunkedLocalAttention, MLAttention,
                   LinearAttentionState]


# ---------------------------------------------------------------------------------------------
# MLP blocks (for weights and activation memory; they hold no per-request state).
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DenseMLP:
    intermediate_size: int
    gated: bool = True  # SwiGLU-style gate/up/down (3 matrices) vs up/down (2)
    bias: bool = False


@dataclass(frozen=True)
class MoEMLP:
    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    shared_experts: int = 0
    shared_intermediate_size: int = 0  # total width of the shared expert(s)
    shared_expert_gate: bool = False  # Qwen-MoE style sigmoid gate on the shared expert
    expert_bias: bool = False  # gpt-oss: biases on expert projections
    router_bias: bool = False
    gated: bool = True  # SwiGLU experts (3 matrices); Nemotron-H's relu² experts are up/down only


Mlp = Union[DenseMLP, MoEMLP]


@dataclass(frozen=True)
class Layer:
    index: int
    mixer: TokenMixer
    mlp: Mlp
    norms: int = 2  # hidden-size norm vectors per layer (Gemma-2/3 have 4)


@dataclass(frozen=True)
class Quantization:
    """The checkpoint's ``quantization_config`` (or ``--quantization``) reduced to what sizes
    weights: bytes per parameter of quantized linear layers and the scale overhead."""

    method: str  # fp8, awq, gptq, mxfp4, bitsandbytes, compressed-tensors, ...
    bits: int
    group_size: Optional[int] = None
    weight_block: Optional[tuple[int, int]] = None  # fp8 block-wise scales (DeepSeek 128x128)
    kv_cache_dtype: Optional[str] = None  # a KV scheme the checkpoint declares ("fp8")
    modules_not_quantized: tuple[str, ...] = ()
    experts_only: bool = False  # MXFP4 in gpt-oss quantizes only the MoE experts


@dataclass(frozen=True)
class ModelSpec:
    """Everything kvplan knows about one model, from its config.json."""

    name: str
    source: str  # the config.json path or catalog entry it came from
    architectures: tuple[str, ...]
    model_type: str
    hidden_size: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    layers: tuple[Layer, ...]
    torch_dtype: str
    tie_word_embeddings: bool
    max_len_keys: Mapping[str, int]  # the config keys vLLM derives max_model_len from
    rope_scaling: Optional[Mapping[str, Any]] = None
    sliding_window: Optional[int] = None
    quantization: Optional[Quantization] = None
    num_mtp_layers: int = 0  # DeepSeek's next-token-prediction layers (loaded only for MTP)
    has_vision: bool = False
    published_params: Optional[int] = None
    aliases: tuple[str, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def is_mla(self) -> bool:
        return any(isinstance(layer.mixer, MLAttention) for layer in self.layers)

    @property
    def is_moe(self) -> bool:
        return any(isinstance(layer.mlp, MoEMLP) for layer in self.layers)

    def raw_flag(self, key: str) -> Any:
        """A config.json field, looked up in ``text_config`` first (multimodal models)."""
        text = self.raw.get("text_config") if isinstance(self.raw, Mapping) else None
        if isinstance(text, Mapping) and key in text:
            return text[key]
        return self.raw.get(key) if isinstance(self.raw, Mapping) else None

    def mixer_kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for layer in self.layers:
            counts[layer.mixer.kind] = counts.get(layer.mixer.kind, 0) + 1
        return counts

    def describe(self) -> str:
        kinds = ", ".join(f"{n} {k}" for k, n in self.mixer_kinds().items())
        moe = ""
        if self.is_moe:
            m = next(l.mlp for l in self.layers if isinstance(l.mlp, MoEMLP))
            moe = f", MoE {m.num_experts} experts top-{m.experts_per_token}"
        attn = "MLA" if self.is_mla else f"{self.num_attention_heads} heads / {self.num_kv_heads} KV heads × {self.head_dim}"
        return f"{self.num_layers} layers ({kinds}), {attn}, hidden {self.hidden_size}{moe}"
