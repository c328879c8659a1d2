"""The resolved engine configuration the simulator runs: what vLLM settled at start-up (from the
plan: KV pool, batch limits, parallel layout, dtypes) plus the serving options the plan does not
carry (async scheduling, prefix caching, the API server), each resolved once from the flags and
the vLLM version's rules (:class:`kvplan.memory.VllmSemantics`). The step model, the scheduler and
the front end read this object; nothing downstream re-derives a flag from the plan's report."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # pragma: no cover
    from ..hardware import Gpu
    from ..memory import PlanRequest, PlanResult, VllmSemantics
    from ..models.spec import ModelSpec


@dataclass(frozen=True)
class EngineConfig:
    model: "ModelSpec"
    gpu: "Gpu"
    device: str
    semantics: "VllmSemantics"
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    #: GPUs that share a node (CUDA IPC): TP beyond it all-reduces over the network
    gpus_per_node: int
    #: the resolved quantization of the checkpoint / flags (memory.planner's), or None
    quantization: Any
    kv_cache_dtype: str
    enforce_eager: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int
    num_gpu_blocks: int
    async_scheduling: bool
    #: admission needs the whole prompt's blocks free (0.19+), else only this step's chunk
    reserve_full_prompt: bool = True
    #: --enable-expert-parallel: each rank holds whole experts (E / (TP x DP) of them), not a
    #: TP slice of every expert
    expert_parallel: bool = False
    #: API server processes in front of the engine (--api-server-count)
    api_server_count: int = 1

    @property
    def kv_bytes(self) -> float:
        """Bytes per KV element as the attention kernels read it."""
        return 1.0 if self.kv_cache_dtype.startswith("fp8") else 2.0

    @property
    def cuda_graphs(self) -> bool:
        return not self.enforce_eager

    @property
    def tp_across_nodes(self) -> bool:
        return self.tensor_parallel_size > max(1, self.gpus_per_node)

    @classmethod
    def from_plan(cls, request: "PlanRequest", plan_result: "PlanResult", *,
                  async_scheduling: Optional[bool] = None, expert_parallel: bool = False,
                  api_server_count: Optional[int] = None) -> "EngineConfig":
        from ..memory import semantics
        from ..memory.planner import _quantization

        f = plan_result.flags
        sem = semantics(plan_result.vllm_semantics, plan_result.engine)
        tp_across_nodes = request.tensor_parallel_size > max(1, request.gpus_per_node)
        if async_scheduling is None:
            async_scheduling = sem.async_scheduling_by_default(
                device=f.device, pipeline_parallel_size=request.pipeline_parallel_size, multi_node=tp_across_nodes)
        return cls(model=request.model, gpu=request.gpu, device=f.device, semantics=sem,
                   tensor_parallel_size=request.tensor_parallel_size,
                   pipeline_parallel_size=request.pipeline_parallel_size,
                   data_parallel_size=max(1, plan_result.parallel.data_parallel_size),
                   gpus_per_node=request.gpus_per_node, quantization=_quantization(request),
                   kv_cache_dtype=f.kv_cache_dtype, enforce_eager=bool(f.enforce_eager),
                   max_num_seqs=f.max_num_seqs, max_num_batched_tokens=f.max_num_batched_tokens,
                   max_model_len=f.max_model_len, block_size=plan_result.kv.block_size,
                   num_gpu_blocks=plan_result.kv.num_gpu_blocks, async_scheduling=bool(async_scheduling),
                   reserve_full_prompt=sem.reserve_full_prompt_at_admission,
                   expert_parallel=bool(expert_parallel) and request.model.is_moe,
                   api_server_count=api_server_count or sem.api_server_count_default(
                       max(1, plan_result.parallel.data_parallel_size)))
