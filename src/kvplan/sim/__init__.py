"""vLLM's V1 scheduler under a traffic trace, and the step-time model that turns its steps into
seconds. See docs/sim.md."""
from .steptime import StepShape, StepTimeProfile, default_profile

__all__ = ["StepShape", "StepTimeProfile", "default_profile"]
