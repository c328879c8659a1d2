"""``simulate(request, trace)``: the plan's KV pool and batch limits, the V1 scheduler
(:mod:`kvplan.sim.engine`) and a step-time profile (:mod:`kvplan.sim.steptime`) -> a
:class:`SimResult`.

The plan's :class:`~kvplan.memory.engine_spec.EngineSpec` gives what vLLM resolves at start-up:
``num_gpu_blocks`` and ``block_size`` (the KV cache), the KV groups (hybrid models),
``max_num_seqs``, ``max_num_batched_tokens`` and ``max_model_len``. Everything the plan does not fix takes vLLM 0.32's default and can be changed:
prefix caching on, ``long_prefill_token_threshold`` 0, watermark 0, async scheduling on.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

from ..errors import PlanDoesNotStart, UsageError
from ..slo import count_good, goodput_limits, judge
from .engine import DONE, Engine
from ..runs.sections import LatencyStats, Throughput
from .result import SimRequests, SimResult, SimThroughput, SimTokens
from .steptime import StepTimeProfile, default_profile
from ..traffic.trace import Trace

if TYPE_CHECKING:  # pragma: no cover
    from ..memory import PlanRequest, PlanResult
    from ..memory.engine_spec import EngineSpec
    from ..slo import Slo

VLLM_SEMANTICS = "vLLM V1 scheduler as in the 0.32.0 source (vllm/v1/core/sched/scheduler.py)"
SAMPLE_CAP = 20_000
MAX_TIMELINE_ROWS = 5_000  # a million-request run keeps a chart-sized timeline


def _groups(engine: "EngineSpec") -> tuple[tuple[str, int, int], ...]:
    """(kind, window, fixed blocks) per KV group, as the result's config reports them (the
    engine counts with the groups' specs themselves)."""
    out = []
    for g in engine.kv_groups:
        if not g.spec.bounded:
            out.append((g.kind, 0, 0))
        else:  # sliding window, chunked local: the window; a recurrent state: 0
            window = getattr(g.spec, "sliding_window", 0) or getattr(g.spec, "attention_chunk_size", 0)
            out.append((g.kind, window, g.blocks_per_request))
    return tuple(out) or (("full", 0, 0),)


def front_end_for(prof, engine_cfg, trace):
    """The API server(s) in front of one engine (:mod:`kvplan.sim.frontend`) with the step model's
    costs for this run's endpoint and the model's chat template, or None when the step model has
    no API-server cost (calibrated profiles: their request_overhead_s covers it)."""
    from .frontend import FrontEnd

    request_s = getattr(prof, "api_request_s", 0.0) or 0.0
    token_s = getattr(prof, "api_prompt_token_s", 0.0) or 0.0
    chunk_s = getattr(prof, "api_chunk_s", 0.0) or 0.0
    if not (request_s or token_s or chunk_s):
        return None
    endpoint = str((getattr(trace, "bench", None) or {}).get("endpoint") or "/v1/completions")
    if "chat" in endpoint:
        request_s += prof.chat_render_s(engine_cfg.model)
    return FrontEnd(count=engine_cfg.api_server_count, request_s=request_s, prompt_token_s=token_s, chunk_s=chunk_s)


def _without_cyclic_gc(fn):
    """``fn`` with Python's cyclic garbage collector paused: a simulation allocates no reference
    cycles, and with a million live requests the collector would re-scan every one of them again
    and again while the engine is built and its result summarised (a second of a million-request
    run; the step loop pauses it too, Engine.advance)."""
    import functools

    @functools.wraps(fn)
    def paused(*args, **kwargs):
        import gc

        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()
    return paused


@_without_cyclic_gc
def simulate(request: "PlanRequest", trace: Trace, *, profile: Optional[StepTimeProfile] = None,
             plan_result: "EngineSpec | PlanResult | None" = None, timeline_interval_s: float = 1.0,
             enable_prefix_caching: Optional[bool] = None, long_prefill_token_threshold: Optional[int] = None,
             watermark: float = 0.0, async_scheduling: Optional[bool] = None, slo: Sequence["Slo"] = (),
             per_request: bool = False, max_steps: Optional[int] = None,
             load_balancer: Optional[str] = None, enable_expert_parallel: Optional[bool] = None,
             spec_acceptance: Optional[float] = None, active_loras: Optional[int] = None,
             ceiling_rps: Optional[float] = None, api_server_count: Optional[int] = None) -> SimResult:
    """Simulate ``trace`` on the plan of ``request``. Raises :class:`PlanDoesNotStart` (a
    :class:`KvplanError`) with vLLM's error text when the configuration would not start. The
    scheduler's flags not passed here are the request's (``--no-enable-prefix-caching``, ...).

    With ``data_parallel_size`` N > 1 every replica is simulated, the trace reaching them through
    ``load_balancer`` (:mod:`kvplan.sim.balancer`; default: the request's ``--load-balancer``, else
    vLLM's own for the plan's version). ``ceiling_rps``: one replica's completion ceiling when known
    (the saturation verdict uses it; else it is measured when the verdict needs it).

    ``plan_result``: the request's resolved engine (:class:`~kvplan.memory.engine_spec.EngineSpec`),
    or the plan result that carries it; None: the request is planned here. The simulation reads
    the engine spec only, never the plan's report."""
    enable_prefix_caching, long_prefill_token_threshold, async_scheduling, enable_expert_parallel = _request_flags(
        request, enable_prefix_caching, long_prefill_token_threshold, async_scheduling, enable_expert_parallel)
    if load_balancer is None:
        from .balancer import parse_balancer

        load_balancer = parse_balancer(request.load_balancer)
    if spec_acceptance is None:
        spec_acceptance = request.spec_acceptance
    if active_loras is None:
        active_loras = request.active_loras
    if api_server_count is None:
        api_server_count = request.api_server_count
    from .engine_config import EngineConfig, engine_spec_of

    spec = engine_spec_of(request, plan_result)
    if not spec.starts:
        raise PlanDoesNotStart(spec.startup_error or "the configuration does not start")
    if not timeline_interval_s > 0:
        raise UsageError("the timeline interval must be positive")
    # the vLLM version's rules for what the flags leave open (async scheduling, admission)
    engine_cfg = EngineConfig.from_spec(spec, async_scheduling=async_scheduling,
                                        expert_parallel=enable_expert_parallel, api_server_count=api_server_count)
    async_scheduling = engine_cfg.async_scheduling
    prof = profile or default_profile(request, spec, async_scheduling=async_scheduling,
                                      expert_parallel=engine_cfg.expert_parallel)
    # LoRA's adapter kernels and speculative decoding's verify/draft steps (sim/serve_flag_costs.py)
    from .serve_flag_costs import speculative_model, with_lora

    prof = speculative_model(with_lora(prof, request, active_loras), request, spec, spec_acceptance)
    dp = max(1, request.data_parallel_size)  # the replicas (a replica's plan does not depend on them)
    groups = _groups(spec)

    make_engine = replica_engine_maker(request, spec, prof, enable_prefix_caching=enable_prefix_caching,
                                       long_prefill_token_threshold=long_prefill_token_threshold,
                                       watermark=watermark, async_scheduling=async_scheduling,
                                       timeline_interval_s=timeline_interval_s, max_steps=max_steps,
                                       reserve_full_prompt=engine_cfg.reserve_full_prompt)

    fleet = None
    if dp > 1:
        from .balancer import rule_for
        from .fleet import FleetView, replica_rows, run_fleet

        rule = rule_for(load_balancer, replicas=dp, vllm_version=_version_of(request),
                        moe=request.model.is_moe, seed=_trace_seed(trace))
        engines = run_fleet(make_engine, trace, rule, dp, prof)
        engine = FleetView(engines)
        fleet = {"replicas": dp, "replicas_simulated": dp, "load_balancer": rule.to_dict(),
                 "mode": ("exact: each replica simulated on its share (the rule depends on the arrival order "
                          "only)" if rule.static else "exact: the replicas simulated together (the rule reads "
                          "their state)"),
                 "per_replica": replica_rows(engines)}
    else:
        # the API server(s) in front of the one engine: ingest per request, output per step (frontend.py)
        engine = make_engine(trace.requests, getattr(trace, "max_concurrency", None),
                             getattr(trace, "warm_prefixes", ()), front_end=front_end_for(prof, engine_cfg, trace))
        engine.run()
    notes = list(getattr(trace, "notes", ()) or ())
    if fleet is not None:
        lb = fleet["load_balancer"]
        notes.append(f"data_parallel_size {dp}: {dp} replicas behind the {lb['name']} load balancer ({lb['text']}; "
                     f"{lb['source']}); {fleet['mode']}")
    if not engine.caching and enable_prefix_caching and not engine.counted:
        notes.append("hybrid KV layout with a Mamba group: prefix caching is not modelled (every prompt is computed "
                     "in full)")
    elif engine.caching and not engine.counted:
        notes.append("hybrid KV layout: prefix caching hits only the prefix every request shares (a system prompt, "
                     "the chat template's head); a conversation's own history is computed again")
    config = {
        "model": spec.model_id, "gpu": spec.gpu.name, "device": spec.device,
        "tensor_parallel_size": spec.tensor_parallel_size,
        "pipeline_parallel_size": spec.pipeline_parallel_size,
        "data_parallel_size": dp, "max_model_len": spec.max_model_len, "max_num_seqs": spec.max_num_seqs,
        "max_num_batched_tokens": spec.max_num_batched_tokens, "block_size": spec.block_size,
        "num_gpu_blocks": spec.num_gpu_blocks, "gpu_memory_utilization": spec.gpu_memory_utilization,
        "kv_cache_dtype": spec.kv_cache_dtype, "dtype": spec.dtype, "enable_prefix_caching": enable_prefix_caching,
        "long_prefill_token_threshold": long_prefill_token_threshold, "watermark": watermark,
        "async_scheduling": async_scheduling, "api_server_count": engine_cfg.api_server_count,
        "kv_groups": [list(g) for g in groups],
        "serve_command": spec.serve_command,
        "load_balancer": fleet["load_balancer"]["name"] if fleet else None,
    }
    result = build_result(engine, trace, config=config, profile=prof, slo=slo, per_request=per_request,
                          notes=tuple(notes), vllm_semantics=spec.semantics.label)
    changes: dict = {"fleet": fleet} if fleet is not None else {}
    if ceiling_rps is not None:
        changes["saturation"] = saturation(engine, trace, ceiling_rps=ceiling_rps * dp)
    elif result.saturation.get("needs_ceiling") and not getattr(trace, "max_concurrency", None):
        # completions fall short of arrivals while no queue forms: over the engines' ceiling, or filling?
        from .saturation import completion_ceiling

        ceiling = completion_ceiling(make_engine, trace.requests, max_num_seqs=spec.max_num_seqs,
                                     kv_tokens=spec.kv_cache_tokens,
                                     front_end=lambda: front_end_for(prof, engine_cfg, trace))
        if ceiling is not None:
            changes["saturation"] = saturation(engine, trace, ceiling_rps=ceiling * dp)
    sat = changes.get("saturation", result.saturation)
    from .saturation import is_finite_benchmark, requests_to_judge_at, steady_state_checks

    if result.checks and not is_finite_benchmark(trace) \
            and not any(c["name"] == "completed_requests" for c in result.checks):
        # tune's rule: an open-loop run meets its SLO only when its backlog is judged bounded (a
        # burst, or a closed loop, has no steady state to judge: its percentiles are the answer)
        reason = sat.get("reason") or ""
        if sat.get("saturated") is None:
            want = requests_to_judge_at(sat.get("offered_rate"), (result.latency_s.get("e2e") or {}).get("p50") or 0.0)
            if want is not None and want > len(trace.requests):
                reason += f"; about {want:,} requests at this rate judge it (--num-requests {want})"
        extra = steady_state_checks(sat.get("saturated"), reason)
        if extra:
            changes["checks"] = result.checks + tuple(
                {"name": c.name, "passed": c.passed, "value": c.value, "limit": c.limit, "reason": c.note}
                for c in extra)
    if changes:
        import dataclasses

        result = dataclasses.replace(result, **changes)
    return result


def replica_engine_maker(request, plan_result, profile, *, enable_prefix_caching: Optional[bool] = None,
                         long_prefill_token_threshold: Optional[int] = None, watermark: float = 0.0,
                         async_scheduling: Optional[bool] = None, timeline_interval_s: float = 1.0,
                         max_steps: Optional[int] = None, reserve_full_prompt: Optional[bool] = None,
                         enable_expert_parallel: Optional[bool] = None, **_ignored):
    """``make_engine(requests, max_concurrency=None, warm=(), front_end=None)``: one replica's engine with the plan's
    KV pool and limits and ``profile``'s step times; what the flags leave open follows the vLLM
    version (:class:`kvplan.sim.engine_config.EngineConfig`); the scheduler's flags not given are
    the request's. ``plan_result``: the request's EngineSpec, or the plan result carrying it."""
    from .engine_config import EngineConfig, engine_spec_of

    spec = engine_spec_of(request, plan_result)
    enable_prefix_caching, long_prefill_token_threshold, async_scheduling, enable_expert_parallel = _request_flags(
        request, enable_prefix_caching, long_prefill_token_threshold, async_scheduling, enable_expert_parallel)
    if async_scheduling is None or reserve_full_prompt is None:
        cfg = EngineConfig.from_spec(spec, async_scheduling=async_scheduling, expert_parallel=enable_expert_parallel)
        async_scheduling = cfg.async_scheduling
        reserve_full_prompt = cfg.reserve_full_prompt if reserve_full_prompt is None else reserve_full_prompt

    def make_engine(requests, max_concurrency=None, warm=(), front_end=None):
        return Engine(requests=requests, num_gpu_blocks=spec.num_gpu_blocks, block_size=spec.block_size,
                      max_num_seqs=spec.max_num_seqs, max_num_batched_tokens=spec.max_num_batched_tokens,
                      max_model_len=spec.max_model_len, profile=profile, groups=spec.kv_groups, sizing=spec.sizing,
                      enable_prefix_caching=enable_prefix_caching,
                      long_prefill_token_threshold=long_prefill_token_threshold, watermark=watermark,
                      async_scheduling=async_scheduling, timeline_interval_s=timeline_interval_s,
                      max_steps=max_steps, max_concurrency=max_concurrency, reserve_full_prompt=reserve_full_prompt,
                      front_end=front_end, warm_prefixes=warm if enable_prefix_caching else ())
    return make_engine


def _request_flags(request, enable_prefix_caching, long_prefill_token_threshold, async_scheduling,
                   enable_expert_parallel) -> tuple:
    """The scheduler's flags not given here, as the request states them (async scheduling may stay
    None: the vLLM version's default, EngineConfig's to decide)."""
    if enable_prefix_caching is None:
        enable_prefix_caching = request.enable_prefix_caching is not False
    if long_prefill_token_threshold is None:
        long_prefill_token_threshold = request.long_prefill_token_threshold or 0
    if async_scheduling is None:
        async_scheduling = request.async_scheduling
    if enable_expert_parallel is None:
        enable_expert_parallel = bool(request.enable_expert_parallel)
    return enable_prefix_caching, long_prefill_token_threshold, async_scheduling, enable_expert_parallel


def _version_of(request) -> tuple:
    from ..memory.semantics import parse_version

    return parse_version(getattr(request, "vllm_version", None))


def _trace_seed(trace) -> int:
    bench = getattr(trace, "bench", None) or {}
    return int(bench.get("seed") or 0)


def build_result(engine: Engine, trace: Trace, *, config: dict, profile: StepTimeProfile, slo: Sequence = (),
                 per_request: bool = False, notes: tuple = (), vllm_semantics: str = "") -> SimResult:
    from .bench_summary import ClientLatencies, bench_summary, request_totals

    reqs = engine.reqs
    # The API server's own latency per request (HTTP, tokenization, detokenization; fitted by
    # `kvplan calibrate` as request_overhead_s) is outside the engine: the client sees it on top
    # of the engine's first token and last token, so it is added to TTFT and E2E, not to TPOT.
    ovh = profile.request_overhead_s
    client = ClientLatencies.of(engine, ovh)
    done, ttft, e2e, tpot = client.done, client.ttft, client.e2e, client.tpot
    total = len(reqs)
    unfinished = total - len(done) - engine.rejected
    totals = request_totals(reqs, done)
    queue, in_tok, out_tok, first, end = totals.queue, totals.prompt_tokens, totals.output_tokens, totals.first, totals.end
    latency = {"ttft": client.stats("ttft"), "tpot": client.stats("tpot"), "itl": client.itl, "e2e": client.stats("e2e"),
               "queue": LatencyStats.of(queue, tail=True)}
    window = (end - first) if end is not None and end > first else None
    failed = total - len(done)
    limits = goodput_limits(slo)
    good = count_good(limits, ((r.t_first - r.arrival + ovh,
                                (r.t_end - r.t_first) / (r.num_output_tokens - 1) if r.num_output_tokens > 1 else None,
                                r.t_end - r.arrival + ovh) for r in done)) if limits else None
    requests = SimRequests(total=total, ok=len(done), completed=len(done), failed=failed, rejected=engine.rejected,
                           unfinished=unfinished, error_rate=round(failed / total, 6) if total else None,
                           preempted_requests=totals.preempted, goodput=good,
                           goodput_ratio=round(good / total, 6) if good is not None and total else None)
    tokens = SimTokens(input_total=in_tok, output_total=out_tok, prompt=in_tok, output=out_tok,
                       prompt_computed=engine.prompt_computed, prefix_cache_hit_tokens=engine.cached_tokens,
                       recomputed=engine.recomputed)
    rate = Throughput.rate
    throughput = SimThroughput(window_s=_r(window), requests_per_s=rate(len(done), window),
                               output_tokens_per_s=rate(out_tok, window), input_tokens_per_s=rate(in_tok, window),
                               total_tokens_per_s=rate(in_tok + out_tok, window),
                               goodput_requests_per_s=rate(good, window) if good is not None else None)
    sat = saturation(engine, trace)
    checks = [{"name": c.name, "passed": c.passed, "value": c.value, "limit": c.limit}
              for c in judge(slo, latency=latency, error_rate=requests.error_rate,
                             goodput_ratio=requests.goodput_ratio)]
    if reqs and not done:
        # Nothing completed: no latency to report, and a run that serves nobody never passes.
        why = ", ".join(f"{k} {v:,}" for k, v in sorted(engine.rejected_reasons.items())) or "none completed"
        checks.append({"name": "completed_requests", "passed": False, "value": 0, "limit": 1,
                       "reason": f"no request completed: {engine.rejected:,} of {len(reqs):,} rejected ({why})"})
    per = None
    if per_request:
        per = tuple({"i": r.i, "arrival": _r(r.arrival), "status": _STATUS[r.status],
                     "prompt_tokens": r.num_prompt_tokens,
                     "output_tokens": r.num_output_tokens, "scheduled": _r(r.t_sched), "first_token": _r(r.t_first),
                     "end": _r(r.t_end), "preemptions": r.preempted, "prefix_hit_tokens": r.hit_tokens,
                     # what the client sees: the engine's times plus the API server's latency
                     "ttft": _r(r.t_first - r.arrival + ovh) if r.status == DONE else None,
                     "e2e": _r(r.t_end - r.arrival + ovh) if r.status == DONE else None}
                    for r in reqs)
    import random as _random

    def cap(xs):
        return [round(x, 6) for x in (xs if len(xs) <= SAMPLE_CAP else _random.Random(0).sample(xs, SAMPLE_CAP))]

    return SimResult(
        meta={"vllm_semantics": vllm_semantics, "simulator": VLLM_SEMANTICS, "clock": clock_of(profile, trace)},
        bench=bench_summary(engine, trace, ovh, client),
        config=config, requests=requests, tokens=tokens, latency_s=latency, throughput=throughput,
        preemptions=engine.preemptions, rejected=engine.rejected,
        rejected_reasons=dict(engine.rejected_reasons),
        kv_cache={"num_gpu_blocks": engine.pool.num_blocks, "usable_blocks": engine.pool.usable,
                  "block_size": engine.block_size, "peak_usage": _r(engine.kv_peak),
                  "prefix_caching": engine.caching},
        engine={"steps": engine.steps, "busy_s": _r(engine.busy_s), "simulated_s": _r(engine.t),
                "max_waiting": engine.max_waiting, "kv_waits": engine.kv_waits, "mean_step_s": _r(engine.busy_s / engine.steps)
                if engine.steps else None, "median_step": median_steps(engine, profile)},
        timeline=_coarsen(engine.timeline, MAX_TIMELINE_ROWS), first_token_order=tuple(engine.first_order), saturation=sat,
        profile=profile.to_dict(), trace=trace.to_dict(), checks=tuple(checks), per_request=per,
        samples={"ttft": cap(ttft), "e2e": cap(e2e), "tpot": cap(tpot)}, notes=notes)


def median_steps(engine: Engine, profile) -> dict:
    """Per phase (``prefill``: steps that compute prompt tokens; ``decode``: decode-only steps), the
    median step's shape, duration and, for the GPU step model, its breakdown by cost term."""
    out = {}
    counts = engine.recorder.counts()
    for phase in ("prefill", "decode"):
        rec = engine.recorder.median_step(phase)
        if rec is None:
            continue
        from .stepmodel import StepFeatures

        dt, f = rec[0], StepFeatures(*rec[1:])
        entry: dict[str, Any] = {"steps": counts[phase], "duration_s": _r(dt, 9), "features": f.to_dict()}
        breakdown = getattr(profile, "breakdown", None)
        if breakdown is not None:
            b = breakdown(f)
            entry["breakdown_s"] = {"gpu": {k: _r(v, 9) for k, v in b["gpu"].items()},
                                    "cpu": {k: _r(v, 9) for k, v in b["cpu"].items()},
                                    "gpu_s": _r(b["gpu_s"], 9), "cpu_s": _r(b["cpu_s"], 9),
                                    "async_scheduling": b["async_scheduling"]}
        out[phase] = entry
    return out


def clock_of(profile, trace=None) -> dict:
    """The step-time model a result stands on: its form, kernel data and measured error (its GPU's
    and, with ``trace``, its traffic regime's: leave-one-source-out on the development set)."""
    d = profile.to_dict()
    clock = d.get("clock")
    if clock:
        validation = dict(clock["validation"])
        if trace is not None:
            from .opmodel import regime_validation

            validation["regimes"] = regime_validation(trace)
        return {"model": clock["model"], "kernel_tables": clock["kernel_tables"],
                "kernel_tables_exact": clock["kernel_tables_exact"],
                "kernels_vllm_version": clock["kernels_vllm_version"], "validation": validation,
                "source": d.get("source")}
    kind = "calibrated profile" if d.get("fit") or d.get("source", "").startswith("calibrat") else "roofline prior"
    return {"model": kind, "kernel_tables": None, "kernel_tables_exact": None, "kernels_vllm_version": None,
            "validation": {"measured": bool(d.get("fit")), "note": "fitted to a measured run" if d.get("fit")
                           else "assumed efficiencies, error unmeasured"}, "source": d.get("source")}


def _coarsen(rows: list, cap: int) -> tuple:
    """At most ``cap`` rows: groups of k consecutive rows become one (the group's last state, its
    mean tokens per second)."""
    if len(rows) <= cap:
        return tuple(rows)
    k = -(-len(rows) // cap)
    out = []
    for i in range(0, len(rows), k):
        grp = rows[i:i + k]
        row = dict(grp[-1])
        row["tokens_per_s"] = round(sum(g["tokens_per_s"] for g in grp) / len(grp), 3)
        out.append(row)
    return tuple(out)


_STATUS = {0: "waiting", 1: "prefill", 2: "decode", 3: "completed", 4: "rejected"}


def _r(x: Optional[float], digits: int = 6) -> Optional[float]:
    return None if x is None else round(x, digits)


def saturation(engine: Engine, trace: Trace, ceiling_rps: Optional[float] = None) -> dict:
    """Is the backlog growing without bound? :func:`kvplan.sim.saturation.verdict` on the run."""
    from .saturation import verdict

    return verdict(engine.reqs, engine.timeline, engine.interval, engine.max_waiting, ceiling_rps=ceiling_rps)


def find_saturation(request: "PlanRequest", make_trace, *, lo: float = 0.1, hi: Optional[float] = None,
                    slo: Sequence["Slo"] = (), profile: Optional[StepTimeProfile] = None,
                    plan_result: "EngineSpec | PlanResult | None" = None, rel_tol: float = 0.02, max_iter: int = 20,
                    load_balancer: Optional[str] = None, **sim_kwargs: Any) -> dict:
    """The highest rate (req/s) the request's replicas sustain within ``slo``: the capacity
    (:func:`kvplan.sim.capacity.find_capacity`: bisection up to the completion ceiling, every probe
    judged). ``make_trace(rate)`` or ``make_trace(rate, n)`` builds the traffic (same seed each
    time; with ``n`` a probe too short to judge is run again on more requests)."""
    from .capacity import find_capacity

    return find_capacity(request, make_trace, slo=slo, profile=profile, plan_result=plan_result,
                         load_balancer=load_balancer, rel_tol=rel_tol, lo=lo, hi=hi, **sim_kwargs)


def capacity_boundary(request: "PlanRequest", make_trace, *, slo: Sequence["Slo"] = (),
                      profile: Optional[StepTimeProfile] = None, **kwargs: Any) -> list[dict]:
    """The plan's capacity ladder extended with the max sustainable QPS at the SLO, one row per
    ``max_model_len`` that starts (each row re-planned at that length)."""
    import dataclasses

    from ..memory import plan

    base = plan(request, what_ifs=False)
    rows = []
    for row in base.capacity_table:
        entry = {"max_model_len": row.max_model_len, "max_concurrency": row.max_concurrency,
                 "kv_cache_tokens": row.kv_cache_tokens, "fits": row.fits, "max_sustainable_qps": None}
        if row.fits:
            req = dataclasses.replace(request, max_model_len=row.max_model_len)
            engine = plan(req, what_ifs=False).engine_spec
            if engine.starts:
                sat = find_saturation(req, make_trace, slo=slo, profile=profile, plan_result=engine, **kwargs)
                entry["max_sustainable_qps"] = sat["max_rate"]
                entry["reason"] = sat["reason"]
                entry["max_num_batched_tokens"] = engine.max_num_batched_tokens
        rows.append(entry)
    return rows
