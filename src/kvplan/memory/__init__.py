"""vLLM's memory accounting: budget, KV-cache specs, groups, blocks, admission and capacity."""
from .planner import PlanRequest, plan
from .result import PlanResult
from .semantics import VllmSemantics, semantics

__all__ = ["PlanRequest", "PlanResult", "VllmSemantics", "plan", "semantics"]
