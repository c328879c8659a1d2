"""How many GPUs, of which kind, for this traffic at this SLO: the sizing answer per GPU type.

For every replica configuration of the space that starts (GPU type, TP × PP, the scheduler and
memory flags; :mod:`.space` plans and prunes them), :mod:`kvplan.sim.capacity` gives the fewest
replicas that carry the target rate within the SLO behind the load balancer, and the capacity of
that fleet. A configuration's **ceiling** (one replica at overload) bounds it from below
(``target / ceiling`` replicas at least), so configurations are taken best bound first, per GPU
type, and one whose bound cannot beat the best answer found for its GPU type is not probed
(counted in ``skipped``). The answer: the best configuration of each GPU type, then the overall
winner, by the objective (``min_gpus``; ``min_cost`` with GPU prices; ``capacity_per_gpu``: the
most req/s per GPU at the SLO).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence

from ..errors import UsageError
from ..sim.capacity import MIN_REQUESTS

SIZING_OBJECTIVES = ("min_gpus", "min_cost", "capacity_per_gpu")
#: requests per replica a sizing probe starts with (doubled while the verdict cannot judge): the same as
#: every other capacity answer's (simulate --find-saturation, preflight), so they probe the same traces
SIZING_MIN_REQUESTS = MIN_REQUESTS
DEFAULT_MAX_GPUS = 128


@dataclass(frozen=True)
class SizedConfig:
    """One replica configuration sized for the target rate."""

    label: str
    flags: dict
    gpu: str
    gpus_per_replica: int
    ceiling_per_replica_rps: float
    replicas: Optional[int]  # None: more than max_gpus, or nothing carries it
    gpus: Optional[int]
    capacity: dict  # max_rate, per_gpu, noise, judged (the fleet of `replicas`)
    at_target: dict  # the passing probe at the target rate (latency, mode)
    reason: str
    cost: dict = field(default_factory=dict)
    serve_command: str = ""
    launch: dict = field(default_factory=dict)  # how the replicas start across nodes (memory.launch)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "flags": dict(self.flags), "gpu": self.gpu,
                "gpus_per_replica": self.gpus_per_replica, "ceiling_per_replica_rps": self.ceiling_per_replica_rps,
                "replicas": self.replicas, "gpus": self.gpus, "capacity": dict(self.capacity),
                "at_target": dict(self.at_target), "reason": self.reason, "cost": dict(self.cost),
                "serve_command": self.serve_command, "launch": dict(self.launch)}


def _rank_key(objective: str, s: SizedConfig) -> tuple:
    cap = (s.capacity or {}).get("per_gpu") or 0.0
    usd = (s.cost or {}).get("usd_per_hour")
    if s.gpus is None:
        return (1, math.inf, 0.0)
    if objective == "min_cost":
        return (0, usd if usd is not None else math.inf, s.gpus, -cap)
    if objective == "capacity_per_gpu":
        return (0, -cap, s.gpus)
    return (0, s.gpus, -cap)


def _bound(objective: str, gpus_lo: int, ceiling_per_gpu: float, price: Optional[float]) -> tuple:
    """What a configuration could at best reach (its ceiling's replicas), comparable with _rank_key."""
    if objective == "min_cost":
        return (0, gpus_lo * price if price is not None else math.inf, gpus_lo, -ceiling_per_gpu)
    if objective == "capacity_per_gpu":
        return (0, -ceiling_per_gpu, gpus_lo)
    return (0, gpus_lo, -ceiling_per_gpu)


def ceiling_task(task: tuple, shared: dict) -> float:
    """Worker: one replica configuration's completion ceiling (req/s at overload)."""
    from ..sim.capacity import Prober

    request, plan, profile = task
    return Prober(request, shared["workload"], slo=shared["slo"], profile=profile, plan_result=plan,
                  load_balancer=shared["load_balancer"], **shared["sim_kwargs"]).ceiling()


def _prober(request, plan, profile, ceiling, shared):
    from ..sim.capacity import Prober

    pb = Prober(request, shared["workload"], slo=shared["slo"], profile=profile, plan_result=plan,
                load_balancer=shared["load_balancer"], min_requests=shared["min_requests"], **shared["sim_kwargs"])
    pb._ceiling = ceiling
    return pb


def size_task(task: tuple, shared: dict) -> dict:
    """Worker: the fewest replicas of one configuration that carry the target rate."""
    from ..sim.capacity import replicas_needed

    request, plan, profile, ceiling = task
    pb = _prober(request, plan, profile, ceiling, shared)
    per = request.tensor_parallel_size * request.pipeline_parallel_size
    need = replicas_needed(request, None, shared["target"], prober=pb,
                           max_replicas=max(1, shared["max_gpus"] // per))
    reqs = shared["workload"].lengths()
    out = {"replicas": need["replicas"], "reason": need["reason"], "at_target": {}, "capacity": {},
           "mean_output_tokens": sum(r.output_tokens for r in reqs) / len(reqs) if reqs else None}
    if need["replicas"]:
        n = need["replicas"]
        passing = next(p for p in reversed(pb.probes) if p["replicas"] == n and p["ok"])
        out["at_target"] = {k: passing[k] for k in ("rate", "ttft_p99", "tpot_p99", "e2e_p99", "requests", "mode")}
        # until capacity_task measures it: at least the target, at most the fleet's ceiling
        out["capacity"] = {"max_rate": None, "at_least": shared["target"], "ceiling_rps": round(ceiling * n, 6),
                           "per_gpu": None, "noise": None, "judged": True}
    return out


def capacity_task(task: tuple, shared: dict) -> dict:
    """Worker: the capacity of a sized fleet (bisection from the target up to its ceiling)."""
    from ..sim.capacity import find_capacity

    request, plan, profile, ceiling, n = task
    pb = _prober(request, plan, profile, ceiling, shared)
    cap = find_capacity(replace(request, data_parallel_size=n), None, prober=pb, lo=shared["target"], lo_ok=True,
                        rel_tol=shared["rel_tol"])
    out = {k: cap[k] for k in ("max_rate", "per_replica", "per_gpu", "noise", "judged", "ceiling_rps")}
    # the saturation curve: every probe of this fleet, by rate (TTFT p99 and the verdict)
    seen = {}
    for p in pb.probes:
        if p["replicas"] == n:
            seen[p["rate"]] = {"rate": p["rate"], "ttft_p99": p["ttft_p99"], "e2e_p99": p["e2e_p99"],
                               "saturated": p["saturated"], "ok": p["ok"]}
    out["curve"] = [seen[r] for r in sorted(seen)]
    return out


@dataclass(frozen=True)
class Sizing:
    """The answer: per GPU type the best sized configuration, the overall winner, and every
    configuration probed."""

    target_rate: float
    objective: str
    load_balancer: dict
    per_gpu_type: tuple[SizedConfig, ...]
    rows: tuple[SizedConfig, ...]
    skipped: int
    max_gpus: int
    elapsed_s: float
    notes: tuple[str, ...] = ()

    @property
    def winner(self) -> Optional[SizedConfig]:
        best = [s for s in self.per_gpu_type if s.gpus is not None]
        return min(best, key=lambda s: _rank_key(self.objective, s)) if best else None

    def to_dict(self) -> dict[str, Any]:
        w = self.winner
        return {"target_rate": self.target_rate, "objective": self.objective, "load_balancer": dict(self.load_balancer),
                "max_gpus": self.max_gpus, "winner": w.to_dict() if w else None,
                "per_gpu_type": [s.to_dict() for s in self.per_gpu_type], "rows": [s.to_dict() for s in self.rows],
                "skipped": self.skipped, "elapsed_s": round(self.elapsed_s, 3), "notes": list(self.notes)}


def sizing_shared(workload, slos, *, load_balancer, target_rate, max_gpus, rel_tol=0.1, sim_kwargs=None) -> dict:
    """What every sizing worker shares (a process pool receives it once, when it starts)."""
    return {"workload": workload, "slo": tuple(slos), "load_balancer": load_balancer, "target": target_rate,
            "max_gpus": max_gpus, "rel_tol": rel_tol, "sim_kwargs": dict(sim_kwargs or {}),
            "min_requests": SIZING_MIN_REQUESTS}


def size(cands: Sequence, workload, slos, *, target_rate: float, objective: str = "min_gpus",
         load_balancer: Optional[str] = None, max_gpus: int = DEFAULT_MAX_GPUS, prices=None,
         runner=None, profile_for=None, rel_tol: float = 0.1, sim_kwargs: Optional[dict] = None) -> Sizing:
    """Size every replica configuration of ``cands`` (:class:`.space.Candidate` with DP 1) for
    ``target_rate`` (see the module docstring). ``runner``: a :class:`.execute.Runner` whose
    shared dict this fills (serial when None); ``profile_for(candidate)``: its step-time profile
    (None: the GPU's default clock); ``prices``: a :class:`kvplan.hardware.prices.PriceTable`."""
    from ..sim.balancer import parse_balancer, rule_for
    from ..sim.capacity import as_workload

    if objective not in SIZING_OBJECTIVES:
        raise UsageError(f"--objective must be one of {', '.join(SIZING_OBJECTIVES)} when sizing, got {objective!r}")
    if not target_rate > 0:
        raise UsageError("sizing needs a target rate (--rate) above 0")
    t0 = time.perf_counter()
    workload = as_workload(workload)
    shared = sizing_shared(workload, slos, load_balancer=load_balancer, target_rate=target_rate,
                           max_gpus=max_gpus, rel_tol=rel_tol, sim_kwargs=sim_kwargs)
    if runner is None:
        from .execute import Backend, Runner

        runner = Runner(Backend("serial", 1), shared)
    elif any(runner.shared.get(k) != v for k, v in shared.items() if k != "workload"):
        raise ValueError("the runner's shared dict must come from sizing_shared() with the same arguments")
    profile_for = profile_for or (lambda c: None)
    ceilings = runner.map(ceiling_task, [(c.request, c.plan, profile_for(c)) for c in cands])
    info = []
    for c, ceil in zip(cands, ceilings):
        per = c.plan.parallel.gpus_per_replica
        lo = max(1, math.ceil(target_rate / (ceil * 1.02) - 1e-9)) if ceil > 0 else None
        price = prices.price(c.plan.flags.gpu) if prices is not None else None
        info.append({"cand": c, "ceiling": ceil, "per": per, "gpus_lo": None if lo is None else lo * per,
                     "price": price, "balancer": parse_balancer(load_balancer)})
    by_type: dict[str, list] = {}
    for x in info:
        by_type.setdefault(x["cand"].plan.flags.gpu, []).append(x)
    done: dict[int, SizedConfig] = {}
    skipped = 0
    pending = {g: sorted((x for x in xs if x["gpus_lo"] is not None and x["gpus_lo"] <= max_gpus),
                         key=lambda x: (_bound(objective, x["gpus_lo"], x["ceiling"] / x["per"], x["price"]),
                                        x["cand"].index))
               for g, xs in by_type.items()}
    unreachable = [x for x in info if x["gpus_lo"] is None or x["gpus_lo"] > max_gpus]
    best: dict[str, SizedConfig] = {}
    while any(pending.values()):
        # one configuration per GPU type per round (the best bound left), all types in parallel
        batch = []
        for g, xs in pending.items():
            while xs:
                x = xs.pop(0)
                if g in best and _bound(objective, x["gpus_lo"], x["ceiling"] / x["per"], x["price"]) \
                        > _rank_key(objective, best[g]):
                    skipped += 1 + len(xs)
                    xs.clear()
                    break
                batch.append(x)
                break
        if not batch:
            break
        results = runner.map(size_task, [(x["cand"].request, x["cand"].plan, profile_for(x["cand"]), x["ceiling"])
                                         for x in batch])
        for x, res in zip(batch, results):
            s = _sized(x, res, prices)
            done[x["cand"].index] = s
            g = s.gpu
            if s.gpus is not None and (g not in best or _rank_key(objective, s) < _rank_key(objective, best[g])):
                best[g] = s
    # the capacity of each GPU type's best fleet (the others keep "at least the target")
    winners = [(x, best[x["cand"].plan.flags.gpu]) for x in info
               if x["cand"].plan.flags.gpu in best and done.get(x["cand"].index) is best[x["cand"].plan.flags.gpu]]
    caps = runner.map(capacity_task, [(x["cand"].request, x["cand"].plan, profile_for(x["cand"]), x["ceiling"],
                                       s.replicas) for x, s in winners])
    for (x, s), cap in zip(winners, caps):
        s2 = _with_capacity(s, cap, prices, x)
        done[x["cand"].index] = best[s.gpu] = s2
    for x in unreachable:
        reason = ("nothing completes at overload" if x["gpus_lo"] is None else
                  f"its ceiling ({x['ceiling']:.3g} req/s per replica) needs at least {x['gpus_lo']} GPUs, over "
                  f"--max-gpus {max_gpus}")
        done[x["cand"].index] = _sized(x, {"replicas": None, "reason": reason, "at_target": {}, "capacity": {}},
                                       prices)
    rows = sorted(done.values(), key=lambda s: (_rank_key(objective, s), s.label))
    per_type = []
    for g in by_type:
        if g in best:
            per_type.append(best[g])
        else:  # none carries it: the closest (fewest GPUs by its ceiling) says why
            cands_g = [s for s in rows if s.gpu == g]
            if cands_g:
                per_type.append(min(cands_g, key=lambda s: -(s.ceiling_per_replica_rps / s.gpus_per_replica)))
    lb = rule_for(load_balancer, replicas=2, vllm_version=_version(cands), moe=_moe(cands)).to_dict() if cands else {}
    notes = []
    if skipped:
        notes.append(f"{skipped} configuration(s) not probed: their ceiling cannot beat their GPU type's best on "
                     f"{objective}")
    return Sizing(target_rate=target_rate, objective=objective, load_balancer=lb, per_gpu_type=tuple(per_type),
                  rows=tuple(rows), skipped=skipped, max_gpus=max_gpus, elapsed_s=time.perf_counter() - t0,
                  notes=tuple(notes))


def _version(cands) -> tuple:
    from ..memory.semantics import parse_version

    return parse_version(cands[0].request.vllm_version)


def _moe(cands) -> bool:
    return bool(cands[0].request.model.is_moe)


def _with_capacity(s: SizedConfig, cap: dict, prices, x: dict) -> SizedConfig:
    cost = dict(s.cost)
    if prices is not None and s.gpus:
        from ..hardware.prices import fleet_cost

        cost = fleet_cost(prices, s.gpu, s.gpus, s.at_target.get("rate"), cap.get("max_rate"),
                          s.cost.get("mean_output_tokens"))
    return replace(s, capacity=cap, cost=cost)


def _sized(x: dict, res: dict, prices) -> SizedConfig:
    c = x["cand"]
    per = x["per"]
    n = res.get("replicas")
    flags = {k: v for k, v in c.flags().items() if k not in ("gpus", "data_parallel_size")}
    label = c.label().split(" ", 1)[1].replace(" DP1", "")  # the replica: "TP4 seqs=... kv=..."
    gpus = n * per if n else None
    cost = {}
    if prices is not None:
        from ..hardware.prices import fleet_cost

        cost = fleet_cost(prices, c.plan.flags.gpu, gpus, res.get("at_target", {}).get("rate"),
                          (res.get("capacity") or {}).get("max_rate"), res.get("mean_output_tokens"))
        cost["mean_output_tokens"] = res.get("mean_output_tokens")
    launch: dict = {}
    serve = c.plan.serve_command
    if n:
        from dataclasses import asdict

        from ..memory.launch import data_parallel_launch, display
        from ..memory.semantics import parse_version

        argv = list(c.plan.serve_argv) + (["--data-parallel-size", str(n)] if n > 1 else [])
        serve = display(argv)
        dl = data_parallel_launch(argv, tp=c.request.tensor_parallel_size, pp=c.request.pipeline_parallel_size,
                                  dp=n, gpus_per_node=c.request.gpus_per_node,
                                  version=parse_version(c.request.vllm_version), balancer=x.get("balancer") or "vllm")
        if dl is not None:
            launch = asdict(dl)
            launch["commands"] = [[where, display(list(a))] for where, a in dl.commands]
    return SizedConfig(label=f"{c.plan.flags.gpu} {label}", flags=flags, gpu=c.plan.flags.gpu, gpus_per_replica=per,
                       ceiling_per_replica_rps=round(x["ceiling"], 6), replicas=n, gpus=gpus,
                       capacity=res.get("capacity") or {}, at_target=res.get("at_target") or {},
                       reason=res.get("reason", ""), cost=cost, serve_command=serve, launch=launch)


def size_space(base, make_trace, slos, *, space, target_rate: float, objective: str = "min_gpus",
               load_balancer: Optional[str] = None, max_gpus: int = DEFAULT_MAX_GPUS, prices=None,
               processes: Optional[int] = None, ray_address: Optional[str] = None, profile=None,
               sim_kwargs: Optional[dict] = None) -> Sizing:
    """``kvplan tune --gpus auto``: every replica configuration of ``space`` (DP 1; the TP sizes
    listed, else the powers of two up to a node) planned, pruned, and sized for ``target_rate``."""
    from ..sim.capacity import as_workload
    from .execute import Runner, choose_backend
    from .space import expand

    tps = space.tensor_parallel or tuple(t for t in (1, 2, 4, 8, 16) if t <= max(1, base.gpus_per_node))
    sp = replace(space, gpus=(), tensor_parallel=tps)
    base1 = replace(base, data_parallel_size=1)
    workload = as_workload(make_trace)
    trace = workload.trace(target_rate)
    backend = choose_backend(processes, ray_address, 1 << 30)
    shared = sizing_shared(workload, slos, load_balancer=load_balancer, target_rate=target_rate, max_gpus=max_gpus,
                           sim_kwargs=sim_kwargs)
    with Runner(backend, shared) as runner:
        cands, pruned, floor = expand(base1, sp, trace, plan_all=runner.map)

        def profile_for(c):
            same = (profile is not None and c.request.gpu.name == base.gpu.name
                    and c.request.tensor_parallel_size == base.tensor_parallel_size)
            return profile if same else None

        result = size(cands, workload, slos, target_rate=target_rate, objective=objective,
                      load_balancer=load_balancer, max_gpus=max_gpus, prices=prices, runner=runner,
                      profile_for=profile_for, sim_kwargs=sim_kwargs)
    notes = list(result.notes)
    if pruned.total:
        notes.append(f"{pruned.total} combination(s) pruned before simulation: "
                     + ", ".join(f"{k} {n}" for k, n in pruned.by_reason))
    if not cands:
        notes.append("no replica configuration of the space starts under vLLM's rules")
    return replace(result, notes=tuple(notes))
