"""The resolved engine configuration the simulator runs: the engine vLLM settles at start-up (the
planner's :class:`~kvplan.memory.engine_spec.EngineSpec`: KV pool, batch limits, parallel layout,
dtypes, the version's rules) plus the serving options the plan does not carry (async scheduling,
expert parallelism, the API server), each resolved once from the flags and the vLLM version's rules
(:class:`kvplan.memory.VllmSemantics`). The step model, the scheduler and the front end read this
object; nothing downstream re-derives a flag from the plan's report."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Optional

from ..memory.engine_spec import EngineSpec

if TYPE_CHECKING:  # pragma: no cover
    from ..memory import PlanRequest, PlanResult


@dataclass(frozen=True)
class EngineConfig(EngineSpec):
    """An :class:`EngineSpec` (``data_parallel_size`` at least 1) and the options the simulator settles."""

    async_scheduling: bool = True
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
    def from_spec(cls, spec: EngineSpec, *, async_scheduling: Optional[bool] = None,
                  expert_parallel: bool = False, api_server_count: Optional[int] = None) -> "EngineConfig":
        """The engine ``spec`` resolves, with the serving options the plan leaves open: given, else
        the vLLM version's default for this layout."""
        sem = spec.semantics
        data_parallel_size = max(1, spec.data_parallel_size)
        tp_across_nodes = spec.tensor_parallel_size > max(1, spec.gpus_per_node)
        if async_scheduling is None:
            async_scheduling = sem.async_scheduling_by_default(
                device=spec.device, pipeline_parallel_size=spec.pipeline_parallel_size, multi_node=tp_across_nodes)
        resolved = {f.name: getattr(spec, f.name) for f in fields(EngineSpec)}
        return cls(**resolved | {"data_parallel_size": data_parallel_size}, async_scheduling=bool(async_scheduling),
                   reserve_full_prompt=sem.reserve_full_prompt_at_admission,
                   expert_parallel=bool(expert_parallel) and spec.model.is_moe,
                   api_server_count=api_server_count or sem.api_server_count_default(data_parallel_size))


def engine_spec_of(request: "PlanRequest", plan: "EngineSpec | PlanResult | None" = None) -> EngineSpec:
    """The resolved engine of ``request``: ``plan`` itself when it is one, the one a plan result
    carries, else ``request`` planned now (without the what-ifs). Callers may keep passing the
    plan's result; the simulator reads only the :class:`~kvplan.memory.engine_spec.EngineSpec`."""
    from ..memory.engine_spec import engine_spec

    if plan is None:
        return engine_spec(request)
    if isinstance(plan, EngineSpec):
        return plan
    return plan.engine_spec
