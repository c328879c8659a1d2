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
* activation peak of vLLM's profile run (``GPUModelRunner.profile_run``): the larger of one
  layer's forward over ``max_num_batched_tokens`` tokens (MLP, or the fused-MoE intermediate
  caches) and the dummy sampler run over ``min(max_num_seqs, max_num_batched_tokens)`` rows of
  logits, whose bytes per logit are read from the sampler code of each version
  (:func:`sampler_bytes_per_logit`);
* CUDA-graph estimate: the largest graph's activations plus a per-graph cost for every captured
  size, for both capture modes.

Source-derived: the sampler bytes per logit, the fused-MoE cache sizes, the RoPE cache length,
the MXFP4 padding (models/params.py). Fitted, and named with the logs they were fitted to, are
only the small non-torch constants below (docs/vllm-semantics.md §12).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..models.spec import DenseMLP, ModelSpec, MoEMLP
from .semantics import VllmSemantics

if TYPE_CHECKING:
    from ..models.params import StageWeights
    from ._resolve import ResolvedConfig

GIB = 1 << 30
MIB = 1 << 20

# Fitted constants. CUDA_CONTEXT sizes what V0 / 0.8 charged for memory in use before the
# snapshot (V0 logs 01, 02, 04). NCCL_INIT (what 0.9-0.10 charged for communicator set-up before
# their snapshot), NON_TORCH_BASE and NON_TORCH_COMM were fitted to the development set's 0.10.1.1
# A100 logs only (tests/fixtures/vllm_logs/25-30, from dev_cases.json's server logs): the 1-GPU
# logs 25/26 give the base (0.05 GiB), the 2-GPU same-node logs 27/28 the communication charge
# (0.10 GiB in all, none of it lazy). The benchmark reports the logs these were not fitted to
# separately.
CUDA_CONTEXT_BYTES = int(0.45 * GIB)  # CUDA context + cuBLAS handles before vLLM's snapshot
NCCL_INIT_BYTES = int(0.10 * GIB)  # communicator set-up before the snapshot when world > 1
NON_TORCH_BASE_BYTES = int(0.05 * GIB)  # allocator slack / workspaces found after profiling
NON_TORCH_COMM_BYTES = 0  # NCCL / custom all-reduce buffers allocated lazily during profiling
V0_SAMPLER_BYTES_PER_LOGIT = 36  # V0 sampler (fitted to V0 logs 01, 02, 04; not re-derived)
GRAPH_BASE_BYTES = 2 * MIB
GRAPH_PER_LAYER_BYTES = 64 * 1024

# V1 sampler, bytes per logit element at its peak (source-derived, vllm/v1/sample):
# _dummy_sampler_run keeps compute_logits' model-dtype logits (2 B) referenced while
# Sampler.forward makes its float32 copy (4 B). Then top-k/top-p (the dummy run sets both):
# * FlashInfer (TopKTopPSampler.forward_cuda -> flashinfer top_k_top_p_sampling_from_logits):
#   top_k_mask_logits (4 B) and its softmax (4 B): 2 + 4 + 8 = 14 B;
# * PyTorch-native apply_top_k_top_p: sort values (4) + int64 indices (8) + top-k bool mask (1)
#   + softmax of the sorted values (4) + top-p bool mask (1) + scatter result (4): 2 + 4 + 22 = 28 B.
SAMPLER_FLASHINFER_BYTES_PER_LOGIT = 14
SAMPLER_NATIVE_BYTES_PER_LOGIT = 28


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
            k = mlp.experts_per_token
            # fused_moe.fused_experts_impl: cache13 holds (M, topk, max(2·I, H)) (intermediate
            # caches 1 and 3 share it), cache2 (M·topk, I), the output (M, H); router logits.
            per_token = (k * (max(2 * mi, h) + mi) + h + mlp.num_experts) * dtype_bytes
            if mlp.shared_intermediate_size:
                per_token += 3 * mlp.shared_intermediate_size / tp * dtype_bytes
        else:
            assert isinstance(mlp, DenseMLP)
            per_token = 3 * mlp.intermediate_size / tp * dtype_bytes
        worst = max(worst, per_token)
    return worst + 2 * h * dtype_bytes  # residual stream and normalised hidden state


def sampler_bytes_per_logit(sem: VllmSemantics, device: str = "cuda") -> int:
    """Peak bytes per logit element of the profile run's dummy sampler (see the constants).
    ``VLLM_USE_FLASHINFER_SAMPLER`` (vllm/envs.py, TopKTopPSampler.__init__) decides on CUDA:
    0.8-0.11 default None, read as "on when FlashInfer is importable" (the release images ship
    it); 0.15.1 made it opt-in ("disabled by default. Set VLLM_USE_FLASHINFER_SAMPLER=1 to opt
    in"), so the native sort runs; 0.21 and 0.33 default it to True (the wheel requires
    flashinfer-python). Versions between those read are attributed to the later one. The CPU
    backend samples natively; V0 has its own sampler."""
    if sem.engine == "V0":
        return V0_SAMPLER_BYTES_PER_LOGIT
    if device != "cuda":
        return SAMPLER_NATIVE_BYTES_PER_LOGIT
    if (0, 15) <= sem.version < (0, 21):
        return SAMPLER_NATIVE_BYTES_PER_LOGIT
    return SAMPLER_FLASHINFER_BYTES_PER_LOGIT


def activation_peak_bytes(spec: ModelSpec, tp: int, dtype_bytes: int, max_num_batched_tokens: int,
                          max_num_seqs: int, last_stage: bool = True,
                          sampler_bytes: int = SAMPLER_FLASHINFER_BYTES_PER_LOGIT) -> int:
    """profile_run: ``_dummy_run(max_num_tokens)`` then, on the last PP rank,
    ``_dummy_sampler_run`` over ``min(max_num_seqs, max_num_tokens)`` rows; the forward's
    hidden states stay referenced while the sampler runs."""
    forward = max_num_batched_tokens * _layer_activation_per_token(spec, tp, dtype_bytes)
    sampler = 0
    if last_stage:
        rows = min(max_num_seqs, max_num_batched_tokens)
        sampler = rows * spec.vocab_size * sampler_bytes
        sampler += max_num_batched_tokens * spec.hidden_size * dtype_bytes
    return int(max(forward, sampler))


def cudagraph_estimate_bytes(spec: ModelSpec, tp: int, dtype_bytes: int, max_num_seqs: int,
                             layers_on_rank: int) -> int:
    sizes = cudagraph_capture_sizes(max_num_seqs)
    first = sizes[-1] * _layer_activation_per_token(spec, tp, dtype_bytes)
    per_graph = GRAPH_BASE_BYTES + GRAPH_PER_LAYER_BYTES * layers_on_rank
    modes = 2  # FULL_AND_PIECEWISE: decode FULL graphs and PIECEWISE graphs
    return int(first + per_graph * modes * (len(sizes) - 1))


def rope_positions(spec: ModelSpec) -> int:
    """Rows of RotaryEmbedding's cos/sin cache (``_compute_cos_sin_cache``): vLLM passes the
    config's ``max_position_embeddings`` to ``get_rope`` whatever ``--max-model-len`` is;
    linear/dynamic scaling multiply it by the factor, YaRN builds
    ``original_max_position_embeddings × factor`` rows (vllm/model_executor/layers/rotary_embedding)."""
    keys = spec.max_len_keys
    positions = keys.get("max_position_embeddings") or min(keys.values(), default=2048)
    rope = spec.rope_scaling or {}
    rope_type = str(rope.get("rope_type") or rope.get("type") or "").lower()
    factor = rope.get("factor") or 1
    if rope_type in ("linear", "dynamic"):
        positions = int(positions * factor)
    elif rope_type in ("yarn", "deepseek_yarn"):
        positions = int((rope.get("original_max_position_embeddings") or positions) * factor)
    return int(positions)


def rope_cache_bytes(spec: ModelSpec, dtype_bytes: int = 2) -> int:
    """One cos/sin cache (``get_rope`` shares it between layers): positions × rotary dim in the
    model dtype (``cache.to(dtype)`` in RotaryEmbedding.__init__)."""
    if spec.is_mla:
        rot = spec.layers[0].mixer.qk_rope_head_dim  # type: ignore[union-attr]
    else:
        rot = spec.head_dim
    return rope_positions(spec) * rot * dtype_bytes


def requested_bytes(total: int, util: float, sem: VllmSemantics) -> int:
    return math.ceil(total * util) if sem.requested_memory_ceil else int(total * util)


def estimate_budget(config: ResolvedConfig, stage: StageWeights, max_num_batched_tokens: int) -> BudgetTerms:
    """The budget of one GPU of pipeline stage ``stage`` when vLLM profiles ``max_num_batched_tokens``
    tokens per step; every other input (GPU, utilisation, dtype, parallelism, max_num_seqs,
    --enforce-eager, device, a given KV memory) is the resolved configuration's. The length does
    not enter: the RoPE cache follows the model's max_position_embeddings (:func:`rope_positions`)."""
    spec, sem, device = config.model, config.semantics, config.device
    tensor_parallel_size, dtype_bytes = config.tensor_parallel_size, config.dtype_bytes
    total_bytes, gpu_memory_utilization = config.gpu.memory_bytes, config.gpu_memory_utilization
    kv_cache_memory_bytes = config.request.kv_cache_memory_bytes
    multi_gpu = config.world_size > 1
    last_stage = stage.stage == config.pipeline_parallel_size - 1
    requested = requested_bytes(total_bytes, gpu_memory_utilization, sem)
    weights = stage.bytes_per_rank + rope_cache_bytes(spec, dtype_bytes)
    comm = NON_TORCH_COMM_BYTES if multi_gpu else 0
    non_torch = NON_TORCH_BASE_BYTES + comm
    activation = activation_peak_bytes(spec, tensor_parallel_size, dtype_bytes, max_num_batched_tokens,
                                       config.max_num_seqs, last_stage, sampler_bytes_per_logit(sem, device))
    graphs = 0
    if device == "cuda" and not config.request.enforce_eager and sem.subtracts_cudagraph_estimate:
        graphs = cudagraph_estimate_bytes(spec, tensor_parallel_size, dtype_bytes, config.max_num_seqs,
                                          len(stage.layers))
    preexisting = CUDA_CONTEXT_BYTES + (NCCL_INIT_BYTES if multi_gpu else 0)
    if kv_cache_memory_bytes is not None:
        return BudgetTerms(total_bytes, gpu_memory_utilization, requested, weights, non_torch, activation, graphs,
                           preexisting, kv_cache_memory_bytes, "kv_cache_memory")
    charged = weights + non_torch + activation + graphs
    charged += sem.charged_preexisting(CUDA_CONTEXT_BYTES, NCCL_INIT_BYTES if multi_gpu else 0)
    return BudgetTerms(total_bytes, gpu_memory_utilization, requested, weights, non_torch, activation, graphs,
                       preexisting, requested - charged, "estimate")
