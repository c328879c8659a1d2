"""``kvplan simulate``'s own flags, declared once beside the serve and traffic flags
(:data:`SIMULATE_FLAGS`: the CLI's options and the page's argv are read with them; what they become
is :class:`kvplan.sim.run.SimulateOptions`).

Only the standard library, and outside :mod:`kvplan.sim` (whose package loads the engine): the CLI
reads this table at start-up, and ``kvplan plan`` must start fast.
"""
from __future__ import annotations

from .flags import Flag

#: ``kvplan simulate``'s own flags (the output's format and files are the CLI's)
SIMULATE_FLAGS: tuple[Flag, ...] = (
    Flag("profile", ("--profile",), str, None,
         "Step-time profile from `kvplan calibrate` (default: roofline prior)."),
    Flag("slo", ("--slo",), str, None, "Gates, e.g. ttft_p99=2s,tpot_p99=100ms."),
    Flag("saturation_search", ("--find-saturation",), bool, False,
         "Also bisect the rate for the max sustainable QPS (at --slo)."),
    Flag("capacity", ("--capacity",), bool, False,
         "Max sustainable QPS at the SLO for each max_model_len of the plan's ladder."),
    Flag("interval", ("--timeline-interval",), str, "1s", "Timeline resolution."),
    Flag("per_request", ("--per-request",), bool, False, "Add every request's times to the JSON."),
)
