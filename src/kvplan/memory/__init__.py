"""vLLM's memory accounting: budget, KV-cache specs, groups, blocks, admission and capacity."""
from .engine_spec import EngineSpec, engine_spec
from .planner import PlanRequest, plan
from .result import PlanResult
from .semantics import VllmSemantics, semantics

__all__ = ["EngineSpec", "PlanRequest", "PlanResult", "VllmSemantics", "engine_spec", "plan", "semantics"]
