"""``kvplan simulate`` as a library call: :class:`SimulateOptions` (typed, from any front end's
values) -> :func:`run_simulate` -> the result the command prints and the page shows. The serve
flags become the plan request (:mod:`kvplan.serve_flags`), the traffic flags the trace
(:mod:`kvplan.traffic.flags`); then plan, simulate, and on request the saturation search and the
capacity ladder. The CLI (``kvplan simulate``) and the page (``POST /api/simulate``) both call
this: the page shows the CLI's numbers.

:data:`kvplan.simulate_flags.SIMULATE_FLAGS` are the command's own flags beside the serve and
traffic ones (the CLI's options and the page's argv are read with them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional

from ..errors import PlanDoesNotStart, UsageError
from ..simulate_flags import SIMULATE_FLAGS

if TYPE_CHECKING:  # the run this report holds
    from .result import SimResult

@dataclass(frozen=True)
class SimulateOptions:
    """What ``kvplan simulate`` is asked: the serve flags given (by field), every traffic flag (by
    field, None unless given), and the run's own options, read and checked."""

    serve: Mapping[str, Any] = field(default_factory=dict)
    traffic: Mapping[str, Any] = field(default_factory=dict)
    slo: tuple = ()
    timeline_interval_s: float = 1.0
    profile: Optional[str] = None
    saturation_search: bool = False
    capacity: bool = False
    per_request: bool = False

    @classmethod
    def from_values(cls, serve: Mapping[str, Any], traffic: Mapping[str, Any], own: Mapping[str, Any],
                    *, saturation_curve: bool = False) -> "SimulateOptions":
        """The options of the flags' values (``own``: :data:`SIMULATE_FLAGS`' fields, missing ones at
        their defaults); ``saturation_curve``: search the saturation whatever ``--find-saturation``
        says (the HTML report draws its probes). A malformed value is a UsageError naming its flag."""
        from ..slo import parse_seconds, parse_slo

        v = {f.field: own.get(f.field, f.default) for f in SIMULATE_FLAGS}
        slos = parse_slo(v["slo"])
        step = parse_seconds(v["interval"], "--timeline-interval")
        if not step > 0:
            raise UsageError("--timeline-interval must be positive")
        return cls(serve=dict(serve), traffic=dict(traffic), slo=slos, timeline_interval_s=step,
                   profile=str(v["profile"]) if v["profile"] is not None else None,
                   saturation_search=bool(v["saturation_search"]) or saturation_curve,
                   capacity=bool(v["capacity"]), per_request=bool(v["per_request"]))


@dataclass(frozen=True)
class SimulateReport:
    """``kvplan simulate``'s one result: the simulated run, and the saturation search and capacity
    ladder when asked. :meth:`to_dict` is the command's JSON, which every renderer reads."""

    result: "SimResult"
    saturation_search: Optional[dict] = None
    capacity_boundary: Optional[list] = None
    sizing: Optional[dict] = None  # the replicas the traffic's rate needs (kvplan.sim.capacity.replicas_needed)

    @property
    def passed(self) -> bool:
        return self.result.passed

    def to_dict(self) -> dict:
        d = self.result.to_dict()
        if self.saturation_search is not None:
            d["saturation_search"] = self.saturation_search
        if self.capacity_boundary is not None:
            d["capacity_boundary"] = self.capacity_boundary
        if self.sizing is not None:
            d["sizing"] = self.sizing
        return d


def run_simulate(opts: SimulateOptions) -> SimulateReport:
    """``kvplan simulate``: the simulated run, with the saturation search and the capacity ladder
    when asked. Raises :class:`PlanDoesNotStart` (vLLM's own error, and the smallest layout that
    starts) when the plan fails."""
    from .. import serve_flags as sf
    from ..memory import plan
    from ..memory.layout_fit import layout_fit_text
    from ..traffic.flags import apply_serve_cmd, traffic_maker
    from . import StepTimeProfile, simulate

    traffic = dict(opts.traffic)
    values = dict(opts.serve)
    notes = apply_serve_cmd(traffic.get("from_serve_cmd"), values)
    if not values.get("model") and traffic.get("from_bench_cmd"):
        from ..traffic.bench_cmd import parse_bench_cmd

        values["model"] = parse_bench_cmd(traffic["from_bench_cmd"]).model
    req = sf.request_from_values(values)
    make_trace, _ = traffic_maker(flags=traffic, model_spec=req.model, vllm_version=values.get("vllm_version"),
                                  notes=notes)
    engine = plan(req, what_ifs=False).engine_spec  # what the simulator runs (the plan's result is the report)
    if not engine.starts:
        # the same verdict as `kvplan plan` (FAILS), with the same way out
        fit = layout_fit_text(plan(req, what_ifs=False, fit_search=True))
        raise PlanDoesNotStart(f"the plan does not start (kvplan plan: verdict FAILS): {engine.startup_error}"
                               + (f" {fit}" if fit else ""))
    prof = StepTimeProfile.load(opts.profile) if opts.profile else None

    rate = traffic.get("rate")
    trace = make_trace(rate)
    # the scheduler's flags (prefix caching, long prefills, async scheduling) travel in the request
    result = simulate(req, trace, profile=prof, plan_result=engine, timeline_interval_s=opts.timeline_interval_s,
                      slo=opts.slo, per_request=opts.per_request)
    saturation = ladder = sizing = None
    if opts.saturation_search and (rate is not None or traffic.get("requests") or trace.bench is not None):
        # the capacity of these replicas, and the replicas the traffic's rate needs (the answer tune
        # --gpus auto, preflight and the page give); the HTML's throughput-latency curve is the probes
        from .capacity import Prober, as_workload, find_capacity, replicas_needed, trace_rate

        pb = Prober(req, as_workload(make_trace), slo=opts.slo, profile=prof, plan_result=engine)
        saturation = find_capacity(req, None, prober=pb)
        target = rate if rate is not None and 0 < rate < float("inf") else trace_rate(trace)
        if target:
            sizing = replicas_needed(req, None, target, prober=pb)
    if opts.capacity:
        from . import capacity_boundary

        ladder = capacity_boundary(req, make_trace, slo=opts.slo, profile=prof)
    return SimulateReport(result, saturation, ladder, sizing)
