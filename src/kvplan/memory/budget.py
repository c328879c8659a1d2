"""How much memory vLLM hands the KV cache on one GPU: the budget and what comes off it.

vLLM (0.27–0.33, ``Worker.determine_available_memory``)::

    requested = ceil(total × gpu_memory_utilization)
    available = requested − (consumed since the init snapshot + transient activation peak)
                          − CUDA-graph estimate (0.21+, unless --enforce-eager)

The consumed and peak terms are measured on a real GPU; kvplan models them from the architecture
so a plan can be made before any GPU exists, and names every term so a measured value can replace
it (``--kv-cache-memory``, ``--from-log``). The model, per rank:

* weights: every tensor, sharded as vLLM shards it (:mod:`kvplan.models.params`), plus the RoPE
  cos/sin cache;
* non-torch growth during profiling: allocator slack plus NCCL / custom all-reduce buffers when
  the rank talks to peers;
* activation peak: the larger of one layer's forward over ``max_num_batched_tokens`` tokens (MLP
  or fused-MoE intermediates) and the dummy sampler run over ``max_num_seqs`` rows of logits
  (float32 copies, sort values and int64 indices);
* CUDA-graph estimate: the largest graph's activations plus a per-graph cost for every captured
  size, for both capture modes.

The constants below were fitted to public startup logs (tests/fixtures/vllm_logs); the README
and the notes report the error of this model against them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..models.spec import DenseMLP, ModelSpec, MoEMLP
from .semantics import VllmSemantics

GIB = 1 << 30
MIB = 1 << 20

# Fitted constants (see module docstring).
CUDA_CONTEXT_BYTES = int(0.45 * GIB)  # CUDA context + cuBLAS handles before vLLM's snapshot
NCCL_INIT_BYTES = int(0.25 * GIB)  # communicator set-up before the snapshot when world > 1
NON_TORCH_BASE_BYTES = int(0.10 * GIB)  # allocator slack / workspaces found after profiling
NON_TORCH_COMM_BYTES = int(0.30 * GIB)  # custom all-reduce + NCCL buffers allocated lazily
SAMPLER_BYTES_PER_LOGIT = 36  # bf16 logits, fp32 copies, probs, logprobs, sorted values + int64 index
GRAPH_BASE_BYTES = 2 * MIB
GRAPH_PER_LAYER_BYTES = 64 * 1024


@dataclass(frozen=True)
class BudgetTerms:
    """Every term of the KV budget for one GPU, in bytes; ``source`` says where
    ``available_kv_bytes`` came from: estimate, kv_cache_memory (given), or log (measured)."""

    total_bytes: int
    gpu_memory_utilization: float
    requested_bytes: int
    weights_bytes: int
    non_torch_bytes: int
    activation_bytes: int
    cudagraph_bytes: int
    preexisting_bytes: int
    available_kv_bytes: int
    source: str

    @property
    def non_kv_bytes(self) -> int:
        return self.weights_bytes + self.non_torch_bytes + self.activation_bytes + self.cudagraph_bytes


def cudagraph_capture_sizes(max_num_seqs: int, limit: int = 512) -> list[int]:
    """vllm/config/compilation.py: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16), with
    max_cudagraph_capture_size = min(2 × max_num_seqs, 512) by default."""
    top = min(2 * max_num_seqs, limit)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
    return [s for s in sizes if s <= top]


def _layer_activation_per_token(spec: ModelSpec, tp: int, dtype_bytes: int) -> float:
    """Bytes per token of one decoder layer's largest live intermediates."""
    h = spec.hidden_size
    worst = 0.0
    seen = set()
    for layer in spec.layers:
        mlp = layer.mlp
        if mlp in seen:
            continue
        seen.add(mlp)
        if isinstance(mlp, MoEMLP):
            mi = mlp.expert_intermediate_size / tp
            # fused_moe caches: (M, topk, 2·mi), (M·topk, mi), (M, topk, h); router logits fp32.
            per_token = mlp.experts_per_token * (3 * mi + h) * dtype_bytes + mlp.num_experts * 4
            if mlp.shared_intermediate_size:
                per_token += 3 * mlp.shared_intermediate_size / tp * dtype_bytes
        else:
            assert isinstance(mlp, DenseMLP)
            per_token = 3 * mlp.intermediate_size / tp * dtype_bytes
        worst = max(worst, per_token)
    return worst + 2 * h * dtype_bytes  # residual stream and normalised hidden state


def activation_peak_bytes(spec: ModelSpec, tp: int, dtype_bytes: int, max_num_batched_tokens: int,
                          max_num_seqs: int, last_stage: bool = True) -> int:
    forward = max_num_batched_tokens * _layer_activation_per_token(spec, tp, dtype_bytes)
    sampler = 0
    if last_stage:
        rows = min(max_num_seqs, max_num_batched_tokens)
        sampler = rows * spec.vocab_size * SAMPLER_BYTES_PER_LOGIT
    return int(max(forward, sampler))


def cudagraph_estimate_bytes(spec: ModelSpec, tp: int, dtype_bytes: int, max_num_seqs: int,
                             layers_on_rank: int) -> int:
    sizes = cudagraph_capture_sizes(max_num_seqs)
    first = sizes[-1] * _layer_activation_per_token(spec, tp, dtype_bytes)
    per_graph = GRAPH_BASE_BYTES + GRAPH_PER_LAYER_BYTES * layers_on_rank
    modes = 2  # FULL_AND_PIECEWISE: decode FULL graphs and PIECEWISE graphs
    return int(first + per_graph * modes * (len(sizes) - 1))


def rope_cache_bytes(spec: ModelSpec, max_positions: int) -> int:
    """RotaryEmbedding's cos/sin cache: max positions × rotary dim, in float32 (vLLM builds it
    in float32 and keeps the model dtype copy; count 4 bytes)."""
    if spec.is_mla:
        rot = spec.layers[0].mixer.qk_rope_head_dim  # type: ignore[union-attr]
    else:
        rot = spec.head_dim
    return max_positions * rot * 4


def requested_bytes(total: int, util: float, sem: VllmSemantics) -> int:
    return math.ceil(total * util) if sem.requested_memory_ceil else int(total * util)


def estimate_budget(
    spec: ModelSpec,
    sem: VllmSemantics,
    total_bytes: int,
    util: float,
    weights_bytes: int,
    tp: int,
    pp: int,
    dtype_bytes: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    layers_on_rank: int,
    last_stage: bool,
    enforce_eager: bool,
    device: str = "cuda",
    kv_cache_memory_bytes: Optional[int] = None,
) -> BudgetTerms:
    world = tp * pp
    requested = requested_bytes(total_bytes, util, sem)
    weights = weights_bytes + rope_cache_bytes(spec, max_model_len)
    comm = NON_TORCH_COMM_BYTES if world > 1 else 0
    non_torch = NON_TORCH_BASE_BYTES + comm
    activation = activation_peak_bytes(spec, tp, dtype_bytes, max_num_batched_tokens, max_num_seqs,
                                       last_stage)
    graphs = 0
    if device == "cuda" and not enforce_eager and sem.subtracts_cudagraph_estimate:
        graphs = cudagraph_estimate_bytes(spec, tp, dtype_bytes, max_num_seqs, layers_on_rank)
    preexisting = CUDA_CONTEXT_BYTES + (NCCL_INIT_BYTES if world > 1 else 0)
    if kv_cache_memory_bytes is not None:
        return BudgetTerms(total_bytes, util, requested, weights, non_torch, activation, graphs,
                           preexisting, kv_cache_memory_bytes, "kv_cache_memory")
    charged = weights + non_torch + activation + graphs
    charged += sem.charged_preexisting(CUDA_CONTEXT_BYTES, NCCL_INIT_BYTES if world > 1 else 0)
    return BudgetTerms(total_bytes, util, requested, weights, non_torch, activation, graphs,
                       preexisting, requested - charged, "estimate")
