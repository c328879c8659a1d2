"""The plan's result: one frozen object that every renderer (table, JSON, Markdown) reads.

The JSON form (``PlanResult.to_dict``) is kvplan's stable contract: fields are only ever added.
Sizes are reported in both bytes (exact) and GiB (2^30, for reading).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Optional

from ..hardware import GIB
from .kv_specs import KVCacheSpec, SizingContext

if TYPE_CHECKING:  # pragma: no cover
    from .engine_spec import EngineSpec

SCHEMA_VERSION = 1


def to_gib(nbytes: float) -> float:
    """Bytes as the result's ``*_gib`` fields hold them: GiB rounded to 4 decimals."""
    return round(nbytes / GIB, 4)


@dataclass(frozen=True)
class ModelInfo:
    id: str
    source: str
    architecture: str
    summary: str
    num_layers: int
    params: int
    params_active: int
    published_params: Optional[int]
    max_position_embeddings: Optional[int]


@dataclass(frozen=True)
class ParallelInfo:
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    gpus_per_replica: int
    total_gpus: int
    gpus_per_node: int
    nodes: int


@dataclass(frozen=True)
class ResolvedFlags:
    device: str
    gpu: str
    gpu_memory_bytes: int
    dtype: str
    quantization: Optional[str]
    kv_cache_dtype: str
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    enforce_eager: bool
    hybrid_kv_cache_manager: bool
    in_flight_tokens: int
    chunked_prefill: bool = True
    lora: Optional["LoRAInfo"] = None
    speculative: Optional["SpecDecodeInfo"] = None
    cpu_offload_gb: float = 0.0


@dataclass(frozen=True)
class MemoryInfo:
    total_gib_per_gpu: float
    requested_gib: float
    weights_gib_per_gpu: float
    non_torch_gib: float
    activation_peak_gib: float
    cudagraph_gib: float
    non_kv_gib: float
    available_kv_cache_gib: float
    available_kv_cache_bytes: int
    kv_cache_used_gib: float  # num_gpu_blocks × bytes_per_block
    preexisting_gib: float  # CUDA context etc., outside the budget since 0.11
    source: str  # estimate | kv_cache_memory | log
    weights_bytes_per_stage: tuple[int, ...] = ()
    # per pipeline stage: KV memory and blocks each stage's budget gives (vLLM takes the minimum)
    available_kv_bytes_per_stage: tuple[int, ...] = ()
    num_gpu_blocks_per_stage: tuple[int, ...] = ()
    # serve flags that move memory (kvplan.memory.lora, spec_decode, offload); 0 without them
    lora_gib: float = 0.0  # --enable-lora: the stacked adapter buffers on one GPU
    draft_weights_gib: float = 0.0  # --speculative-config: the drafter's weights on one GPU
    cpu_offload_gib: float = 0.0  # --cpu-offload-gb: weights moved off one GPU (already out of weights_gib_per_gpu)
    loaded_gib: float = 0.0  # what vLLM's "Model loading took" counts: weights + LoRA + drafter
    host: Optional["HostMemory"] = None  # CPU memory one worker needs for these flags
    #: terms the estimate knows exist but does not size here, summed: the plan's "±N GiB not modelled"
    unmodelled_gib: float = 0.0


@dataclass(frozen=True)
class HostMemory:
    """Host (CPU) memory per GPU worker that the serve flags ask for, in GiB."""

    cpu_offload_gib: float = 0.0  # pinned weights (--cpu-offload-gb)
    lora_cache_gib: float = 0.0  # max_cpu_loras adapters at max_lora_rank (--max-cpu-loras)
    swap_space_gib: float = 0.0  # V0's CPU KV blocks (--swap-space)
    num_cpu_blocks: int = 0

    @property
    def total_gib(self) -> float:
        return round(self.cpu_offload_gib + self.lora_cache_gib + self.swap_space_gib, 4)


@dataclass(frozen=True)
class SpecDecodeInfo:
    """The drafter of --speculative-config, as planned."""

    method: str
    num_speculative_tokens: int
    model: Optional[str]
    kv_layers: int  # attention layers it adds to the KV pool
    weights_gib: float
    lookahead_tokens: int  # slots admission reserves per running request
    derived_from_target: bool  # the head's shape was derived from the target (no config.json given)


@dataclass(frozen=True)
class LoRAInfo:
    max_loras: int
    max_lora_rank: int
    max_cpu_loras: int
    lora_dtype: str
    gpu_gib: float  # on the GPU reported (the stage with the most weights)
    adapter_gib: float  # one adapter at max rank on every module, whole
    extra_vocab: int
    cudagraph_cases: int


@dataclass(frozen=True)
class KVGroupInfo:
    kind: str
    layers: int
    page_bytes: int
    blocks_per_request: int
    #: the group's KV spec: how many blocks a request holds and needs (not in the JSON)
    spec: Optional[KVCacheSpec] = field(default=None, repr=False)


@dataclass(frozen=True)
class KVInfo:
    bytes_per_token_per_gpu: int
    bytes_per_token_total: int
    bytes_per_token_logical: int
    block_size: int
    bytes_per_block: int
    bytes_per_block_per_stage: tuple[int, ...]
    num_gpu_blocks: int
    usable_blocks: int
    blocks_per_request: int
    kv_cache_tokens: int
    max_concurrency: float
    max_concurrency_for_tokens: int
    log_lines: tuple[str, ...]
    groups: tuple[KVGroupInfo, ...]
    padding_layers: int
    padding_waste: float


@dataclass(frozen=True)
class LayoutFit:
    """The smallest TP × PP that starts the model at the asked max_model_len (kvplan.memory.layout_fit)."""

    found: bool
    tensor_parallel_size: Optional[int]
    pipeline_parallel_size: Optional[int]
    gpus_per_replica: Optional[int]
    total_gpus: Optional[int]
    nodes: Optional[int]
    max_model_len: Optional[int]
    serve_command: str
    serve_argv: tuple[str, ...]
    serve_config_yaml: str
    rule: str
    reason: str  # why there is none, when found is False
    kv_memory_source: str  # "estimate": a measured KV memory belongs to the asked layout only


@dataclass(frozen=True)
class StartupInfo:
    ok: bool
    error: Optional[str]
    error_kind: Optional[str]
    suggested_max_model_len: Optional[int]
    max_fitting_model_len: int
    warnings: tuple[str, ...] = ()
    fits_with: Optional[LayoutFit] = None  # on FAILS: the smallest layout that starts at the asked length
    #: KV memory available for the admission check minus what one max_model_len request needs (V1)
    kv_margin_gib: Optional[float] = None
    #: the estimate's error band (kvplan.memory.borderline), when the KV memory is estimated
    estimate_error_gib: Optional[float] = None
    #: the verdict hangs on the KV margin and the margin is inside the band: it could go either way
    borderline: bool = False
    settle_with: Optional[str] = None


@dataclass(frozen=True)
class CapacityRow:
    max_model_len: int
    max_concurrency: float
    kv_cache_tokens: int
    fits: bool
    replicas_concurrency: float


@dataclass(frozen=True)
class WhatIf:
    change: str
    flags: dict
    ok: bool
    available_kv_cache_gib: float
    kv_cache_tokens: int
    max_concurrency: float
    max_model_len: Optional[int] = None  # the length the row was planned at (a failing plan's fallback)


@dataclass(frozen=True)
class NaiveFormula:
    formula: str
    claimed_bytes: int
    exact_bytes: int
    ratio: float
    why: tuple[str, ...]


@dataclass(frozen=True)
class MultiNode:
    nodes: int
    gpus_per_node: int
    head_command: tuple[str, ...]
    worker_command: tuple[str, ...]
    serve_command: tuple[str, ...]
    note: str


@dataclass(frozen=True)
class Headroom:
    """The one headroom rule (plan's warning and what-ifs, preflight's plan_memory check): vLLM
    fills its budget by design, so what matters is the memory left on the GPU outside it. The peak
    is the non-KV terms and the KV cache inside the budget, the CUDA context where the version does
    not charge it, and CUDA graphs captured after the KV cache was sized (versions that do not
    subtract their estimate). It is enough when it leaves the estimate's error band
    (kvplan.memory.borderline) free: fragmentation, NCCL buffers and other processes live there."""

    total_gib: float
    peak_gib: float  # inside + outside + after
    inside_gib: float  # the budget's non-KV terms and the KV cache
    outside_gib: float  # the CUDA context outside the budget
    after_gib: float  # CUDA graphs captured after the KV cache was sized
    band_gib: float  # the estimate's error band: the least headroom that is enough

    @property
    def left_gib(self) -> float:
        return self.total_gib - self.peak_gib

    @property
    def ok(self) -> bool:
        return self.left_gib >= self.band_gib

    @property
    def fraction(self) -> float:
        return self.peak_gib / self.total_gib if self.total_gib else 0.0


@dataclass(frozen=True)
class DataParallelLaunch:
    """How N replicas start across nodes: vLLM's own multi-node data parallel (one ``vllm serve``
    per node: the head's API servers and engines, ``--headless`` engines on the others) or N
    independent ``vllm serve`` behind an external load balancer."""

    mode: str  # "vllm-multi-node" | "vllm-single-node" | "independent-replicas"
    replicas: int
    nodes: int
    replicas_per_node: int
    gpus_per_replica: int
    commands: tuple[tuple[str, tuple[str, ...]], ...]  # (where, argv)
    note: str


@dataclass(frozen=True)
class PlanResult:
    vllm_semantics: str
    engine: str
    model: ModelInfo
    parallel: ParallelInfo
    flags: ResolvedFlags
    memory: MemoryInfo
    kv: KVInfo
    startup: StartupInfo
    capacity_table: tuple[CapacityRow, ...]
    what_if: tuple[WhatIf, ...]
    naive: Optional[NaiveFormula]
    serve_argv: tuple[str, ...]
    serve_command: str
    serve_config_yaml: str
    multi_node: Optional[MultiNode]
    notes: tuple[str, ...] = ()
    measured: dict = field(default_factory=dict)
    #: whether vLLM starts with ``serve_command`` (False: the renderers never offer it as "run it")
    serve_command_starts: bool = True
    #: the max_model_len the what-if rows were planned at, and whether it is a fallback (the asked one fails)
    what_if_max_model_len: Optional[int] = None
    what_if_at_fallback_length: bool = False
    #: the model's own limit by this vLLM version's rule (max_position_embeddings & co., RoPE scaling)
    derived_max_model_len: Optional[int] = None
    #: the memory left outside vLLM's budget, judged by the one headroom rule (None on CPU)
    headroom: Optional[Headroom] = None
    #: with data parallelism: how the replicas start across nodes (vLLM's multi-node DP by default)
    dp_launch: Optional[DataParallelLaunch] = None
    #: the engine this plan resolves, as the simulator runs it (memory.engine_spec); behaviour, not a
    #: figure: never serialized, never compared
    engine_spec: Optional["EngineSpec"] = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(replace(self, engine_spec=None))
        del d["engine_spec"]
        if d.get("dp_launch") is None:
            d.pop("dp_launch", None)
        for group in d["kv"]["groups"]:
            del group["spec"]  # behaviour, not a figure
        d["schema_version"] = SCHEMA_VERSION
        return d

    @property
    def sizing(self) -> SizingContext:
        """The scheduler numbers the plan sized each request's blocks with (the KV groups'
        admission caps: ``KVCacheSpec.blocks_to_admit``)."""
        f = self.flags
        return SizingContext(f.max_model_len, f.max_num_batched_tokens, f.in_flight_tokens)
