"""The cost terms of the GPU step model (:mod:`kvplan.sim.stepmodel`): one small frozen object per
piece of what vLLM runs in a step. Each holds the constants it was built with (by
:func:`kvplan.sim.opmodel.build`, from the kernel tables and the engine configuration) and
computes its own seconds; the parts it overrides are declared with the ``HAS_*`` flags."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .stepmodel import CostTerm

GemmTime = Callable[[float, float, float, str], float]


@dataclass(frozen=True, kw_only=True)
class DenseLinears(CostTerm):
    """The layers' linear GEMMs (fused QKV, O, gate/up, down, the MoE router) at the padded batch:
    per group of identical layers, ``count`` × the sum of its GEMMs (n, k, weight kind)."""

    groups: tuple  # ((count, ((n, k, kind), ...)), ...)
    gemm_time: GemmTime = field(compare=False, repr=False)
    HAS_PADDED = True

    def padded(self, m: int) -> float:
        gemm_time = self.gemm_time
        total = 0.0
        for count, shapes in self.groups:
            t = 0.0
            for n, k, kind in shapes:
                t += gemm_time(m, n, k, kind)
            total += count * t
        return total

    def describe(self) -> dict:
        return super().describe() | {"gemms": [{"layers": c, "shapes": [list(s) for s in shapes]}
                                               for c, shapes in self.groups]}


@dataclass(frozen=True, kw_only=True)
class MoEExperts(CostTerm):
    """The fused-MoE expert GEMMs at the padded batch, per group of identical MoE layers:
    (experts, top-k, per-rank intermediate size, weight kind, gate/up width factor)."""

    groups: tuple  # ((count, (experts, topk, inter, kind, up)), ...)
    moe_time: Callable = field(compare=False, repr=False)
    HAS_PADDED = True

    def padded(self, m: int) -> float:
        total = 0.0
        for count, shape in self.groups:
            total += count * self.moe_time(m, *shape)
        return total

    def describe(self) -> dict:
        return super().describe() | {"experts": [{"layers": c, "experts": s[0], "topk": s[1], "inter_per_rank": s[2],
                                                  "kind": s[3]} for c, s in self.groups]}


@dataclass(frozen=True, kw_only=True)
class AllReduce(CostTerm):
    """Two tensor-parallel all-reduces per layer of the activations (tokens × hidden × 2 bytes):
    vLLM's custom all-reduce on one node, NCCL over the network across nodes."""

    layers: int
    hidden: int
    latency: Callable[[float], float] = field(compare=False, repr=False)
    over_network: bool = False
    HAS_PADDED = True

    def padded(self, m: int) -> float:
        return 2.0 * self.layers * self.latency(m * self.hidden * 2.0)

    def describe(self) -> dict:
        return super().describe() | {"layers": self.layers, "over_network": self.over_network}


@dataclass(frozen=True, kw_only=True)
class Attention(CostTerm):
    """The attention kernels (FlashAttention fits per KV dtype and head size): a launch per layer
    (``fixed_s``), per decoding sequence, per token-head, the KV bytes each layer reads
    (``kv_token_s``; sliding-window layers at most the window), and prefill FLOPs per pair."""

    token_head_s: float
    heads: float
    seq_s: float
    HAS_PER_TOKEN = True
    HAS_PER_SEQ = True

    def per_token(self, m: int) -> float:
        return self.token_head_s * m * self.heads

    def per_seq(self, s: int) -> float:
        return self.seq_s * s

    def describe(self) -> dict:
        return super().describe() | {"token_head_s": self.token_head_s, "heads": self.heads, "seq_s": self.seq_s}


@dataclass(frozen=True, kw_only=True)
class Elementwise(CostTerm):
    """Norms, residual adds, the activation, RoPE: their bytes per token at a share of the
    bandwidth."""

    bytes_per_token: float
    bandwidth: float
    HAS_PER_TOKEN = True

    def per_token(self, m: int) -> float:
        return self.bytes_per_token * m / self.bandwidth

    def describe(self) -> dict:
        return super().describe() | {"bytes_per_token": self.bytes_per_token}


@dataclass(frozen=True, kw_only=True)
class LinearAttentionState(CostTerm):
    """Mamba / gated-delta-net layers read and write their recurrent state once per sequence."""

    bytes_per_seq: float
    bandwidth: float
    HAS_PER_SEQ = True

    def per_seq(self, s: int) -> float:
        return self.bytes_per_seq * s / self.bandwidth


@dataclass(frozen=True, kw_only=True)
class LMHead(CostTerm):
    """The LM head GEMM over the vocabulary shard, one row per sequence (at the padded size)."""

    vocab_per_rank: float
    hidden: int
    pad: Callable[[int], int] = field(compare=False, repr=False)
    gemm_time: GemmTime = field(compare=False, repr=False)
    HAS_PER_SEQ = True

    def per_seq(self, s: int) -> float:
        return self.gemm_time(self.pad(s), self.vocab_per_rank, self.hidden, "bfloat16") if s else 0.0


@dataclass(frozen=True, kw_only=True)
class Sampler(CostTerm):
    """GPU time outside the layers: per step (sampler, logits processing, graph launch, copies)
    and per sequence (sampler rows, logits gather, per-request metadata)."""

    seq_s: float
    HAS_PER_SEQ = True

    def per_seq(self, s: int) -> float:
        return self.seq_s * s


@dataclass(frozen=True, kw_only=True)
class LayerGaps(CostTerm):
    """Per layer per step: the gaps between the kernels the tables time one at a time (CUDA
    graphs), plus the Python launches without them (``--enforce-eager``)."""


@dataclass(frozen=True, kw_only=True)
class PipelineStages(CostTerm):
    """Pipeline parallel: a step passes every stage in turn (no micro-batch overlap); one
    send/recv of the activations per stage boundary."""


@dataclass(frozen=True, kw_only=True)
class EngineCore(CostTerm):
    """The engine core's CPU work per step (schedule, prepare inputs, update from output) and per
    scheduled sequence; overlapped with the GPU under async scheduling."""

    seq_s: float
    resource: str = "cpu"
    HAS_PER_SEQ = True
    LINEAR_PER_SEQ = True

    def per_seq(self, s: int) -> float:
        return self.seq_s * s

