"""vLLM's V1 scheduler under a traffic trace, and the step-time model that turns its steps into
seconds. See docs/sim.md.

Public API::

    from kvplan.sim import (SimRequest, Trace, synthetic_trace, trace_from_log,
                            StepTimeProfile, default_profile, simulate, SimResult,
                            find_saturation, capacity_boundary, PlanDoesNotStart)
"""
from .result import SimResult
from .simulate import PlanDoesNotStart, capacity_boundary, find_saturation, simulate
from .steptime import StepShape, StepTimeProfile, default_profile
from ..traffic.trace import SimRequest, Trace, synthetic_trace


def trace_from_log(*args, **kwargs):
    """:func:`kvplan.traffic.logtrace.trace_from_log` (imported on first use: it reads request logs)."""
    from ..traffic.logtrace import trace_from_log as _impl

    return _impl(*args, **kwargs)


__all__ = ["SimRequest", "Trace", "synthetic_trace", "trace_from_log", "StepShape", "StepTimeProfile",
           "default_profile", "simulate", "SimResult", "find_saturation", "capacity_boundary",
           "PlanDoesNotStart"]
