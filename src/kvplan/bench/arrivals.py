"""Re-export: the arrival schedules live in :mod:`kvplan.workload.arrivals` (the simulator uses
them too, and ``kvplan.sim`` must not import ``kvplan.bench``)."""
from ..workload.arrivals import _warp, rate_schedule, replay_schedule, unit_gaps

__all__ = ["rate_schedule", "replay_schedule", "unit_gaps", "_warp"]
