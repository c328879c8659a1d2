"""KV-cache specs per layer type, one small frozen class each, as in vLLM's
``vllm/v1/kv_cache_interface.py``: every spec knows its own page size (bytes of one block of one
layer on one rank), the most memory one request can need, and (as the spec's manager in
``vllm/v1/core/single_type_kv_cache_manager.py`` counts them, ``spec_manager_map``, 0.32) the
blocks a request holds at n tokens and the blocks admitting n tokens takes. The planner, the
simulator (:mod:`kvplan.sim.engine_kv`) and the traffic fit (:mod:`kvplan.workload.traffic`) all
ask the spec: adding a layer type is one spec class here, its builder below, and its tests.

kvplan turns each :mod:`kvplan.models` token mixer into one of these with :func:`kv_spec_for`
(a single-dispatch registry: new layer types register a builder instead of adding branches).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import singledispatch
from typing import Callable, Optional

from ..models.spec import (
    ChunkedLocalAttention,
    FullAttention,
    LinearAttentionState,
    Mamba2State,
    MLAttention,
    SlidingWindowAttention,
)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class SizingContext:
    """Scheduler numbers that decide how much KV one request may hold."""

    max_model_len: int
    max_num_batched_tokens: int
    in_flight_tokens: int  # tokens scheduled but not yet finished (async scheduling: 2 batches)


@dataclass(frozen=True)
class KVCacheSpec:
    block_size: int

    kind = "base"

    @property
    def page_size_bytes(self) -> int:
        raise NotImplementedError

    def max_memory_usage_bytes(self, ctx: SizingContext) -> int:
        raise NotImplementedError

    def blocks_per_request(self, ctx: SizingContext) -> int:
        return cdiv(self.max_memory_usage_bytes(ctx), self.page_size_bytes)

    def bytes_per_token(self) -> Optional[int]:
        """KV bytes one token costs in this layer on one rank (None for fixed-size states)."""
        return None

    #: a request holds at most a fixed number of blocks in this group, however long it grows
    bounded = False

    def blocks_held(self, num_tokens: int, num_processed_tokens: int) -> int:
        """Blocks a request holds with slots for ``num_tokens`` tokens once the blocks that
        ``num_processed_tokens`` computed tokens leave behind are freed (``allocate_slots``:
        ``remove_skipped_blocks`` then ``get_num_blocks_to_allocate``)."""
        raise NotImplementedError

    def blocks_to_admit(self, num_tokens: int, ctx: SizingContext) -> int:
        """Blocks a new request needs for a ``num_tokens``-token prompt to be admitted
        (``get_num_blocks_to_allocate(apply_admission_cap=True)``, nothing cached)."""
        raise NotImplementedError

    def admission_counter(self, ctx: SizingContext) -> Callable[[int], int]:
        """:meth:`blocks_to_admit` with the sizing bound, for a loop that asks once per request."""
        return lambda num_tokens: self.blocks_to_admit(num_tokens, ctx)


@dataclass(frozen=True)
class AttentionSpec(KVCacheSpec):
    num_kv_heads: int
    head_size: int
    head_size_v: int
    dtype_bytes: float
    page_size_padded: Optional[int] = None
    state_bytes_per_token: Optional[int] = None  # quantized layouts with per-token scales

    def bytes_per_token(self) -> int:
        if self.state_bytes_per_token is not None:
            return self.num_kv_heads * self.state_bytes_per_token
        return int(self.num_kv_heads * (self.head_size + self.head_size_v) * self.dtype_bytes)

    @property
    def page_size_bytes(self) -> int:
        if self.page_size_padded is not None:
            return self.page_size_padded
        return self.block_size * self.bytes_per_token()

    def skipped_tokens(self, num_processed_tokens: int) -> int:
        """``get_num_skipped_tokens``: leading tokens no later token attends to (0: none)."""
        return 0

    def max_admission_blocks_per_request(self, ctx: SizingContext) -> Optional[int]:
        """The per-request cap of blocks at admission for specs that recycle blocks (sliding
        window, chunked local); None: no cap (every block is held to the end)."""
        return None

    def blocks_held(self, num_tokens: int, num_processed_tokens: int) -> int:
        # SingleTypeKVCacheManager: the skipped blocks become the null block, never more than
        # the request has
        slots = cdiv(num_tokens, self.block_size)
        skipped = self.skipped_tokens(num_processed_tokens) // self.block_size
        return slots - min(skipped, slots)

    def blocks_to_admit(self, num_tokens: int, ctx: SizingContext) -> int:
        return self.admission_counter(ctx)(num_tokens)

    def admission_counter(self, ctx: SizingContext) -> Callable[[int], int]:
        # the blocks of the prompt, capped per request for the specs that recycle blocks
        bs = self.block_size
        cap = self.max_admission_blocks_per_request(ctx)
        if cap is None:
            return lambda num_tokens: -(-num_tokens // bs)
        return lambda num_tokens: min(-(-num_tokens // bs), cap)


@dataclass(frozen=True)
class FullAttentionSpec(AttentionSpec):
    kind = "full"

    def max_memory_usage_bytes(self, ctx: SizingContext) -> int:
        return cdiv(ctx.max_model_len, self.block_size) * self.page_size_bytes

    def blocks_held(self, num_tokens: int, num_processed_tokens: int) -> int:
        return -(-num_tokens // self.block_size)  # FullAttentionManager: nothing is ever skipped


@dataclass(frozen=True)
class MLAAttentionSpec(FullAttentionSpec):
    """One latent per token (head_size_v = 0), on every TP rank."""

    kind = "mla"


@dataclass(frozen=True)
class SlidingWindowSpec(AttentionSpec):
    sliding_window: int = 0

    kind = "sliding"
    bounded = True

    def skipped_tokens(self, num_processed_tokens: int) -> int:
        # SlidingWindowManager.get_num_skipped_tokens: the next token sees the last window − 1
        return max(0, num_processed_tokens - self.sliding_window + 1)

    def blocks_held(self, num_tokens: int, num_processed_tokens: int) -> int:
        # AttentionSpec.blocks_held with skipped_tokens inlined: the simulator's step loop calls
        # this for every running request of a hybrid model
        bs = self.block_size
        slots = -(-num_tokens // bs)
        skipped = num_processed_tokens - self.sliding_window + 1
        if skipped < bs:
            return slots
        skipped //= bs
        return slots - skipped if skipped < slots else 0

    def max_admission_blocks_per_request(self, ctx: SizingContext) -> int:
        # vLLM keeps window − 1 tokens plus everything in flight, and one extra block because the
        # window's start need not align with a block boundary.
        tokens = min(self.sliding_window - 1 + ctx.in_flight_tokens, ctx.max_model_len)
        return cdiv(tokens, self.block_size) + 1

    def max_memory_usage_bytes(self, ctx: SizingContext) -> int:
        return self.max_admission_blocks_per_request(ctx) * self.page_size_bytes


@dataclass(frozen=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    attention_chunk_size: int = 0

    kind = "chunked"
    bounded = True

    def skipped_tokens(self, num_processed_tokens: int) -> int:
        # ChunkedLocalAttentionManager.get_num_skipped_tokens: the chunks before the current one
        chunk = self.attention_chunk_size
        return (num_processed_tokens // chunk) * chunk if chunk else 0

    def max_admission_blocks_per_request(self, ctx: SizingContext) -> int:
        # one chunk plus everything in flight (frees happen on the processed-token basis)
        tokens = min(self.attention_chunk_size + ctx.in_flight_tokens, ctx.max_model_len)
        return cdiv(tokens, self.block_size)

    def max_memory_usage_bytes(self, ctx: SizingContext) -> int:
        return self.max_admission_blocks_per_request(ctx) * self.page_size_bytes


@dataclass(frozen=True)
class MambaSpec(KVCacheSpec):
    """A fixed-size recurrent state per request (conv + ssm tensors)."""

    state_bytes: int = 0
    page_size_padded: Optional[int] = None
    num_speculative_blocks: int = 0

    kind = "mamba"
    bounded = True

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded if self.page_size_padded is not None else self.state_bytes

    def max_memory_usage_bytes(self, ctx: SizingContext) -> int:
        return self.page_size_bytes * (1 + self.num_speculative_blocks)

    def blocks_held(self, num_tokens: int, num_processed_tokens: int) -> int:
        # MambaManager (mamba_cache_mode "none"): one state block (+ speculative ones) whatever
        # the length
        return 1 + self.num_speculative_blocks

    def blocks_to_admit(self, num_tokens: int, ctx: SizingContext) -> int:
        return 1 + self.num_speculative_blocks


def promote_to_full(spec: KVCacheSpec) -> KVCacheSpec:
    """What vLLM does to local-attention specs when the hybrid KV cache manager is off: they are
    allocated like full attention (``_promote_local_kv_cache_specs``)."""
    if isinstance(spec, (SlidingWindowSpec, ChunkedLocalAttentionSpec)):
        return FullAttentionSpec(spec.block_size, spec.num_kv_heads, spec.head_size, spec.head_size_v,
                                 spec.dtype_bytes, spec.page_size_padded, spec.state_bytes_per_token)
    return spec


@dataclass(frozen=True)
class KVDtype:
    """The resolved ``--kv-cache-dtype``: bytes per element, or a fixed per-token-head layout."""

    name: str
    element_bytes: float
    mla_bytes_per_token: Optional[int] = None  # fp8_ds_mla / nvfp4_ds_mla packed latents
    per_head_extra_bytes: int = 0  # per-token-head scales


@singledispatch
def kv_spec_for(mixer, tp: int, block_size: int, kv: KVDtype, state_dtype_bytes: int = 2) -> KVCacheSpec:
    raise TypeError(f"no KV-cache spec for layer type {type(mixer).__name__}")


def _kv_heads_per_rank(total: int, tp: int) -> int:
    # vllm ModelConfig.get_num_kv_heads: KV heads are replicated, never split below one per rank.
    return max(1, total // tp)


def _attention_fields(m: FullAttention, tp: int, kv: KVDtype) -> dict:
    fields = dict(num_kv_heads=_kv_heads_per_rank(m.num_kv_heads, tp), head_size=m.head_dim,
                  head_size_v=m.head_dim_v, dtype_bytes=kv.element_bytes)
    if kv.per_head_extra_bytes:
        per_head = int((m.head_dim + m.head_dim_v) * kv.element_bytes) + kv.per_head_extra_bytes
        fields["state_bytes_per_token"] = per_head
    return fields


@kv_spec_for.register
def _(m: FullAttention, tp: int, block_size: int, kv: KVDtype, state_dtype_bytes: int = 2) -> KVCacheSpec:
    return FullAttentionSpec(block_size, **_attention_fields(m, tp, kv))


@kv_spec_for.register
def _(m: SlidingWindowAttention, tp: int, block_size: int, kv: KVDtype, state_dtype_bytes: int = 2) -> KVCacheSpec:
    return SlidingWindowSpec(block_size, **_attention_fields(m, tp, kv), sliding_window=m.window)


@kv_spec_for.register
def _(m: ChunkedLocalAttention, tp: int, block_size: int, kv: KVDtype, state_dtype_bytes: int = 2) -> KVCacheSpec:
    return ChunkedLocalAttentionSpec(block_size, **_attention_fields(m, tp, kv), attention_chunk_size=m.chunk)


@kv_spec_for.register
def _(m: MLAttention, tp: int, block_size: int, kv: KVDtype, state_dtype_bytes: int = 2) -> KVCacheSpec:
    # MLA: num_kv_heads = 1 on every rank, head_size = kv_lora_rank + qk_rope_head_dim, no V.
    per_token = kv.mla_bytes_per_token
    if getattr(m, "indexer_bytes_per_token", 0):
        # V3.2: the indexer's K cache shares the layer's blocks (UniformTypeKVCacheSpecs, 0.11+:
        # one block table, page = the sum of the layers' pages), so it adds to the token's bytes
        per_token = (per_token if per_token is not None else int(m.latent_dim * kv.element_bytes)) \
            + m.indexer_bytes_per_token
    return MLAAttentionSpec(block_size, num_kv_heads=1, head_size=m.latent_dim, head_size_v=0,
                            dtype_bytes=kv.element_bytes, state_bytes_per_token=per_token)


@kv_spec_for.register
def _(m: LinearAttentionState, tp: int, block_size: int, kv: KVDtype, state_dtype_bytes: int = 2) -> KVCacheSpec:
    # vllm mamba_utils.MambaStateShapeCalculator.gated_delta_net_state_shape (num_spec = 0):
    # conv: ((2·head_k_dim·num_k_heads + head_v_dim·num_v_heads)/tp, kernel − 1)
    # ssm:  (num_v_heads/tp, head_v_dim, head_k_dim)
    conv = (2 * m.head_k_dim * m.num_k_heads + m.head_v_dim * m.num_v_heads) // tp * (m.conv_kernel - 1)
    ssm = (m.num_v_heads // tp) * m.head_v_dim * m.head_k_dim
    return MambaSpec(block_size, state_bytes=(conv + ssm) * state_dtype_bytes)


@kv_spec_for.register
def _(m: Mamba2State, tp: int, block_size: int, kv: KVDtype, state_dtype_bytes: int = 2) -> KVCacheSpec:
    # vllm mamba_utils.MambaStateShapeCalculator.mamba2_state_shape (0.10 ... 0.33)
    groups = m.n_groups if m.n_groups % tp == 0 else m.n_groups + (tp - m.n_groups)  # extra_groups_for_head_shards
    conv = (m.conv_kernel - 1) * ((m.intermediate + 2 * groups * m.state_size) // tp)
    ssm = (m.num_v_heads // tp) * m.head_v_dim * m.state_size
    return MambaSpec(block_size, state_bytes=conv * state_dtype_bytes + ssm * (m.ssm_state_bytes or state_dtype_bytes))


def with_block_size(spec: KVCacheSpec, block_size: int) -> KVCacheSpec:
    return replace(spec, block_size=block_size)
