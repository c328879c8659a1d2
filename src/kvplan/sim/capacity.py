"""Capacity: the highest request rate a configuration sustains within its SLO, and the replicas a
target rate needs - the one answer ``simulate --find-saturation``, ``tune``, ``preflight`` and the
page's sizing view all give.

**The ceiling.** What one replica completes per second at overload (a burst of the traffic's
requests; :func:`kvplan.sim.saturation.completion_ceiling`). N replicas never complete more than
N ceilings, whatever the balancer, so no rate above that is sustainable, and a target rate needs at
least ``target / ceiling`` replicas.

**A probe.** The traffic at a rate (arrivals scaled from one master trace: the same requests, the
same seed, so probes differ only in the rate), every replica simulated behind the load balancer
(:mod:`kvplan.sim.fleet`; with a rule that depends on the arrival order only, one replica's share
stands for all of them by symmetry), judged by the saturation verdict with the ceiling known. It
passes when the run is judged bounded and meets every SLO. A run too short to judge is run again
on twice the requests (up to ``max_requests``); still unjudged, it fails, and the answer says it
is a lower bound.

**Capacity** is the highest passing rate, by bisection between 0 and the fleet's ceiling; its
``noise`` is the bisection's resolution or the saturation test's (3 / sqrt(arrivals in the
settled window) of the last passing probe), whichever is larger. **Replicas needed** for a target
rate: the fewest N, from ``target / ceiling`` up, whose fleet passes at that rate.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional, Sequence

from ..traffic.trace import SimRequest, Trace

#: requests per probe: at least this many; doubled while the verdict cannot judge, up to max_requests
MIN_REQUESTS = 1000
MAX_REQUESTS = 4_000
#: the most requests one probe simulates, whatever the replicas (memory: about 1 kB per request)
PROBE_REQUEST_CAP = 200_000


class Workload:
    """The traffic at any rate and length: ``make(rate, n)`` -> a :class:`Trace` of ``n`` requests
    (``n`` None: its own length). Traces are drawn once per length at ``base_rate`` and their
    arrivals scaled to each rate (every arrival law kvplan draws is a unit-rate schedule divided by
    the rate, so this is the trace ``make`` would draw, to the float)."""

    def __init__(self, make: Callable[..., Trace], *, base_rate: float = 1.0, resizable: bool = True):
        self._make = make
        self.base_rate = base_rate
        self.resizable = resizable
        self._masters: dict[Optional[int], Trace] = {}

    def default_length(self) -> int:
        return len(self._master(None).requests)

    def _master(self, n: Optional[int]) -> Trace:
        if not self.resizable:
            n = None
        if n not in self._masters:
            self._masters[n] = self._make(self.base_rate, n) if self.resizable else self._make(self.base_rate)
        return self._masters[n]

    def trace(self, rate: float, n: Optional[int] = None) -> Trace:
        master = self._master(n)
        k = self.base_rate / rate
        reqs = tuple(dataclasses.replace(r, arrival_s=r.arrival_s * k) for r in master.requests)
        return dataclasses.replace(master, requests=reqs)

    def requests(self, n: Optional[int] = None) -> Sequence[SimRequest]:
        return self._master(n).requests

    def lengths(self) -> Sequence[SimRequest]:
        """The traffic's requests once (their lengths): the ceiling's burst and the cost's mean."""
        return self._master(MIN_REQUESTS if self.resizable else None).requests


def as_workload(make_trace) -> Workload:
    """A :class:`Workload` from ``make_trace(rate)`` or ``make_trace(rate, n)``."""
    if isinstance(make_trace, Workload):
        return make_trace
    import inspect

    try:
        params = inspect.signature(make_trace).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins
        params = {}
    return Workload(make_trace, resizable=len(params) >= 2)


class Prober:
    """Simulations of one configuration (a replica's plan, its step model, a balancer) on one
    workload, cached by (replicas, rate, requests)."""

    def __init__(self, request, workload: Workload, *, slo=(), profile=None, plan_result=None,
                 load_balancer: Optional[str] = None, max_requests: int = MAX_REQUESTS,
                 min_requests: int = MIN_REQUESTS, **sim_kwargs: Any):
        from .engine_config import EngineConfig, engine_spec_of
        from .steptime import default_profile

        self.request = request
        self.workload = workload
        self.slo = tuple(slo)
        #: the replica's resolved engine (``plan_result``: an EngineSpec or the plan result carrying one)
        self.engine_spec = engine_spec_of(request, plan_result)
        cfg = EngineConfig.from_spec(self.engine_spec, async_scheduling=sim_kwargs.get("async_scheduling"),
                                     expert_parallel=sim_kwargs.get("enable_expert_parallel", False),
                                     api_server_count=sim_kwargs.get("api_server_count"))
        self.engine_config = cfg
        self.profile = profile or default_profile(request, self.engine_spec, async_scheduling=cfg.async_scheduling,
                                                  expert_parallel=cfg.expert_parallel)
        self.load_balancer = load_balancer if load_balancer is not None else getattr(request, "load_balancer", None)
        self.max_requests = max_requests
        self.min_requests = min_requests
        self.sim_kwargs = sim_kwargs
        self.judge_errors = not any(s.key == "error_rate" for s in self.slo)
        self._ceiling: Optional[float] = None
        self._runs: dict[tuple, dict] = {}
        self._args: dict[int, tuple] = {}  # id(run) -> its (rate, replicas, requests): records() runs it again
        self.probes: list[dict] = []

    # -- the ceiling -------------------------------------------------------------------------------
    def ceiling(self) -> float:
        """One replica's completions per second at overload (0 when nothing completes)."""
        if self._ceiling is None:
            from .saturation import completion_ceiling
            from .simulate import front_end_for, replica_engine_maker

            from .serve_flag_costs import speculative_model, with_lora

            # the step model simulate() runs: LoRA's and speculative decoding's costs on the profile
            kw = self.sim_kwargs
            prof = speculative_model(with_lora(self.profile, self.request, kw.get("active_loras")), self.request,
                                     self.engine_spec, kw.get("spec_acceptance"))
            make = replica_engine_maker(self.request, self.engine_spec, prof, **kw)
            reqs = self.workload.lengths()
            c = completion_ceiling(make, reqs, max_num_seqs=self.engine_spec.max_num_seqs,
                                   kv_tokens=self.engine_spec.kv_cache_tokens,
                                   front_end=lambda: front_end_for(prof, self.engine_config, None))
            self._ceiling = c or 0.0
        return self._ceiling

    # -- one probe ---------------------------------------------------------------------------------
    def probe(self, rate: float, replicas: int = 1) -> dict:
        """The verdict at ``rate`` (req/s offered to all ``replicas``): simulated on a trace long
        enough to judge when it can be (``min_requests`` per replica to start with)."""
        n = min(PROBE_REQUEST_CAP, self.min_requests * replicas) if self.workload.resizable else None
        cap = min(PROBE_REQUEST_CAP, self.max_requests * replicas)
        while True:
            run = self._run(rate, replicas, n)
            if run["saturated"] is not None or not self.workload.resizable or n >= cap:
                break
            n = min(cap, 2 * n)
        self.probes.append(run)
        return run

    def rule(self, replicas: int):
        from .balancer import rule_for
        from .simulate import _trace_seed, _version_of

        seed = getattr(self.workload._make, "seed", None)  # a TraceMaker's; else the drawn trace's
        if seed is None:
            seed = _trace_seed(self.workload._master(None))
        return rule_for(self.load_balancer, replicas=replicas, vllm_version=_version_of(self.request),
                        moe=self.request.model.is_moe, seed=seed)

    def _run(self, rate: float, replicas: int, n: Optional[int]) -> dict:
        key = (replicas, round(rate, 9), n)
        if key in self._runs:
            return self._runs[key]
        res, mode, trace = self._simulate(rate, replicas, n)
        sat = res.saturation
        failed_ok = res.requests["failed"] == 0 or not self.judge_errors
        ok = sat.get("saturated") is False and res.passed and failed_ok
        win = sat.get("window") or {}
        reasons = dict(res.rejected_reasons or {})
        run = {"rate": round(rate, 6), "replicas": replicas, "requests": len(trace.requests), "ok": ok,
               "failed": res.requests["failed"], "rejected_reasons": reasons,
               "errors_fail": bool(res.requests["failed"]) and self.judge_errors,
               "saturated": sat.get("saturated"), "reason": sat.get("reason"),
               "ttft_p99": res.latency_s["ttft"]["p99"], "tpot_p99": res.latency_s["tpot"]["p99"],
               "e2e_p99": res.latency_s["e2e"]["p99"], "throughput_rps": res.throughput["requests_per_s"],
               "rejected": res.requests["rejected"], "window_arrivals": win.get("arrived"),
               "checks": [dict(c) for c in res.checks], "mode": mode}
        self._runs[key] = run
        self._args[id(run)] = (rate, replicas, n)
        return run

    def records(self, run: dict) -> Sequence[dict]:
        """The per-request records of a probe this prober ran (simulated again: the same run)."""
        res, _, _ = self._simulate(*self._args[id(run)], per_request=True)
        return res.per_request or ()

    def _simulate(self, rate: float, replicas: int, n: Optional[int], per_request: bool = False):
        from .simulate import simulate

        kw = dict(self.sim_kwargs, per_request=True) if per_request else self.sim_kwargs
        trace = self.workload.trace(rate, n)
        rule = self.rule(replicas) if replicas > 1 else None
        symmetric = (rule is not None and rule.static and not getattr(trace, "max_concurrency", None)
                     and not (rule.balancer == "vllm" and rule.clients == 1))
        if symmetric:
            # the rule depends on the arrival order only: the replicas are alike, replica 1's share stands for all
            from .balancer import assign_blind, assign_static

            reqs = trace.requests
            owner = (assign_blind(rule, [r.arrival_s for r in reqs], replicas) if rule.kind == "blind"
                     else assign_static(rule, len(reqs), replicas))
            share = tuple(r for r, j in zip(reqs, owner) if j == 0)
            res = simulate(dataclasses.replace(self.request, data_parallel_size=1),
                           dataclasses.replace(trace, requests=share), profile=self.profile,
                           plan_result=self.engine_spec, slo=self.slo, ceiling_rps=self.ceiling(), **kw)
            mode = (f"symmetry: replica 1 of {replicas} simulated on its {rule.balancer} share; its percentiles "
                    "stand for every replica's")
        else:
            req = dataclasses.replace(self.request, data_parallel_size=replicas)  # the plan is per replica
            res = simulate(req, trace, profile=self.profile, plan_result=self.engine_spec, slo=self.slo,
                           load_balancer=self.load_balancer, ceiling_rps=self.ceiling(), **kw)
            mode = (res.fleet or {}).get("mode") or "one replica"
        return res, mode, trace


def find_capacity(request, make_trace, *, slo=(), replicas: Optional[int] = None, profile=None, plan_result=None,
                  load_balancer: Optional[str] = None, rel_tol: float = 0.02, lo: Optional[float] = None,
                  hi: Optional[float] = None, lo_ok: bool = False,
                  max_requests: int = MAX_REQUESTS, min_requests: int = MIN_REQUESTS,
                  prober: Optional[Prober] = None, **sim_kwargs: Any) -> dict:
    """The highest rate ``replicas`` replicas (default: the request's DP size) sustain within
    ``slo``: see the module docstring. Returns the answer as a JSON-ready dict."""
    pb = prober or Prober(request, as_workload(make_trace), slo=slo, profile=profile, plan_result=plan_result,
                          load_balancer=load_balancer, max_requests=max_requests, min_requests=min_requests,
                          **sim_kwargs)
    n = replicas or max(1, request.data_parallel_size)
    ceiling = pb.ceiling()
    gpus = n * request.tensor_parallel_size * request.pipeline_parallel_size
    out = {"replicas": n, "gpus": gpus, "ceiling_rps": round(ceiling * n, 6), "ceiling_per_replica_rps":
           round(ceiling, 6), "max_rate": None, "first_failing_rate": None, "per_replica": None, "per_gpu": None,
           "noise": None, "judged": True, "probes": pb.probes}
    if ceiling <= 0:
        return dict(out, reason="nothing completes even at overload (every request rejected?)")
    top = ceiling * n
    if hi is not None and hi < top:
        top = hi
        if pb.probe(hi, n)["ok"]:
            return dict(out, max_rate=round(hi, 6), per_replica=round(hi / n, 6), per_gpu=round(hi / gpus, 6),
                        noise=rel_tol, reason="sustainable at the upper bound")
    lo_rate = lo if lo is not None else top / 64
    first = {"ok": True, "saturated": False} if lo_ok and lo is not None else pb.probe(lo_rate, n)
    if not first["ok"]:
        why = f"not sustainable even at {lo_rate:.3g} req/s: {first['reason']}"
        if first.get("rejected"):
            why += f"; {first['rejected']} requests rejected (prompt >= max_model_len): allow some with --slo error_rate=..."
        return dict(out, reason=why, judged=first["saturated"] is not None)
    good, bad = lo_rate, top
    while (bad - good) / bad > rel_tol:
        mid = (good + bad) / 2
        if pb.probe(mid, n)["ok"]:
            good = mid
        else:
            bad = mid
    last_ok = max((p for p in pb.probes if p["ok"] and p["replicas"] == n), key=lambda p: p["rate"], default={})
    stat = 3.0 / math.sqrt(last_ok["window_arrivals"]) if last_ok.get("window_arrivals") else 0.0
    unjudged = [p for p in pb.probes if p["replicas"] == n and p["saturated"] is None]
    reason = ("bisection on the rate between 0 and the fleet's completion ceiling: the highest rate judged "
              "bounded" + (" and within the SLO" if pb.slo else ""))
    if unjudged:
        reason += (f"; {len(unjudged)} probe(s) could not be judged even on {pb.max_requests:,} requests and count "
                   "as failing: a lower bound")
    first_bad = min((p for p in pb.probes if not p["ok"] and p["replicas"] == n and p["rate"] >= good),
                    key=lambda p: p["rate"], default=None)
    slo_noise, slo_words = _slo_noise(pb, n, last_ok, first_bad) if last_ok else (0.0, "")
    if slo_words:
        reason += "; " + slo_words
    noise = min(1.0, max(rel_tol, stat, slo_noise, (bad - good) / bad if bad > 0 else 0.0))
    return dict(out, max_rate=round(good, 6), first_failing_rate=round(bad, 6), per_replica=round(good / n, 6),
                per_gpu=round(good / gpus, 6), noise=round(noise, 4), judged=not unjudged, reason=reason)


#: the latency SLOs whose statistic a run's per-request records give (ITL is per token: not here)
_PER_REQUEST_METRICS = ("ttft", "tpot", "e2e")
#: batches of the run, in arrival order, for the batch-means error of an SLO's statistic
BATCHES = 4


def _slo_noise(pb: Prober, replicas: int, good: dict, bad: Optional[dict]) -> tuple[float, str]:
    """The capacity's uncertainty when a latency SLO bounds it: 3 standard errors of that SLO's
    statistic at the answer, by batch means (the answer's run cut into ``BATCHES`` stretches in
    arrival order: a p99 over one trace is correlated in time - a burst delays many requests at
    once - so the spread between stretches, not a binomial count, is its error), turned into a
    rate by the statistic's slope between the answer and the highest passing probe at or below
    90 % of its rate. Returns (relative noise, words); (0, "") when no SLO binds or it cannot be
    estimated."""
    if bad is None:
        return 0.0, ""
    binding = [c["name"] for c in bad.get("checks", ()) if not c.get("passed")
               and c["name"].split("_", 1)[0] in _PER_REQUEST_METRICS and "_" in c["name"]]
    if not binding:
        return 0.0, ""  # the fleet's backlog (or errors) bound it: the saturation test's noise stands
    below = [p for p in pb.probes if p["ok"] and p["replicas"] == replicas and p["rate"] <= 0.9 * good["rate"]]
    ref = max(below, key=lambda p: p["rate"], default=None)
    from .result import summarize

    done = sorted((r for r in pb.records(good) if r["status"] == "completed"), key=lambda r: r["arrival"])
    if ref is None or len(done) < 10 * BATCHES:
        return 0.0, ""
    worst, words = 0.0, ""
    for name in binding:
        metric, stat = name.split("_", 1)
        value_at = {p["rate"]: c["value"] for p in (good, ref) for c in p["checks"] if c["name"] == name}
        if len(value_at) < 2 or value_at[good["rate"]] is None or value_at[ref["rate"]] is None:
            continue
        slope = (value_at[good["rate"]] - value_at[ref["rate"]]) / (good["rate"] - ref["rate"])
        per_batch = []
        for b in range(BATCHES):
            part = done[b * len(done) // BATCHES:(b + 1) * len(done) // BATCHES]
            xs = [_metric_of(r, metric) for r in part]
            xs = [x for x in xs if x is not None]
            if xs:
                per_batch.append(getattr(summarize(xs), stat, None))
        per_batch = [x for x in per_batch if x is not None]
        if len(per_batch) < 2:
            continue
        mean = sum(per_batch) / len(per_batch)
        sd = math.sqrt(sum((x - mean) ** 2 for x in per_batch) / (len(per_batch) - 1))
        error = 3.0 * sd / math.sqrt(len(per_batch))  # 3 standard errors of the whole run's statistic
        noise = 1.0 if slope <= 0 else min(1.0, error / slope / good["rate"])
        if noise > worst:
            worst = noise
            words = (f"{name} at the answer varies {1e3 * sd:.3g} ms between the run's {len(per_batch)} stretches "
                     f"(batch means: ±{1e3 * error:.3g} ms, 3 standard errors; {100 * noise:.0f} % of the rate at its "
                     "slope): more requests narrow it")
    return worst, words


def _metric_of(record: dict, metric: str) -> Optional[float]:
    if metric == "tpot":
        n = record["output_tokens"]
        return (record["end"] - record["first_token"]) / (n - 1) if n > 1 else None
    return record[metric]


def replicas_needed(request, make_trace, target_rate: float, *, slo=(), profile=None, plan_result=None,
                    load_balancer: Optional[str] = None, max_replicas: int = 256,
                    max_requests: int = MAX_REQUESTS, prober: Optional[Prober] = None, **sim_kwargs: Any) -> dict:
    """The fewest replicas of ``request``'s configuration that carry ``target_rate`` within ``slo``
    behind ``load_balancer``: from ``target / ceiling`` up, each fleet probed at the target."""
    pb = prober or Prober(request, as_workload(make_trace), slo=slo, profile=profile, plan_result=plan_result,
                          load_balancer=load_balancer, max_requests=max_requests, **sim_kwargs)
    ceiling = pb.ceiling()
    per = request.tensor_parallel_size * request.pipeline_parallel_size
    out = {"target_rate": target_rate, "replicas": None, "gpus": None, "gpus_per_replica": per,
           "ceiling_per_replica_rps": round(ceiling, 6), "min_replicas_by_ceiling": None, "probes": pb.probes}
    if ceiling <= 0:
        return dict(out, reason="nothing completes even at overload (every request rejected?)")
    from .saturation import CEILING_TOLERANCE

    n = max(1, math.ceil(target_rate / (ceiling * (1 + CEILING_TOLERANCE)) - 1e-9))
    out["min_replicas_by_ceiling"] = n
    tried = []
    while n <= max_replicas:
        run = pb.probe(target_rate, n)
        tried.append(n)
        if not run["ok"] and run["errors_fail"] and run["saturated"] is False and \
                all(c["passed"] for c in run["checks"] if c["name"] not in ("error_rate", "goodput_ratio")):
            # rejected requests (prompt >= max_model_len, or larger than the KV cache): no replica count helps
            why = ", ".join(f"{k} {v:,}" for k, v in sorted(run["rejected_reasons"].items())) or f"{run['failed']:,}"
            return dict(out, reason=(f"{run['failed']:,} of {run['requests']:,} requests are rejected whatever the "
                                     f"replicas ({why}): allow them with --slo error_rate=..., or raise "
                                     "--max-model-len"))
        if run["ok"]:
            return dict(out, replicas=n, gpus=n * per, judged=True,
                        reason=(f"{n} replicas carry {target_rate:g} req/s within the SLO, judged bounded "
                                f"(tried {', '.join(map(str, tried))}; the ceiling allows no fewer than "
                                f"{out['min_replicas_by_ceiling']})"))
        # a fleet far from passing: jump ahead by the latency's distance from the SLO, at most doubling
        n = n + max(1, min(n, _jump(run, pb.slo, n)))
    return dict(out, reason=f"no fleet of up to {max_replicas} replicas carries {target_rate:g} req/s within the SLO")


def _jump(run: dict, slo, n: int) -> int:
    """How many replicas to add after a failing probe: 1 near the SLO, more when far (a saturated
    fleet or a latency many times its limit)."""
    worst = max((c["value"] / c["limit"] for c in run.get("checks") or () if c.get("value") and c.get("limit")
                 and not c.get("passed") and c["name"] not in ("goodput_ratio",)), default=1.0)
    if run.get("saturated") and worst > 10:
        return max(1, n // 4)
    return 1


def trace_rate(trace) -> Optional[float]:
    """The rate a trace offers (its arrivals' span), None for a burst."""
    reqs = trace.requests
    span = reqs[-1].arrival_s - reqs[0].arrival_s if len(reqs) > 1 else 0.0
    return (len(reqs) - 1) / span if span > 0 else None
