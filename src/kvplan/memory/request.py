"""``PlanRequest``: what ``plan()`` is asked, the serve flags as vLLM names them.

Each serve flag a user can give is a row of :data:`kvplan.serve_flags.SERVE_FLAGS` and a field
here of the same name (its module docstring says how to add one)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import UsageError
from ..hardware import Gpu
from ..models.spec import ModelSpec
from .spec_decode import SpeculativeConfig, parse_speculative_config


@dataclass(frozen=True)
class PlanRequest:
    """The serve flags, named as vLLM names them, plus what kvplan needs to know of the GPU."""

    model: ModelSpec
    gpu: Gpu
    device: str = "cuda"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    dtype: str = "auto"
    quantization: Optional[str] = None
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: Optional[float] = None
    max_model_len: Optional[int] = None  # None: derived; -1: auto-fit
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    block_size: Optional[int] = None
    enforce_eager: bool = False
    vllm_version: Optional[str] = None
    kv_cache_memory_bytes: Optional[int] = None  # measured or chosen KV memory per GPU
    kv_cache_memory_per_stage: Optional[tuple[int, ...]] = None  # measured, per pipeline stage
    num_gpu_blocks_override: Optional[int] = None
    gpus_per_node: int = 8
    disable_hybrid_kv_cache_manager: bool = False
    # whether the sampler runs FlashInfer's top-k/top-p: None = the version's default with FlashInfer
    # installed (release images); False = PyTorch-native (e.g. a plain pip install of 0.10-0.11.0;
    # the default itself from 0.11.1 to 0.20)
    flashinfer_sampler: Optional[bool] = None
    # how vLLM was installed: "pip" (the wheel, or a source build) or "docker" (the release image);
    # None: not said, planned as the image. Read only where the version's sampler depends on it
    # (VllmSemantics.flashinfer_sampler_depends_on_install); a stated flashinfer_sampler wins.
    vllm_install: Optional[str] = None
    # the scheduler's flags (None: vLLM's default, which the simulator resolves)
    enable_prefix_caching: Optional[bool] = None
    long_prefill_token_threshold: Optional[int] = None
    async_scheduling: Optional[bool] = None
    enable_expert_parallel: Optional[bool] = None  # MoE experts whole per rank (None: vLLM's default, off)
    api_server_count: Optional[int] = None  # API server processes (None: the version's default)
    # how requests reach the data-parallel replicas (sim/balancer.py; None: vLLM's own for the version)
    load_balancer: Optional[str] = None
    entrypoint: str = "serve"
    engine: Optional[str] = None  # V0/V1 where VLLM_USE_V1 chose (0.7–0.10)
    #: "kv_cache_memory" (vLLM's --kv-cache-memory-bytes: in the serve line), "measured" (kvplan's
    #: --kv-cache-memory: what vLLM measured, planned with, not forced into the serve line) or
    #: "log" (read from a start-up log)
    kv_memory_source: str = "kv_cache_memory"
    measured: Optional[dict] = None
    notes: tuple[str, ...] = ()  # said by whoever built the request (e.g. a log's version fallback)
    # --- serve flags that move memory beyond the KV cache (memory/lora.py, spec_decode.py, offload.py)
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16
    max_cpu_loras: Optional[int] = None  # None: max_loras
    lora_dtype: str = "auto"
    fully_sharded_loras: bool = False
    lora_extra_vocab_size: Optional[int] = None  # None: the version's default (256 up to 0.11)
    # --speculative-config: a SpeculativeConfig, or its JSON text / mapping (parsed here)
    speculative_config: Optional[SpeculativeConfig] = None
    cpu_offload_gb: float = 0.0  # GiB of weights per GPU in pinned CPU memory
    swap_space: Optional[float] = None  # GiB of CPU swap per GPU (V0; default 4)
    enable_chunked_prefill: Optional[bool] = None  # None: the version's default
    host_memory_bytes: Optional[int] = None  # the host's RAM, for the swap-space and offload checks
    # what the simulator needs of these flags' traffic (sim/serve_flag_costs.py; the plan ignores them):
    # vLLM's draft acceptance rate (accepted / drafted) and the LoRA adapters active in a step
    spec_acceptance: Optional[float] = None
    active_loras: Optional[int] = None

    def __post_init__(self) -> None:
        if self.speculative_config is not None and not isinstance(self.speculative_config, SpeculativeConfig):
            object.__setattr__(self, "speculative_config", parse_speculative_config(self.speculative_config))


def validate(req: PlanRequest) -> None:
    """The flag checks vLLM's argument parser makes, as usage errors."""
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpus_per_node"):
        if getattr(req, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    util = req.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise UsageError(f"--gpu-memory-utilization must be in (0, 1], got {util}")
    for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_gpu_blocks_override"):
        value = getattr(req, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if req.max_model_len is not None and req.max_model_len < 1 and req.max_model_len != -1:
        raise UsageError("--max-model-len must be positive, or -1/auto to fit the KV cache")
    if req.enable_lora:
        if req.max_loras < 1:
            raise UsageError("--max-loras must be at least 1")
        if req.max_lora_rank < 1:
            raise UsageError("--max-lora-rank must be at least 1")
        if req.lora_dtype not in ("auto", "float16", "bfloat16"):
            raise UsageError(f"--lora-dtype must be auto, float16 or bfloat16, got {req.lora_dtype!r}")
    if req.cpu_offload_gb < 0:
        raise UsageError(f"--cpu-offload-gb must be at least 0, got {req.cpu_offload_gb}")
    if req.swap_space is not None and req.swap_space < 0:
        raise UsageError(f"--swap-space must be at least 0, got {req.swap_space}")
    layers = req.model.num_layers
    if layers and req.pipeline_parallel_size > layers:
        # vLLM does not check it: get_pp_indices (vllm/distributed/utils.py, read in 0.19.0) gives
        # the last stages no layer (80 layers over PP 81: 1, 1, ..., 1, 0) and the run has no KV cache
        # there to size; kvplan plans at most one stage per layer
        raise UsageError(f"--pipeline-parallel-size {req.pipeline_parallel_size} is more than the model's {layers} "
                         "layers: a pipeline stage would hold no layer (vLLM's get_pp_indices); use at most "
                         f"{layers}")
    if req.device not in ("cuda", "cpu"):
        raise UsageError(f"--device must be cuda or cpu, got {req.device!r}")
