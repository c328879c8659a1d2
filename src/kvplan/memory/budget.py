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
from typing import TYPE_CHECKING, Optional

from ..models.params import vision_tower
from ..models.spec import DenseMLP, ModelSpec, MoEMLP
from .allocator import rounding_bytes
from .encoder_profile import EncoderProfile, encoder_profile, unprofiled_tower
from .kv_specs import cdiv
from .flag_terms import serve_flag_terms
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
# logs 25/26 give the base, the 2-GPU same-node logs 27/28 the communication charge (0.10 GiB in
# all, none of it lazy). The caching allocator's rounding of the weights is counted on its own
# (kvplan.memory.allocator: 0.056 GiB for their Qwen2-7B, which matches their "Model loading
# took 14.2488 GiB"), so the base fits to 0 on those two logs (errors +0.01 / -0.02 GiB). The
# benchmark reports the logs these were not fitted to separately.
CUDA_CONTEXT_BYTES = int(0.45 * GIB)  # CUDA context + cuBLAS handles before vLLM's snapshot
NCCL_INIT_BYTES = int(0.10 * GIB)  # communicator set-up before the snapshot when world > 1
NON_TORCH_BASE_BYTES = 0  # non-torch memory found after profiling on one GPU (0.10.1.1 dev logs: none)
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

# The native path's sort on CUDA (vLLM 0.8.0 to 0.16.0 ``apply_top_k_top_p``:
# ``logits.sort(dim=-1)`` on the float32 logits) peaks inside ``torch.sort`` before anything above
# is allocated: PyTorch's ``launch_stable_sort_kernel`` (aten/src/ATen/native/cuda/SortStable.cu)
# writes the sorted values (4 B) and int64 indices (8 B) and, for the dummy run's shape, holds
# * 128+ rows (``segmented_sort_pairs``): int64 ``reverse_indices`` (8 B) plus CUB's
#   ``DeviceSegmentedRadixSort::SortPairs`` temporary storage, which without a DoubleBuffer holds an
#   alternate key (4 B) and value (8 B) buffer (``allocation_sizes`` of DispatchSegmentedRadixSort):
#   2 + 4 + 12 + 8 + 12 = 38 B;
# * 2-127 rows (``segmented_sort_pairs_by_full_sort``): two int2 index/segment buffers (8 + 8 B),
#   CUB's keys_out (4 B, ``radix_sort_pairs`` is given none) and its alternate key (4 B) and int2
#   value (8 B) buffers: 2 + 4 + 12 + 32 = 50 B;
# * one row (``segmented_sort_large_segments``): indices and CUB's alternates for that row:
#   2 + 4 + 12 + 8 + 12 = 38 B (a vocabulary of 1M+ takes the same path, one row at a time).
# Larger than the 28 B live after the sort, so these are the native path's peak on CUDA.
SAMPLER_NATIVE_SORT_BYTES_PER_LOGIT = 38
SAMPLER_NATIVE_FULL_SORT_BYTES_PER_LOGIT = 50

# From 0.17.0 the native path on CUDA runs top-k/top-p as one Triton kernel from 8 rows
# (``apply_top_k_top_p``: ``if HAS_TRITON and logits.shape[0] >= 8: apply_top_k_top_p_triton``,
# read in the 0.17.0 and 0.19.0 wheels), which masks the float32 logits in place; then
# ``forward_native`` takes ``logits.softmax(dim=-1, dtype=torch.float32)`` (4 B) and
# ``random_sample`` ``torch.empty_like(probs)`` (4 B, divided in place): 2 + 4 + 4 + 4 = 14 B.
# The kernel also keeps a scratch buffer per program in a module-level cache that is never freed
# (``_TRITON_BUFFER_CACHE``): min(next_power_of_2(P), SMs) rows of the vocabulary in float32,
# P = min(SMs, rows) programs, allocated before the softmax, so it adds to the sampler's peak
# (:func:`triton_sampler_scratch_bytes`; 132 rows on an H100: 0.06 GiB for a 128k vocabulary).
SAMPLER_NATIVE_TRITON_BYTES_PER_LOGIT = 14
TRITON_TOPK_TOPP_MIN_ROWS = 8


# FlashInfer's all-reduce + RMSNorm fusion workspace (vLLM 0.17-0.21 with TP 2/4/8 on SM90/SM100,
# VllmSemantics.allreduce_rms_fusion_by_default). AllReduceFusionPass.__init__ runs when the profile
# run compiles the model, after vLLM's snapshot, so its workspace is charged as non-torch memory.
# vLLM asks for max_token_num = min(FI_ALLREDUCE_FUSION_MAX_SIZE_MB[sm][tp] MiB // (hidden x 2 B),
# max_num_batched_tokens) (compilation/passes/fusion/allreduce_rms_fusion.py); FlashInfer
# (0.6.4-0.6.8.post1, the versions 0.17-0.21 pin: comm/trtllm_ar.py::
# trtllm_create_ipc_workspace_for_all_reduce_fusion with use_symm_dev_mem=True) allocates three
# buffers, tp x T x H x 2 B, tp x 256 flags x 4 B and 3 x tp x T x H x 2 B (Lamport), each with
# SymmDeviceMemory, which rounds its size up to the *recommended multicast granularity* even with
# multicast off (comm/mnnvl.py::_get_allocation_prop). That granularity is the driver's; 512 MiB on
# Hopper and Blackwell NVSwitch systems is an assumption from public evidence (NCCL 2.19 binding
# 1 GiB for a 768 MiB NVLS request on 4 H100s, nccl-tests#216; SGLang PR #18341's log of FlashInfer
# padding a 2 MiB flag buffer to 512 MiB; TensorRT-LLM's "512 MiB on GB200"), not measured here.
# Every buffer vLLM asks for is far below it, so the workspace is 3 x 512 MiB = 1.5 GiB per GPU.
# On GPUs without NVSwitch multicast FlashInfer fails to create it and vLLM runs without the fusion.
MULTICAST_GRANULARITY_BYTES = 512 * MIB
_FI_FUSION_MAX_SIZE_MIB = {90: {2: 64, 4: 2, 8: 1}, 100: {2: 64, 4: 32, 8: 1}}
_FI_BARRIER_FLAGS = 256
_FI_SIGNAL_PAD_BYTES = 2048


def _round_up(n: int, to: int) -> int:
    return cdiv(n, to) * to


def allreduce_fusion_workspace_bytes(config: ResolvedConfig, max_num_batched_tokens: int) -> int:
    """Per-GPU bytes of FlashInfer's all-reduce fusion workspace, or 0 where vLLM does not create it
    (see the comment above: version, TP 2/4/8 on one node, PP and DP 1 before 0.21, SM90 or SM100
    on an NVSwitch, torch.compile on)."""
    sem, gpu, tp = config.semantics, config.gpu, config.tensor_parallel_size
    if config.device != "cuda" or config.request.enforce_eager or not sem.allreduce_rms_fusion_by_default:
        return 0
    if tp not in (2, 4, 8) or tp > config.request.gpus_per_node or not gpu.nvswitch_multicast:
        return 0
    if sem.allreduce_rms_fusion_needs_single_stage and (config.pipeline_parallel_size > 1
                                                        or config.data_parallel_size > 1):
        return 0
    sm100 = gpu.sm == 100 or (sem.allreduce_rms_fusion_sm100_family and (gpu.sm or 0) // 10 == 10)
    if gpu.sm != 90 and not sm100:
        return 0
    family = 90 if gpu.sm == 90 else 100
    hidden, elem = config.model.hidden_size, 2
    tokens = min(_FI_FUSION_MAX_SIZE_MIB[family][tp] * MIB // (hidden * elem), max_num_batched_tokens)
    lamport_elem = 4 if config.dtype_bytes == 4 else 2
    buffers = (tp * tokens * hidden * elem, tp * _FI_BARRIER_FLAGS * 4, 3 * tp * tokens * hidden * lamport_elem)
    return sum(_round_up(_round_up(b + _FI_SIGNAL_PAD_BYTES, 2 * MIB), MULTICAST_GRANULARITY_BYTES) for b in buffers)


# Non-torch memory that vLLM 0.18-0.21 gains inside its profiling window on CUDA
# (VllmSemantics.cudagraph_profile_in_memory_window: the graphs profile_cudagraph_memory() captures
# there, and at TP > 1 the communicators' lazily allocated buffers), which no source line sizes.
# FITTED, per TP, to the six development runs of llm-d-planner's vLLM 0.19.0 H100 sweep
# (benchmarks/data/llm_d_planner_h100.csv; one H100 SXM per rank, max_model_len 8192, PP 1, not eager):
# Qwen2.5-7B-Instruct and Llama-3.1-8B-Instruct at TP 1, 2 and 4. Each value is the mean of the two
# runs' printed "non-torch forward increase memory" (0.24/0.25, 2.06/2.07, 2.13/2.13 GiB) less the
# FlashInfer fusion workspace derived below (0 at TP 1, 1.5 GiB at TP 2 and 4). The TP 2/4 values
# were measured over NVSwitch; TP 8 and PCIe multi-GPU were not, nor PP > 1 (the sweep's PP runs
# print 0.07 GiB) nor --enforce-eager (no graphs profiled): see profile_growth().
PROFILE_NON_TORCH_GROWTH_BYTES = {1: int(0.245 * GIB), 2: int(0.565 * GIB), 4: int(0.63 * GIB)}
PROFILE_GROWTH_FITTED_ON = ("llm-d-planner's vLLM 0.19.0 H100 runs of Qwen2.5-7B-Instruct and Llama-3.1-8B-Instruct "
                            "at TP 1, 2 and 4 (development data)")


@dataclass(frozen=True)
class Unmodelled:
    """A term kvplan knows exists but does not size for this configuration: the plan states it as
    "±N GiB not modelled" beside the number instead of pretending to it."""

    what: str
    bytes: int


def profile_growth(config: ResolvedConfig) -> tuple[int, tuple[Unmodelled, ...]]:
    """(bytes charged, what stays unmodelled) for the non-torch growth inside the profiling window
    (PROFILE_NON_TORCH_GROWTH_BYTES). Charged where it was fitted: 0.18-0.21, CUDA, graphs on, PP 1,
    TP 1, or TP 2/4 over NVSwitch; elsewhere the nearest fitted figure is stated as not modelled."""
    sem, tp, gpu = config.semantics, config.tensor_parallel_size, config.gpu
    if config.device != "cuda" or sem.engine != "V1":
        return 0, ()
    base = PROFILE_NON_TORCH_GROWTH_BYTES[1]
    nearest = PROFILE_NON_TORCH_GROWTH_BYTES[max(t for t in PROFILE_NON_TORCH_GROWTH_BYTES if t <= tp)] \
        if tp > 1 else base
    if not sem.cudagraph_profile_in_memory_window:
        stated = []
        if (0, 15) <= sem.version < (0, 18):  # llm-d-planner's Qwen3-14B version sweep (validation) prints it
            stated.append(Unmodelled(f"non-torch memory vLLM {sem.label} gains while it profiles (0.13 GiB at TP 1 "
                                     "in 0.15-0.17 H100 logs, not sized)", int(0.13 * GIB)))
        if tp > 1 and gpu.nvswitch_multicast and (0, 9) <= sem.version < (0, 18):
            stated.append(Unmodelled(f"the communicators' buffers allocated while profiling at TP {tp} over NVSwitch "
                                     "(2.04 GiB at TP 4 in vLLM PR 21429's 0.10 H100 log; sized only for 0.18-0.21)",
                                     int(2.04 * GIB)))
        return 0, tuple(stated)
    if config.request.enforce_eager or config.pipeline_parallel_size > 1:
        why = "--enforce-eager" if config.request.enforce_eager else f"PP {config.pipeline_parallel_size}"
        return 0, (Unmodelled(f"non-torch growth while profiling, fitted without {why}", nearest),)
    if tp == 1:
        return base, ()
    if not gpu.nvswitch_multicast:
        return base, (Unmodelled(f"communicator buffers at TP {tp} without NVSwitch (fitted over NVSwitch only)",
                                 nearest - base),)
    charged = nearest
    if tp not in PROFILE_NON_TORCH_GROWTH_BYTES:
        return charged, (Unmodelled(f"non-torch growth at TP {tp} (fitted at TP 1, 2 and 4; TP 4's charged)",
                                    charged - base),)
    return charged, ()


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
    #: the vision encoder's dummy run, where the profile runs one (kvplan.memory.encoder_profile)
    encoder: Optional[EncoderProfile] = None
    #: FlashInfer's all-reduce fusion workspace, part of ``non_torch_bytes`` (allreduce_fusion_workspace_bytes)
    allreduce_workspace_bytes: int = 0
    #: the fitted non-torch growth while profiling, part of ``non_torch_bytes`` (profile_growth)
    profile_growth_bytes: int = 0
    #: terms known to exist that this configuration's estimate does not size
    unmodelled: tuple[Unmodelled, ...] = ()
    #: --enable-lora: the stacked adapter buffers (and the extra-vocabulary growth), kvplan.memory.lora
    lora_bytes: int = 0
    #: --speculative-config: the drafter's weights on this GPU, kvplan.memory.spec_decode
    draft_weights_bytes: int = 0
    #: --cpu-offload-gb: weights moved to pinned CPU memory (already taken off ``weights_bytes``)
    offloaded_bytes: int = 0
    #: LoRA / drafter bytes on the GPU that this version's budget does not charge (V0's late allocations)
    uncharged_bytes: int = 0

    @property
    def loaded_bytes(self) -> int:
        """What vLLM's "Model loading took" counts: the weights left on the GPU, the drafter's and the
        LoRA buffers (0.8+; kvplan.memory.semantics.lora_in_logged_weights)."""
        return self.weights_bytes + self.lora_bytes + self.draft_weights_bytes

    @property
    def non_kv_bytes(self) -> int:
        return self.loaded_bytes + self.non_torch_bytes + self.activation_bytes + self.cudagraph_bytes


def cudagraph_capture_sizes(max_num_seqs: int, limit: int = 512, decode_query_len: int = 1) -> list[int]:
    """vllm/config/compilation.py: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16), with
    max_cudagraph_capture_size = min(2 × max_num_seqs × decode_query_len, 512) by default
    (``decode_query_len`` = 1 + num_speculative_tokens from 0.14, VllmConfig._set_cudagraph_sizes)."""
    top = min(2 * max_num_seqs * decode_query_len, limit)
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


def native_sort_bytes_per_logit(rows: int, vocab: int) -> int:
    """Peak bytes per logit of the PyTorch-native top-k/top-p on CUDA in vLLM 0.8-0.16 (and 0.17+
    below 8 rows, where the Triton kernel does not run): the
    ``torch.sort`` of ``rows`` × ``vocab`` float32 logits (see the constants; the path follows
    ``launch_stable_sort_kernel``'s choice by rows and row length)."""
    if rows == 1:
        return SAMPLER_NATIVE_SORT_BYTES_PER_LOGIT
    if vocab >= 1_000_000:  # one row at a time: the temporaries are one row's, the 28 B after the sort bind
        return SAMPLER_NATIVE_BYTES_PER_LOGIT
    return SAMPLER_NATIVE_FULL_SORT_BYTES_PER_LOGIT if rows < 128 else SAMPLER_NATIVE_SORT_BYTES_PER_LOGIT


def sampler_bytes_per_logit(sem: VllmSemantics, device: str = "cuda", flashinfer: bool | None = None,
                            rows: int = 128, vocab: int = 0) -> int:
    """Peak bytes per logit element of the profile run's dummy sampler (see the constants).
    ``VLLM_USE_FLASHINFER_SAMPLER`` (vllm/envs.py, TopKTopPSampler.__init__) decides on CUDA:
    0.8-0.11.0 default None, read as "on when FlashInfer is importable" (the release images ship
    it); 0.11.1 made it opt-in ("disabled by default. Set VLLM_USE_FLASHINFER_SAMPLER=1 to opt
    in"; the same in 0.11.2 and 0.15.1), so the native path runs; 0.21 and 0.33 default it to
    True (the wheel requires flashinfer-python). Versions between those read are attributed to the later one. The CPU
    backend samples natively; V0 has its own sampler.

    ``flashinfer`` says whether the sampler runs FlashInfer (``PlanRequest.flashinfer_sampler``);
    None is the version's default as above. The 0.10.0, 0.10.1 and 0.11.0 wheels list
    flashinfer-python only under the ``flashinfer`` extra, so a plain ``pip install vllm`` of those
    versions samples natively (TopKTopPSampler.__init__: "FlashInfer is not available. Falling back
    to the PyTorch-native implementation"); neither do 0.8.x and 0.9.x, and 0.8.0-0.8.5 also fall
    back with a FlashInfer of 0.2.3 or newer installed. The native path of 0.8-0.16 peaks in
    ``torch.sort`` (:func:`native_sort_bytes_per_logit`, ``rows`` × ``vocab`` logits); 0.17+ runs a
    Triton top-k/top-p kernel from 8 rows (SAMPLER_NATIVE_TRITON_BYTES_PER_LOGIT) and the same sort
    below; other versions' native path keeps the 28 B read before."""
    if sem.engine == "V0":
        return V0_SAMPLER_BYTES_PER_LOGIT
    if device != "cuda":
        return SAMPLER_NATIVE_BYTES_PER_LOGIT
    if flashinfer is None:
        flashinfer = sem.flashinfer_sampler_default
    if flashinfer:
        return SAMPLER_FLASHINFER_BYTES_PER_LOGIT
    if sem.native_sampler_sorts_logits:
        return native_sort_bytes_per_logit(rows, vocab)
    if sem.native_sampler_triton_topk_topp:
        if rows >= TRITON_TOPK_TOPP_MIN_ROWS:
            return SAMPLER_NATIVE_TRITON_BYTES_PER_LOGIT
        return native_sort_bytes_per_logit(rows, vocab)
    return SAMPLER_NATIVE_BYTES_PER_LOGIT


def triton_sampler_scratch_bytes(config: ResolvedConfig, rows: int) -> int:
    """The Triton top-k/top-p kernel's cached scratch buffer (vllm/v1/sample/ops/topk_topp_triton.py
    ``apply_top_k_top_p_triton``, the same in the 0.17.0 and 0.19.0 wheels): ``NUM_PROGRAMS =
    min(num_sm, batch_size)`` and a ``(min(next_power_of_2(NUM_PROGRAMS), num_sm), vocab_size)``
    float32 buffer, where the native sampler runs that kernel (0.17+ on CUDA from 8 rows, without
    FlashInfer). 0 elsewhere, and where the GPU's SM count is unknown (a GPU given only by its memory)."""
    sem, gpu = config.semantics, config.gpu
    if config.device != "cuda" or sem.engine != "V1" or not sem.native_sampler_triton_topk_topp:
        return 0
    flashinfer = config.request.flashinfer_sampler
    if (sem.flashinfer_sampler_default if flashinfer is None else flashinfer) or rows < TRITON_TOPK_TOPP_MIN_ROWS:
        return 0
    if not gpu.multiprocessors:
        return 0
    programs = min(gpu.multiprocessors, rows)
    buffer_rows = min(1 << (programs - 1).bit_length(), gpu.multiprocessors)
    return buffer_rows * config.model.vocab_size * 4


def profile_logit_rows(sem: VllmSemantics, device: str, flashinfer: bool | None, max_num_seqs: int,
                       max_num_batched_tokens: int, vocab: int, dtype_bytes: int) -> tuple[int, int]:
    """(rows of logits, bytes per logit element) at the profile run's logits/sampler peak.
    V1 from 0.8 samples ``min(max_num_seqs, max_num_tokens)`` rows (:func:`sampler_bytes_per_logit`);
    V1 before 0.8 ran no sampler, only ``compute_logits`` in the model dtype: over one row per
    dummy request in 0.7.3, over every token in 0.7.0-0.7.2 (VllmSemantics.v1_profile_logits)."""
    rows = min(max_num_seqs, max_num_batched_tokens)
    mode = sem.v1_profile_logits if sem.engine == "V1" else "sampler"
    if mode == "sampler":
        return rows, sampler_bytes_per_logit(sem, device, flashinfer, rows, vocab)
    return (max_num_batched_tokens if mode == "all_tokens" else rows), dtype_bytes


def activation_peak_bytes(spec: ModelSpec, tp: int, dtype_bytes: int, max_num_batched_tokens: int,
                          max_num_seqs: int, last_stage: bool = True,
                          sampler_bytes: int = SAMPLER_FLASHINFER_BYTES_PER_LOGIT,
                          rows: Optional[int] = None, persistent_bytes: int = 0,
                          forward_floor_bytes: int = 0, forward_extra_bytes: int = 0) -> int:
    """profile_run: ``_dummy_run(max_num_tokens)`` then, on the last PP rank,
    ``_dummy_sampler_run`` over ``min(max_num_seqs, max_num_tokens)`` rows (``rows`` when the
    version computes another number of logit rows, :func:`profile_logit_rows`); the forward's
    hidden states stay referenced while the sampler runs, and so do ``persistent_bytes`` the forward
    left allocated (the MoE workspace, :func:`moe_workspace_bytes`). ``forward_floor_bytes``: another
    forward of the profile that may be wider (a drafter's dummy run); ``forward_extra_bytes``: buffers
    live on top of the widest layer (LoRA's shrink buffer, a V0 offloaded layer's copy)."""
    forward = max(max_num_batched_tokens * _layer_activation_per_token(spec, tp, dtype_bytes),
                  forward_floor_bytes) + forward_extra_bytes
    sampler = 0
    if last_stage:
        if rows is None:
            rows = min(max_num_seqs, max_num_batched_tokens)
        sampler = rows * spec.vocab_size * sampler_bytes
        sampler += max_num_batched_tokens * spec.hidden_size * dtype_bytes + persistent_bytes
    return int(max(forward, sampler))


def cublas_workspace_bytes(sm: Optional[int]) -> int:
    """cuBLAS's workspace for the stream the profile run computes on: PyTorch allocates it through
    the caching allocator at the first GEMM (``getNewWorkspace`` in aten/src/ATen/cuda/
    CublasHandlePool.cpp) and keeps it per handle and stream, so it lands in the profile's torch peak
    and stays. ``parseChosenWorkspaceSize``: 32 MiB on Hopper and Blackwell (major 9, 10, 12; older
    PyTorch only sm 90, where vLLM 0.19's H100 runs are), else the ``:4096:2:16:8`` default, 8 MiB and
    128 KiB. A GPU of unknown architecture (given only by its memory) gets the larger: the cautious side."""
    if sm is None or sm // 10 in (9, 10, 12):
        return 32 * MIB
    return 4096 * 1024 * 2 + 16 * 1024 * 8


def moe_workspace_bytes(config: ResolvedConfig, max_num_batched_tokens: int) -> int:
    """The modular MoE kernel's workspace that 0.14-0.21 keep in the global WorkspaceManager
    (VllmSemantics.moe_workspace_persists), for unquantized experts on CUDA (the Triton experts,
    the default backend; quantized experts run other kernels, not read here). TritonExperts.
    workspace_shapes: workspace1 (M, topk, max(N/2, K)), shared with the output (M, K), and
    workspace2 (M, topk, max(N, K)), N = 2 × the expert width on this rank, K = hidden size, in the
    model dtype, each 256-byte aligned (WorkspaceManager.get_simultaneous); sized by the largest MoE
    layer. 0 where it does not apply."""
    sem, spec = config.semantics, config.model
    if config.device != "cuda" or not sem.moe_workspace_persists or config.quantization is not None:
        return 0
    tp, dtype_bytes, k_dim = config.tensor_parallel_size, config.dtype_bytes, spec.hidden_size
    tokens = max_num_batched_tokens
    chunk = min(tokens, sem.moe_chunk_tokens or tokens)
    worst = 0
    for mlp in {layer.mlp for layer in spec.layers if isinstance(layer.mlp, MoEMLP)}:
        n_dim = (2 if mlp.gated else 1) * mlp.expert_intermediate_size // tp
        act_out = n_dim // 2 if mlp.gated else n_dim
        ws13 = max(chunk * mlp.experts_per_token * max(act_out, k_dim), tokens * k_dim) * dtype_bytes
        ws2 = chunk * mlp.experts_per_token * max(n_dim, k_dim) * dtype_bytes
        worst = max(worst, _round_up(ws13, 256) + _round_up(ws2, 256))
    return worst


def cudagraph_estimate_bytes(spec: ModelSpec, tp: int, dtype_bytes: int, max_num_seqs: int,
                             layers_on_rank: int, decode_query_len: int = 1, cases: int = 1) -> int:
    """``cases``: graphs captured per size (2 with LoRA, VllmSemantics.lora_cudagraph_cases)."""
    sizes = cudagraph_capture_sizes(max_num_seqs, decode_query_len=decode_query_len)
    first = sizes[-1] * _layer_activation_per_token(spec, tp, dtype_bytes)
    per_graph = GRAPH_BASE_BYTES + GRAPH_PER_LAYER_BYTES * layers_on_rank
    modes = 2  # FULL_AND_PIECEWISE: decode FULL graphs and PIECEWISE graphs
    return int(first + per_graph * modes * (cases * len(sizes) - 1))


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


#: model types whose sliding-window layers rotate with their own unscaled RoPE (``rope_local_base_freq``):
#: vLLM's gemma3.py (0.19.0 L164-184) gives them ``rope_type="default"``, a second ``get_rope`` entry
_LOCAL_ROPE_MODEL_TYPES = frozenset({"gemma3", "gemma3_text"})


def rope_cache_bytes(spec: ModelSpec, dtype_bytes: int = 2, mrope_factor: int = 1) -> int:
    """The cos/sin caches (``get_rope`` shares one between the layers that ask for the same rope):
    positions × rotary dim in the model dtype (``cache.to(dtype)`` in RotaryEmbedding.__init__).
    Gemma-3 builds two: the full layers' (scaled, :func:`rope_positions`) and the sliding layers'
    over ``max_position_embeddings`` unscaled. A multimodal RoPE (an ``mrope_section`` in the rope
    scaling: ``MRotaryEmbedding``) builds ``mrope_factor`` times the rows
    (``VllmSemantics.mrope_cache_positions_factor``)."""
    if spec.is_mla:
        rot = spec.layers[0].mixer.qk_rope_head_dim  # type: ignore[union-attr]
    else:
        rot = spec.head_dim
    caches = rope_positions(spec) * rot * dtype_bytes
    if "mrope_section" in (spec.rope_scaling or {}):
        caches *= mrope_factor
    if spec.model_type in _LOCAL_ROPE_MODEL_TYPES or spec.raw_flag("rope_local_base_freq"):
        caches += int(spec.max_len_keys.get("max_position_embeddings") or rope_positions(spec)) * rot * dtype_bytes
    return caches


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
    weights = stage.bytes_per_rank + rope_cache_bytes(spec, dtype_bytes, sem.mrope_cache_positions_factor)
    if device == "cuda":  # what torch.cuda.memory_allocated counts for them (kvplan.memory.allocator)
        weights += rounding_bytes(stage.tensor_bytes)
    comm = NON_TORCH_COMM_BYTES if multi_gpu else 0
    fusion_workspace = allreduce_fusion_workspace_bytes(config, max_num_batched_tokens)
    growth, growth_unmodelled = profile_growth(config)
    unmodelled = list(growth_unmodelled)
    non_torch = NON_TORCH_BASE_BYTES + comm + fusion_workspace + growth
    rows, sampler_bytes = profile_logit_rows(sem, device, config.request.flashinfer_sampler, config.max_num_seqs,
                                             max_num_batched_tokens, spec.vocab_size, dtype_bytes)
    extras = serve_flag_terms(config, stage, max_num_batched_tokens, rows, sampler_bytes,
                              native_sort_bytes_per_logit(rows, spec.vocab_size))
    weights -= extras.offloaded_bytes
    if last_stage and extras.rejection_bytes_per_logit:  # the dummy rejection sampler runs after the sampler
        sampler_bytes = max(sampler_bytes, extras.rejection_bytes_per_logit)
    # left allocated while the sampler runs: the MoE workspace, and the sampler kernel's own scratch
    persistent = moe_workspace_bytes(config, max_num_batched_tokens) + triton_sampler_scratch_bytes(config, rows)
    activation = activation_peak_bytes(spec, tensor_parallel_size, dtype_bytes, max_num_batched_tokens,
                                       config.max_num_seqs, last_stage, sampler_bytes, rows, persistent,
                                       extras.drafter_forward_bytes, extras.forward_extra_bytes)
    if device == "cuda":  # allocated at the profile's first GEMM, held through both peaks
        activation += cublas_workspace_bytes(config.gpu.sm)
    encoder = encoder_profile(spec, tensor_parallel_size, dtype_bytes, max_num_batched_tokens, sem.engine,
                             sem.vision_rotary, items_round_up=sem.encoder_items_round_up,
                             max_num_seqs=config.max_num_seqs, max_model_len=config.max_model_len) \
        if device == "cuda" and stage.stage == 0 else None
    if encoder is not None:  # the encoder runs first; its batch and outputs stay through the dummy forward
        activation = max(encoder.peak_bytes, encoder.held_bytes + activation)
        tower = vision_tower(spec).tower
        if sem.engine == "V0" and tower is not None and tower.kept_states:
            # V0 runs every dummy sequence's image through the tower at once (encoder_profile); what of it
            # stays live at the peak is read, not measured: the kept layer inputs and the second float32
            # pixel copy are the terms whose liveness kvplan is least sure of
            kept = encoder.items * encoder.patches_per_item * tower.kept_states * tower.width * dtype_bytes
            unmodelled.append(Unmodelled(
                f"the liveness of the {tower.family} tower's {encoder.items} dummy images under V0's profile "
                f"({tower.kept_states} kept layer inputs and a second float32 pixel copy, read in the source "
                "but not measured)", kept + encoder.inputs_bytes // 2))
    elif device == "cuda" and stage.stage == 0 and sem.engine == "V1" and unprofiled_tower(spec):
        # a tower whose largest dummy item kvplan does not read: at least the budget's embeddings stay
        # held through the language model's dummy run, and the item's pixels beside them
        unmodelled.append(Unmodelled(f"the {unprofiled_tower(spec)} vision tower's share of the profile run "
                                     "(its processor's largest image is not read)",
                                     2 * max_num_batched_tokens * spec.hidden_size * dtype_bytes))
    graphs = 0
    if device == "cuda" and not config.request.enforce_eager and sem.subtracts_cudagraph_estimate and (
            not config.v2_model_runner or sem.v2_runner_estimates_cudagraphs):
        graphs = cudagraph_estimate_bytes(spec, tensor_parallel_size, dtype_bytes, config.max_num_seqs,
                                          len(stage.layers) + extras.drafter_layers, extras.decode_query_len,
                                          extras.cudagraph_cases)
    preexisting = CUDA_CONTEXT_BYTES + (NCCL_INIT_BYTES if multi_gpu else 0)
    flags = dict(lora_bytes=extras.lora_bytes, draft_weights_bytes=extras.draft_weights_bytes,
                 offloaded_bytes=extras.offloaded_bytes, uncharged_bytes=extras.uncharged_bytes)
    if kv_cache_memory_bytes is not None:
        return BudgetTerms(total_bytes, gpu_memory_utilization, requested, weights, non_torch, activation, graphs,
                           preexisting, kv_cache_memory_bytes, "kv_cache_memory", encoder, fusion_workspace, **flags,
                           profile_growth_bytes=growth)
    charged = weights + extras.lora_bytes + extras.draft_weights_bytes - extras.uncharged_bytes + non_torch \
        + activation + graphs
    charged += sem.charged_preexisting(CUDA_CONTEXT_BYTES, NCCL_INIT_BYTES if multi_gpu else 0)
    return BudgetTerms(total_bytes, gpu_memory_utilization, requested, weights, non_torch, activation, graphs,
                       preexisting, requested - charged, "estimate", encoder, fusion_workspace, **flags,
                       profile_growth_bytes=growth, unmodelled=tuple(unmodelled))
