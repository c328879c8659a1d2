"""vLLM's V1 scheduler under a traffic trace, and the step-time model that turns its steps into
seconds. See docs/sim.md.

Public API::

    from kvplan.sim import (SimRequest, Trace, synthetic_trace, trace_from_log,
                            StepTimeProfile, default_profile, simulate, SimResult,
                            find_saturation, capacity_boundary, PlanDoesNotStart)

Attributes are imported on first use, so ``import kvplan.sim.run`` (the CLI reads its table of
flags at start-up) costs nothing on the ``kvplan plan`` path: the engine loads when it runs.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "SimResult": ".result",
    "simulate": ".simulate", "find_saturation": ".simulate", "capacity_boundary": ".simulate",
    "StepShape": ".steptime", "StepTimeProfile": ".steptime", "default_profile": ".steptime",
    "SimRequest": "..traffic.trace", "Trace": "..traffic.trace", "synthetic_trace": "..traffic.trace",
    "trace_from_log": "..traffic.logtrace",
    "PlanDoesNotStart": "..errors",
}

__all__ = ["SimRequest", "Trace", "synthetic_trace", "trace_from_log", "StepShape", "StepTimeProfile",
           "default_profile", "simulate", "SimResult", "find_saturation", "capacity_boundary",
           "PlanDoesNotStart"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvplan.sim' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value
