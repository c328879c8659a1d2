"""``kvplan tune``: the vLLM configuration that serves a trace within its SLOs on the fewest GPUs.

1. Expand the search space and plan every combination (:mod:`.space`): what vLLM would
   refuse to start is pruned and counted by vLLM's error kind; identical resolved flags run once.
2. Simulate each configuration (:mod:`.execute`: serial, a process pool, or Ray), fewest GPUs
   first, skipping GPU counts that cannot beat the best configuration found. With data
   parallelism the trace is split round-robin over the replicas (each sees rate / DP) and one
   replica is simulated on its share (:mod:`.share`; or all of them, combined).
3. Judge each against the SLOs and rank it (:mod:`.rank`): goodput per GPU (requests/s meeting
   every SLO per GPU) or the fewest GPUs; the Pareto front of output tokens/s per GPU against the
   SLO's latency; the winner's ``vllm serve`` command.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from ..errors import UsageError
from .execute import Runner, choose_backend
from .reuse import can_stand_for, family_key, trace_shares_prefixes
from ..slo import Check, count_good, goodput_limits, judge
from .rank import check_dict, closeness, pareto_front, pareto_latency_key, rank_key
from .share import ShareOutcome, combine_shares, simulate_share
from ..sim.saturation import is_finite_benchmark, requests_to_judge_at, steady_state_checks
from .space import (DEFAULT_LEN_MULTIPLE, OBJECTIVES, Candidate, Pruned, TuneSpace, coverage_info, expand,
                         recommended_max_model_len)

if TYPE_CHECKING:  # pragma: no cover
    from ..memory import PlanRequest
    from ..slo import Slo
    from ..sim.steptime import StepTimeProfile

SCHEMA_VERSION = 1

__all__ = ["TuneSpace", "TuneRow", "TuneResult", "tune", "search", "goodput_per_gpu_bound", "OBJECTIVES"]


@dataclass(frozen=True)
class TuneRow:
    """One simulated configuration with its predicted fleet metrics."""

    rank: int
    label: str
    flags: dict
    gpus: int
    meets_slo: bool
    checks: tuple[Check, ...]
    miss: float  # the worst check's value / limit (≤ 1 meets)
    goodput_requests_per_s: float
    goodput_per_gpu: float
    good_requests: int
    requests: dict  # total, completed, rejected, failed
    throughput: dict  # requests_per_s, output_tokens_per_s, output_tokens_per_s_per_gpu, window_s
    latency_s: dict  # ttft/tpot/itl/e2e → p50 … max, mean
    preemptions: int
    kv: dict  # num_gpu_blocks, kv_cache_tokens, max_concurrency (per replica)
    profile: str
    serve_command: str
    pareto: bool = False
    reused_from: Optional[str] = None  # the simulated configuration whose run stands for this one
    saturated: Optional[bool] = None  # backlog grows without bound (None: the trace is too short to tell)
    saturation_reason: str = ""  # the saturation detector's words for this row

    @property
    def judged(self) -> bool:
        """The saturation detector could decide (a row it could not judge never meets the SLOs)."""
        return self.saturated is not None

    def metric(self, key: str) -> Optional[float]:
        metric, _, stat = key.partition("_")
        return self.latency_s.get(metric, {}).get(stat)

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "label": self.label, "flags": dict(self.flags), "gpus": self.gpus,
                "meets_slo": self.meets_slo, "checks": [check_dict(c) for c in self.checks],
                "miss": None if math.isinf(self.miss) else round(self.miss, 6),
                "goodput": {"requests_per_s": round(self.goodput_requests_per_s, 6),
                            "per_gpu": round(self.goodput_per_gpu, 6), "requests": self.good_requests},
                "requests": dict(self.requests), "throughput": dict(self.throughput),
                "latency_s": {k: dict(v) for k, v in self.latency_s.items()}, "preemptions": self.preemptions,
                "kv": dict(self.kv), "profile": self.profile, "serve_command": self.serve_command,
                "pareto": self.pareto, "reused_from": self.reused_from, "saturated": self.saturated,
                "saturation_reason": self.saturation_reason}


@dataclass(frozen=True)
class TuneResult:
    """Everything ``kvplan tune`` found. ``rows`` are ranked; ``winner`` is the best configuration
    that meets every SLO (None when none does: ``closest`` is then the smallest miss)."""

    objective: str
    slos: tuple[tuple[str, float], ...]
    trace: dict  # source, requests, rate_per_s, duration_s
    space: dict
    workload_max_model_len: int
    combinations: int
    pruned: Pruned
    simulated: int  # configurations whose run was simulated
    reused: int  # configurations ranked on a simulated run that provably stands for theirs
    skipped: int  # not simulated: more GPUs than can beat the winner (see ``tune``)
    rows: tuple[TuneRow, ...]
    pareto_latency: str
    pareto: tuple[int, ...]  # ranks of the rows on the front, by throughput per GPU descending
    backend: dict
    elapsed_s: float
    notes: tuple[str, ...] = ()
    base: dict = field(default_factory=dict)
    #: per GPU of the space: the step-time model its rows stand on and its measured error
    clock: dict = field(default_factory=dict)
    default_max_model_len: Optional[int] = None  # what the space's default length resolved to
    coverage: dict = field(default_factory=dict)  # the lengths the max_model_len holds (coverage_info)

    @property
    def winner(self) -> Optional[TuneRow]:
        return self.rows[0] if self.rows and self.rows[0].meets_slo else None

    @property
    def closest(self) -> Optional[TuneRow]:
        return None if self.winner is not None or not self.rows else self.rows[0]

    @property
    def ok(self) -> bool:
        return self.winner is not None

    def to_dict(self) -> dict[str, Any]:
        w = self.winner
        return {
            "schema_version": SCHEMA_VERSION, "kind": "kvplan.tune", "objective": self.objective,
            "slo": {k: v for k, v in self.slos}, "trace": dict(self.trace), "base": dict(self.base),
            "space": dict(self.space), "workload_max_model_len": self.workload_max_model_len,
            "default_max_model_len": self.default_max_model_len,
            "combinations": self.combinations, "pruned": self.pruned.to_dict(), "simulated": self.simulated,
            "reused": self.reused, "skipped": self.skipped,
            "ok": self.ok, "winner": w.to_dict() if w else None,
            "closest": self.closest.to_dict() if self.closest else None,
            "serve_command": w.serve_command if w else None,
            "pareto": {"x": "output_tokens_per_s_per_gpu", "y": self.pareto_latency, "ranks": list(self.pareto)},
            "ranked": [r.to_dict() for r in self.rows],
            "backend": dict(self.backend), "elapsed_s": round(self.elapsed_s, 3), "notes": list(self.notes),
            "clock": dict(self.clock), "coverage": dict(self.coverage),
            "per_gpu_type": {g: r.to_dict() for g, r in self.per_gpu_type().items()},
        }

    def per_gpu_type(self) -> dict[str, TuneRow]:
        """The best row of each GPU type (meeting the SLOs when one does, else its closest)."""
        out: dict[str, TuneRow] = {}
        for r in self.rows:  # ranked
            g = r.flags["gpu"]
            if g not in out or (r.meets_slo and not out[g].meets_slo):
                out[g] = r
        return out


MAX_DERIVED_REQUESTS = 20_000  # the longest trace a derived length grows to (simulation cost)


def tune(base: "PlanRequest", trace, slos: Sequence["Slo"], *, space: TuneSpace = TuneSpace(),
         objective: str = "goodput_per_gpu", processes: Optional[int] = None, ray_address: Optional[str] = None,
         profile: Optional["StepTimeProfile"] = None, all_replicas: bool = False,
         exhaustive: bool = False, reuse: bool = True,
         extend_trace: Optional[Callable[[int], Any]] = None, judge_saturation: bool = True,
         load_balancer: Optional[str] = None) -> TuneResult:
    """Search ``space`` for the best configuration on ``trace`` (see :func:`search`).

    A row the saturation detector could not judge (the trace ends while the engine still fills)
    never meets the SLOs: its percentiles may be optimistic. With ``extend_trace`` (``n`` ->
    the same traffic with ``n`` requests; the CLI passes it when the user did not choose the
    length) the length is derived from the configurations instead: while some unjudged row would
    otherwise meet the SLOs and rank above the winner, the whole search runs again on a trace whose
    arrivals span :data:`kvplan.sim.saturation.JUDGE_E2E_SPANS` times the slowest such row's median E2E (at least twice
    as many requests, rounded up to its :data:`~kvplan.sim.saturation.DERIVED_ROUND`, at most :data:`MAX_DERIVED_REQUESTS`).
    Every row of the result comes from the same (last) trace.

    ``judge_saturation=False`` (API only; the CLI never turns it off) ranks on the trace's
    percentiles alone, for a finite burst that has no rate to carry."""
    if judge_saturation and is_finite_benchmark(trace):
        # vLLM bench's burst (--request-rate inf) or closed loop (--max-concurrency): the trace IS the
        # benchmark, with no open-loop rate whose backlog could grow; rank on its own percentiles.
        judge_saturation = False
    kwargs = dict(space=space, objective=objective, processes=processes, ray_address=ray_address, profile=profile,
                  all_replicas=all_replicas, exhaustive=exhaustive, reuse=reuse, judge_saturation=judge_saturation,
                  load_balancer=load_balancer)
    t0 = time.perf_counter()
    result = search(base, trace, slos, **kwargs)
    rounds: list[dict] = []
    while extend_trace is not None:
        blocking = unjudged_contenders(result)
        n = len(trace.requests)
        want = requests_to_judge(trace, blocking)
        if not blocking or want is None or n >= MAX_DERIVED_REQUESTS:
            break
        new_n = min(MAX_DERIVED_REQUESTS, max(want, 2 * n))
        rounds.append({"requests": n, "unjudged": len(blocking),
                       "median_e2e_s": round(max(r.metric("e2e_p50") or 0.0 for r in blocking), 3),
                       "arrival_span_s": round(_span(trace), 3), "extended_to": new_n})
        trace = extend_trace(new_n)
        result = search(base, trace, slos, **kwargs)
    return _with_length_notes(result, trace, rounds, derived=extend_trace is not None,
                              elapsed=time.perf_counter() - t0)


def unjudged_contenders(result: TuneResult) -> list[TuneRow]:
    """Rows the detector could not judge that would otherwise meet every SLO and rank above the
    winner (or there is none): a longer trace could change the answer."""
    w = result.winner
    out = []
    for r in result.rows:
        if r.judged or any(not c.passed for c in r.checks if c.name != "saturation_judged"):
            continue
        if w is None or _would_rank_above(r, w, result):
            out.append(r)
    return out


def _would_rank_above(r: TuneRow, w: TuneRow, result: TuneResult) -> bool:
    lat_r, lat_w = r.metric(result.pareto_latency), w.metric(result.pareto_latency)
    def key(row, lat):
        return rank_key(result.objective, True, row.goodput_per_gpu, lat, row.gpus, 0.0, 0)[:-1]
    return key(r, lat_r) <= key(w, lat_w)


def requests_to_judge(trace, rows: Sequence[TuneRow]) -> Optional[int]:
    """Requests at the trace's rate whose arrivals span :data:`JUDGE_E2E_SPANS` × the slowest
    row's median E2E, rounded up to :data:`DERIVED_ROUND` (None: no rate or no E2E to go by)."""
    span = _span(trace)
    rate = (len(trace.requests) - 1) / span if span > 0 else None
    e2e = max((r.metric("e2e_p50") or 0.0 for r in rows), default=0.0)
    return requests_to_judge_at(rate, e2e)


def _span(trace) -> float:
    reqs = trace.requests
    return reqs[-1].arrival_s - reqs[0].arrival_s if len(reqs) > 1 else 0.0


def _with_length_notes(result: TuneResult, trace, rounds: list[dict], *, derived: bool,
                       elapsed: float) -> TuneResult:
    notes = list(result.notes)
    info = dict(result.trace, length="derived" if derived else "given", extended=rounds)
    if is_finite_benchmark(trace):
        notes.append("a vLLM-bench burst or closed loop (--request-rate inf / --max-concurrency): the trace is the "
                     "whole benchmark, ranked on its own percentiles (no open-loop rate to saturate)")
    for rd in rounds:
        notes.append(f"trace length derived: {rd['requests']:,} requests ({rd['arrival_span_s']:.0f} s of arrivals) "
                     f"could not judge {rd['unjudged']} contending configuration(s) (median E2E up to "
                     f"{rd['median_e2e_s']:.1f} s); ran again on {rd['extended_to']:,} requests")
    unjudged = [r for r in result.rows if any(c.name == "saturation_judged" for c in r.checks)]
    if unjudged:
        contenders = unjudged_contenders(result)
        want = requests_to_judge(trace, contenders or unjudged)
        hint = (f"--num-requests {want}" if want else "a longer trace (--num-requests / --duration)")
        why = unjudged[0].saturation_reason or "the trace ends while the engine is still filling"
        ranks = ", ".join(f"#{r.rank}" for r in unjudged[:8]) + (" …" if len(unjudged) > 8 else "")
        if derived and len(trace.requests) >= MAX_DERIVED_REQUESTS and contenders:
            tail = f"the derived length stops at {MAX_DERIVED_REQUESTS:,} requests"
        else:
            tail = f"rerun with {hint} to judge them"
        notes = [n for n in notes if "could not be judged for saturation" not in n]
        notes.append(f"{len(unjudged)} configuration(s) could not be judged for saturation ({ranks}) and cannot "
                     f"win: {why}; {tail}")
    return replace(result, trace=info, notes=tuple(notes), elapsed_s=elapsed)


def search(base: "PlanRequest", trace, slos: Sequence["Slo"], *, space: TuneSpace = TuneSpace(),
           objective: str = "goodput_per_gpu", processes: Optional[int] = None, ray_address: Optional[str] = None,
           profile: Optional["StepTimeProfile"] = None, all_replicas: bool = False,
           exhaustive: bool = False, reuse: bool = True, judge_saturation: bool = True,
           load_balancer: Optional[str] = None) -> TuneResult:
    """Search ``space`` around ``base`` for the configuration that serves ``trace`` best under
    ``slos``.

    ``profile`` (a calibrated step-time profile) is used for the configurations on the base's GPU
    and tensor-parallel size, where it was measured; the others use the roofline prior of their
    GPU, and each row names its profile. With data parallelism one replica (requests 0, DP, 2·DP, …
    of the trace) is simulated and its throughput scaled by DP; ``all_replicas`` simulates every
    replica (DP times the work) for percentiles over the whole trace.

    Configurations are simulated by GPU count, fewest first. Unless ``exhaustive``, a GPU count is
    skipped when it cannot beat the best configuration already meeting the SLOs: with more GPUs
    (``min_gpus``), or a goodput per GPU that cannot reach the best's even if every request were
    good (requests / arrival span / GPUs: goodput never exceeds the offered rate). The winner is
    the same either way; the skipped ones are counted, not ranked.

    With ``reuse`` (the default), a configuration that differs from a simulated one only in limits
    that run never reached (more ``max_num_seqs``, more KV blocks; :mod:`.reuse` has the exact
    rule) takes that run instead of repeating it, and its row names it (``reused_from``)."""
    if objective not in OBJECTIVES:
        raise UsageError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if not trace.requests:
        raise UsageError("the trace has no requests to simulate")
    t0 = time.perf_counter()
    space.validate()
    backend = choose_backend(processes, ray_address, 1 << 30)
    lat_key = pareto_latency_key(slos)
    limits = goodput_limits(slos)
    rows: list[tuple[TuneRow, tuple]] = []
    skipped = n_reused = 0
    prefixes = trace_shares_prefixes(trace)
    max_prompt = max(r.prompt_tokens for r in trace.requests)
    with Runner(backend, {"trace": trace, "load_balancer": load_balancer}) as runner:
        cands, pruned, floor = expand(base, space, trace, plan_all=runner.map)
        for gpus in sorted({c.gpus for c in cands}):
            level = [c for c in cands if c.gpus == gpus]
            # each GPU type is answered on its own ("how many A100s" even when an H100 count wins)
            best_of = {}
            for r, _ in sorted(rows, key=lambda x: x[1]):
                if r.meets_slo:
                    best_of.setdefault(r.flags["gpu"], r)
            if best_of and not exhaustive:
                level_kept = [c for c in level if c.plan.flags.gpu not in best_of
                              or not _cannot_win(c, best_of[c.plan.flags.gpu], objective, trace, all_replicas)]
                skipped += len(level) - len(level_kept)
                level = level_kept
            outcomes, reused = _simulate_level(runner, level, base, profile, all_replicas, reuse and not prefixes,
                                               max_prompt, judge_saturation)
            rows.extend(_row(c, outcomes[c.index], slos, limits, lat_key, objective,
                             reused[c.index].label() if c.index in reused else None, judge_saturation)
                        for c in level)
            n_reused += len(reused)
    combos = pruned.total + pruned.duplicates + len(cands)
    rows.sort(key=lambda x: x[1])
    ranked = [r for r, _ in rows]
    points = [(r.throughput["output_tokens_per_s_per_gpu"], _nan(r.metric(lat_key))) for r in ranked]
    on_front = set(pareto_front(points))
    ranked = [replace(r, rank=i + 1, pareto=i in on_front) for i, r in enumerate(ranked)]
    front = sorted(on_front, key=lambda i: (-points[i][0], points[i][1]))
    notes: list[str] = []
    default_len = recommended_max_model_len(floor, base) if None in space.max_model_len else None
    cov = coverage_info(trace, space.coverage_pct, base)
    if cov["capped_at_model_limit"]:
        notes.append(f"coverage: the traffic's P{cov['percentile']:g} prompt + output is {cov['need_tokens']:,} tokens, "
                     f"above the model's limit of {cov['model_limit']:,}: max_model_len is held at the limit, which "
                     f"covers {cov['covered_pct']:g}% of the {cov['requests']:,} requests ({cov['longer']:,} longer, "
                     "rejected by vLLM as they would be; --slo error_rate=... gates them)")
    elif space.coverage_pct is not None:
        notes.append(f"coverage: max_model_len holds the traffic's P{cov['percentile']:g} prompt + output "
                     f"({cov['need_tokens']:,} tokens; {cov['longer']:,} of {cov['requests']:,} requests are longer)")
    if default_len is not None:
        notes.append(f"max_model_len: the traffic needs {floor:,} tokens (prompt + output); the default tried is "
                     f"{default_len:,} (rounded up to a multiple of {DEFAULT_LEN_MULTIPLE:,}, within the model's limit)")
    if n_reused:
        notes.append(f"{n_reused} configuration(s) took the run of a simulated one that differs only in "
                     "max_num_seqs / KV blocks the traffic never reached (reused_from; --no-reuse simulates them)")
    if skipped:
        notes.append(f"{skipped} configuration(s) with more GPUs were not simulated: they cannot beat the winner "
                     f"on {objective} (--exhaustive simulates them; the Pareto front is over the simulated ones)")
    if profile is not None:
        n = sum(1 for c in cands if not _profiled(c, base, profile))
        if n:
            notes.append(f"{n} configuration(s) differ from the profiled GPU/TP ({base.gpu.name} TP"
                         f"{base.tensor_parallel_size}) and use their GPU's roofline prior instead")
    if not cands:
        notes.append("no configuration of the space starts under vLLM's rules: nothing was simulated")
    if base.kv_cache_memory_bytes is not None and any(c.request.kv_cache_memory_bytes is None for c in cands):
        notes.append("the given KV memory applies to the base GPU, TP and utilization only; other "
                     "configurations use kvplan's memory estimate")
    n_sat = sum(1 for r in ranked if r.saturated)
    if n_sat:
        notes.append(f"{n_sat} configuration(s) cannot carry the rate: their backlog grows without bound "
                     "(check not_saturated), whatever this trace's percentiles say")
    if any(r.flags["data_parallel_size"] > 1 for r in ranked):
        from ..sim.balancer import rule_for
        from ..sim.simulate import _version_of

        rule = rule_for(load_balancer, replicas=2, vllm_version=_version_of(base), moe=base.model.is_moe)
        how = ("one replica simulated on its share (the replicas are alike), throughput × DP; percentiles are "
               "that replica's" if rule.static and not all_replicas else "every replica simulated")
        if not rule.static:
            how = "the replicas simulated together (the balancer reads their state)"
        notes.append(f"data parallel: load balancer {rule.balancer} ({rule.text}; {rule.source}); {how}")
    return TuneResult(
        objective=objective, slos=tuple((s.key, s.limit) for s in slos), trace=_trace_info(trace),
        space=space.to_dict(), workload_max_model_len=floor, combinations=combos, pruned=pruned,
        simulated=len(ranked) - n_reused, reused=n_reused, skipped=skipped, rows=tuple(ranked),
        pareto_latency=lat_key,
        pareto=tuple(i + 1 for i in front),
        backend={**backend.to_dict(), "all_replicas": all_replicas, "exhaustive": exhaustive, "reuse": reuse},
        elapsed_s=time.perf_counter() - t0, notes=tuple(notes),
        base={"model": base.model.name, "gpu": base.gpu.name}, default_max_model_len=default_len,
        clock=_clocks(cands, base, profile), coverage=cov,
    )


def _clocks(cands, base, profile) -> dict:
    from ..sim.opmodel import clock_for_gpu

    out = {}
    for c in cands:
        g = c.request.gpu
        if g.name in out or c.request.device == "cpu":
            continue
        if profile is not None and g.name == base.gpu.name:
            out[g.name] = {"model": "calibrated profile", "source": profile.source}
        else:
            out[g.name] = clock_for_gpu(g)
    return out


def _simulate_level(runner: Runner, level: list[Candidate], base, profile, all_replicas: bool, reuse: bool,
                    max_prompt: int, judge_saturation: bool = True,
                    ) -> tuple[dict[int, list[ShareOutcome]], dict[int, Candidate]]:
    """Simulate one GPU count's configurations. With ``reuse``, in rounds: each family's smallest
    unresolved member (fewest sequences, then blocks) is simulated, then every member its run stands
    for takes that run. Returns the runs by candidate index, and which candidates took another's."""
    def run(cands: list[Candidate]) -> dict[int, list[ShareOutcome]]:
        tasks = []
        for c in cands:
            prof = profile if _profiled(c, base, profile) else None
            for k in range(c.data_parallel_size if all_replicas else 1):
                tasks.append((c.index, c.request, c.plan, prof, c.data_parallel_size, k))
        out: dict[int, list[ShareOutcome]] = {}
        for (idx, *_), res in zip(tasks, runner.map(simulate_share, tasks)):
            out.setdefault(idx, []).append(res)
        return out

    families: dict[tuple, list[Candidate]] = {}
    singles: list[Candidate] = []
    for c in level:
        key = family_key(c, _profiled(c, base, profile)) if reuse else None
        if key is None:
            singles.append(c)
        else:
            families.setdefault(key, []).append(c)
    pending = [sorted(m, key=lambda c: (c.plan.flags.max_num_seqs, c.plan.kv.usable_blocks, c.index))
               for m in families.values()]
    outcomes: dict[int, list[ShareOutcome]] = {}
    reused: dict[int, Candidate] = {}
    batch = singles  # the first round also runs the configurations outside any family
    while pending or batch:
        outcomes.update(run(batch + [m[0] for m in pending]))
        batch = []
        nxt = []
        for src, *rest in pending:
            left = []
            for c in rest:
                if can_stand_for(src, outcomes[src.index], c, max_prompt, judge_saturation):
                    outcomes[c.index] = outcomes[src.index]
                    reused[c.index] = src
                else:
                    left.append(c)
            if left:
                nxt.append(left)
        pending = nxt
    return outcomes, reused


def _cannot_win(c: Candidate, best: TuneRow, objective: str, trace, all_replicas: bool) -> bool:
    """True when ``c`` ranks below ``best`` whatever its simulation would say (strictly: ties run)."""
    if objective == "min_gpus":
        return c.gpus > best.gpus
    return goodput_per_gpu_bound(trace, c.data_parallel_size, c.gpus, all_replicas) < best.goodput_per_gpu


def goodput_per_gpu_bound(trace, dp: int, gpus: int, all_replicas: bool = False) -> float:
    """The most goodput per GPU a configuration could reach on ``trace``: every request good, the
    run's window no longer than the arrivals' span (it is longer: the last request still has to be
    served). For one simulated replica, its share's requests over its share's span, times DP."""
    reqs = trace.requests
    share = reqs if all_replicas or dp == 1 else reqs[::dp]
    span = share[-1].arrival_s - share[0].arrival_s if len(share) > 1 else 0.0
    if span <= 0:
        return math.inf
    return len(share) / span * (1 if all_replicas or dp == 1 else dp) / gpus


def _nan(x: Optional[float]) -> float:
    return math.nan if x is None else x


def _profiled(c: Candidate, base: "PlanRequest", profile: Optional["StepTimeProfile"]) -> bool:
    """A calibrated profile describes the base's GPU at the base's TP: only those configurations use it."""
    return (profile is not None and c.request.gpu.name == base.gpu.name
            and c.request.tensor_parallel_size == base.tensor_parallel_size)


def _trace_info(trace) -> dict[str, Any]:
    reqs = trace.requests
    span = reqs[-1].arrival_s - reqs[0].arrival_s if len(reqs) > 1 else 0.0
    return {"source": trace.source, "requests": len(reqs), "duration_s": round(span, 6),
            "rate_per_s": round((len(reqs) - 1) / span, 6) if span > 0 else None}


def _row(c: Candidate, shares: list[ShareOutcome], slos, limits, lat_key: str,
         objective: str, reused_from: Optional[str] = None, judge_saturation: bool = True) -> tuple[TuneRow, tuple]:
    fleet = combine_shares(shares)
    good = count_good(limits, zip(fleet.ttft, fleet.tpot, fleet.e2e))
    total = fleet.total
    window = fleet.window_s
    # Replicas not simulated are alike the simulated ones: throughput scales with the replicas.
    scale = c.data_parallel_size / max(1, sum(s.replicas for s in shares))
    goodput = good / window * scale if window > 0 else 0.0
    error_rate = fleet.failed / total if total else None
    checks = judge(slos, latency=fleet.latency, error_rate=error_rate, goodput_ratio=good / total if total else None)
    if judge_saturation:
        # simulate's rule too: a saturated or unjudged row cannot meet the SLOs (tune() derives a
        # longer trace for an unjudged contender, or the notes say which to use)
        checks = checks + steady_state_checks(fleet.saturated)
    meets = all(ch.passed for ch in checks)
    miss = closeness(checks)
    gpus = c.gpus
    rps = fleet.completed / window * scale if window > 0 else 0.0
    otps = fleet.output_tokens / window * scale if window > 0 else 0.0
    row = TuneRow(
        rank=0, label=c.label(), flags=c.flags(), gpus=gpus, meets_slo=meets, checks=checks, miss=miss,
        goodput_requests_per_s=goodput, goodput_per_gpu=goodput / gpus, good_requests=good,
        requests={"total": total, "completed": fleet.completed, "rejected": fleet.rejected, "failed": fleet.failed,
                  "replicas_simulated": sum(s.replicas for s in shares), "replicas": c.data_parallel_size},
        throughput={"requests_per_s": round(rps, 6), "output_tokens_per_s": round(otps, 3),
                    "output_tokens_per_s_per_gpu": round(otps / gpus, 3), "window_s": round(window, 6)},
        latency_s=fleet.latency, preemptions=fleet.preemptions,
        kv={"num_gpu_blocks": c.plan.kv.num_gpu_blocks, "kv_cache_tokens": c.plan.kv.kv_cache_tokens,
            "max_concurrency": c.plan.kv.max_concurrency},
        profile=shares[0].profile, serve_command=c.plan.serve_command, reused_from=reused_from,
        saturated=fleet.saturated, saturation_reason=fleet.saturation_reason,
    )
    lat = row.metric(lat_key)
    return row, rank_key(objective, meets, row.goodput_per_gpu, lat, gpus, miss, c.index)
