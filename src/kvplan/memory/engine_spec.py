"""``EngineSpec``: what vLLM settles at start-up for one replica, as the simulator needs it.

The planner resolves a configuration once (resolve -> size -> assemble, :mod:`kvplan.memory.planner`);
this is the part of that resolution an engine runs with: the KV pool (its groups with their specs,
the block size and count), the batch limits, the parallel layout, the dtypes and quantization, and
the version's rules (:class:`~kvplan.memory.semantics.VllmSemantics`). :class:`PlanResult` is the
*report* of a plan, with figures rounded for people; the simulator reads this object instead, so that
nothing downstream re-derives a flag from a report. It rides on ``PlanResult.engine_spec`` (not
serialized: it holds live specs) and :func:`engine_spec` plans a request for it.

Every field is a value the planner already computed for its result, copied, never recomputed: a
simulation of the spec and of the plan it came from cannot disagree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from .kv_specs import SizingContext

if TYPE_CHECKING:  # pragma: no cover
    from ..hardware import Gpu
    from ..models.spec import ModelSpec
    from .request import PlanRequest
    from .result import KVGroupInfo
    from .semantics import VllmSemantics


@dataclass(frozen=True)
class EngineSpec:
    """One replica's engine as vLLM starts it (vLLM's names: ``num_gpu_blocks``, ``max_num_seqs``, ...)."""

    model: "ModelSpec"
    gpu: "Gpu"
    device: str
    #: the version's rules the plan used (``engine`` V0 after an fp8 fall-back included)
    semantics: "VllmSemantics"
    tensor_parallel_size: int
    pipeline_parallel_size: int
    #: replicas of this engine (each its own KV pool): the plan of one does not depend on them
    data_parallel_size: int
    #: GPUs that share a node (CUDA IPC): tensor parallelism beyond it all-reduces over the network
    gpus_per_node: int
    #: the model dtype vLLM runs (``--dtype`` resolved)
    dtype: str
    #: the checkpoint's quantization or the online method asked (``models.spec.Quantization``), or None
    quantization: Any
    kv_cache_dtype: str
    enforce_eager: bool
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    #: tokens scheduled but not yet finished (async scheduling: two batches) - a sliding window keeps them
    in_flight_tokens: int
    block_size: int
    num_gpu_blocks: int
    #: tokens the pool holds (vLLM's "GPU KV cache size: N tokens")
    kv_cache_tokens: int
    #: the KV cache groups, each with its live spec (``KVGroupInfo.spec``): the engine's block accounting
    kv_groups: tuple["KVGroupInfo", ...]
    #: KV bytes one token costs on the busiest GPU (the stage with the most)
    kv_bytes_per_token_per_gpu: int
    #: weight bytes one GPU reads per forward pass (the pipeline stage with the most)
    weights_bytes_per_gpu: int
    #: whether vLLM starts with this configuration, and if not, its error text
    starts: bool
    startup_error: Optional[str]
    #: the ``vllm serve`` command that starts it
    serve_command: str
    #: ``serve`` (an API server in front: HTTP, streaming) or ``offline`` (``LLM(...)``: the
    #: caller's process adds the requests and processes the outputs; no HTTP, nothing streamed)
    entrypoint: str = "serve"

    @property
    def model_id(self) -> str:
        return self.model.name

    @property
    def sizing(self) -> SizingContext:
        """The scheduler numbers the plan sized each request's blocks with (the KV groups' admission
        caps: ``KVCacheSpec.blocks_to_admit``)."""
        return SizingContext(self.max_model_len, self.max_num_batched_tokens, self.in_flight_tokens)


def engine_spec(request: "PlanRequest") -> EngineSpec:
    """Plan ``request`` (without the what-ifs) and return the engine it resolves."""
    from .planner import plan

    return plan(request, what_ifs=False).engine_spec
