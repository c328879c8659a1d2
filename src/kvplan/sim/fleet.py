"""N data-parallel replicas behind a load balancer (:mod:`kvplan.sim.balancer`), simulated.

Each replica is one engine (:class:`kvplan.sim.engine.Engine`) with the plan's KV pool and limits.
A *static* rule (round-robin, random, vLLM's balancer where it sees no engine state) fixes each
request's replica from the arrival order, so the replicas are independent: each is simulated on
its share. A *dynamic* rule (least outstanding, vLLM's coordinator-fed balancers) chooses from the
replicas' state when the request comes: the engines advance together, every one up to each
arrival (and to each 100 ms stats publish), and the rule sees their requests in flight and their
waiting / running counts as they stand then (an engine's counts include its step in progress).

The API server: each replica behind an external balancer is its own ``vllm serve`` with its own
API server, as are vLLM's internal balancer's API servers from 0.15 (one per DP rank by default);
a request passes its replica's API server queue after the choice. With one API server (vLLM up
to 0.14) every request passes that one queue first and is routed when it leaves it.

:class:`FleetView` presents the replicas as one engine to :func:`kvplan.sim.simulate.build_result`:
requests by their trace index, sums of the work, the KV peak of the fullest replica, and one
timeline (running / waiting summed, KV usage averaged).
"""
from __future__ import annotations

import math
from dataclasses import replace as dc_replace
from typing import Callable, Optional, Sequence

from .balancer import Rule, assign_blind, assign_static, router_for
from .engine import Engine

_INF = math.inf


def api_costs(prof) -> Optional[tuple[float, float]]:
    """The API server's cost per request and per prompt token, or None when the step model has
    none (a calibrated profile's request_overhead_s covers it)."""
    c0 = getattr(prof, "api_request_s", 0.0) or 0.0
    c1 = getattr(prof, "api_prompt_token_s", 0.0) or 0.0
    return (c0, c1) if (c0 or c1) else None


def serial_handoff(requests: Sequence, costs: Optional[tuple[float, float]]) -> Optional[list[float]]:
    """When each request leaves one API server that takes them one at a time (HTTP, validation,
    tokenisation) - or None when there is no such cost."""
    if costs is None:
        return None
    c0, c1 = costs
    free = -_INF
    out = []
    for r in requests:
        a = r.arrival_s
        free = (a if a > free else free) + c0 + c1 * r.prompt_tokens
        out.append(free)
    return out


def run_fleet(make_engine: Callable[..., Engine], trace, rule: Rule, replicas: int, prof) -> list[Engine]:
    """Simulate ``trace`` on ``replicas`` engines behind ``rule``. Returns the engines, their
    requests carrying their trace index (``Req.i``) and their client-side arrival."""
    reqs = trace.requests
    costs = api_costs(prof)
    one_api_server = rule.balancer == "vllm" and rule.clients == 1
    if getattr(trace, "max_concurrency", None):
        return _run_closed_loop(make_engine, trace, replicas, costs)
    # when the balancer decides: at the client's send, or when the one API server hands it on
    decided = (serial_handoff(reqs, costs) if one_api_server else None) or [r.arrival_s for r in reqs]
    if rule.static:
        if rule.kind == "blind":
            owner = assign_blind(rule, decided, replicas)
        else:
            owner = assign_static(rule, len(reqs), replicas)
        return _run_static(make_engine, trace, owner, replicas, None if one_api_server else costs, decided)
    return _run_dynamic(make_engine, trace, rule, replicas, None if one_api_server else costs, decided)


def _run_static(make_engine, trace, owner: Sequence[int], replicas: int, costs, decided: Sequence[float]):
    reqs = trace.requests
    shares: list[list[int]] = [[] for _ in range(replicas)]
    for i, j in enumerate(owner):
        shares[j].append(i)
    engines = []
    for idx in shares:
        sub = [reqs[i] for i in idx]
        reach = serial_handoff(sub, costs) if costs is not None else [decided[i] for i in idx]
        e = make_engine(())
        for i, r, at in zip(idx, sub, reach):
            e.add_request(r, index=i, arrival=at)
        e.run()
        engines.append(e)
    _restore_arrivals(engines, reqs)
    return engines


def _run_dynamic(make_engine, trace, rule: Rule, replicas: int, costs, decided: Sequence[float]):
    import gc

    reqs = trace.requests
    engines = [make_engine(()) for _ in range(replicas)]
    router = router_for(rule, replicas)
    assigned = [0] * replicas
    api_free = [-_INF] * replicas
    tick = router.tick_s
    next_tick = 0.0 if tick else _INF

    def advance(h: float) -> None:
        for e in engines:
            if e.t < h and (e.running or e.waiting or e._nxt < len(e.reqs)):
                e._run(h)

    def in_flight(at: float) -> list[int]:
        out = []
        for j, e in enumerate(engines):
            done = e.completed - (e.last_step_completed if e.last_step_end > at else 0)
            out.append(assigned[j] - done - e.rejected)
        return out

    was = gc.isenabled()
    gc.disable()
    try:
        for k, r in enumerate(reqs):
            t = decided[k]
            while next_tick <= t:
                advance(next_tick)
                router.publish([(len(e.waiting), len(e.running) - len(e.pending), e.pool.usage) for e in engines])
                next_tick += tick
            advance(t)
            j = router.choose(k, in_flight(t))
            at = t
            if costs is not None:
                free = api_free[j]
                at = api_free[j] = (t if t > free else free) + costs[0] + costs[1] * r.prompt_tokens
            engines[j].add_request(r, index=k, arrival=at)
            assigned[j] += 1
    finally:
        if was:
            gc.enable()
    for e in engines:
        e.advance(_INF)
    _restore_arrivals(engines, reqs)
    return engines


def _run_closed_loop(make_engine, trace, replicas: int, costs):
    """vLLM bench's --max-concurrency against a fleet: the client's slots and its requests are
    split over the replicas in turn (each replica its own closed loop), whatever the balancer."""
    reqs = trace.requests
    mc = trace.max_concurrency
    engines = []
    for k in range(replicas):
        idx = list(range(k, len(reqs), replicas))
        sub = dc_replace(trace, requests=tuple(reqs[i] for i in idx),
                         max_concurrency=max(1, mc // replicas + (1 if k < mc % replicas else 0)))
        e = make_engine(sub.requests, max_concurrency=sub.max_concurrency)
        e.run()
        for r in e.reqs:
            r.i = idx[r.i]
        e.first_order[:] = [idx[i] for i in e.first_order]
        engines.append(e)
    return engines


def _restore_arrivals(engines: Sequence[Engine], reqs) -> None:
    """Latencies count from the client's send (the API server's wait included)."""
    for e in engines:
        for r in e.reqs:
            r.arrival = reqs[r.i].arrival_s


class _PoolView:
    def __init__(self, num_blocks: int, usable: int):
        self.num_blocks = num_blocks
        self.usable = usable


class FleetView:
    """The replicas as one engine, for :func:`kvplan.sim.simulate.build_result` and the saturation
    detector: every request in trace order, the work summed, one timeline."""

    def __init__(self, engines: Sequence[Engine]):
        self.engines = list(engines)
        e0 = self.engines[0]
        self.reqs = sorted((r for e in self.engines for r in e.reqs), key=lambda r: r.i)
        self.rejected = sum(e.rejected for e in self.engines)
        reasons: dict[str, int] = {}
        for e in self.engines:
            for k, v in e.rejected_reasons.items():
                reasons[k] = reasons.get(k, 0) + v
        self.rejected_reasons = reasons
        self.itl_w = [p for e in self.engines for p in e.itl_w]
        self.itl_x = [x for e in self.engines for x in e.itl_x]
        for name in ("prompt_computed", "cached_tokens", "recomputed", "preemptions", "steps", "busy_s", "kv_waits"):
            setattr(self, name, sum(getattr(e, name) for e in self.engines))
        self.pool = _PoolView(e0.pool.num_blocks, e0.pool.usable)
        self.block_size = e0.block_size
        self.caching = e0.caching
        self.counted = e0.counted
        self.recorder = e0.recorder  # the median step shown is replica 0's
        self.kv_peak = max(e.kv_peak for e in self.engines)
        self.t = max(e.t for e in self.engines)
        self.max_waiting = max(e.max_waiting for e in self.engines)
        self.interval = e0.interval
        self.timeline = merge_timelines([e.timeline for e in self.engines])
        done = [r for r in self.reqs if r.t_first is not None]
        done.sort(key=lambda r: (r.t_first, r.i))
        self.first_order = [r.i for r in done]


def merge_timelines(timelines: Sequence[Sequence[dict]]) -> list[dict]:
    """One timeline for the fleet: at each sample time, running / waiting / tokens per second summed
    over the replicas, KV usage averaged, preemptions summed (a replica past its last row is idle)."""
    n = len(timelines)
    if n == 1:
        return list(timelines[0])
    times = sorted({row["t"] for tl in timelines for row in tl})
    pos = [0] * n
    out = []
    for t in times:
        running = waiting = preempt = 0
        tokens = kv = 0.0
        for k, tl in enumerate(timelines):
            p = pos[k]
            while p < len(tl) and tl[p]["t"] < t:
                p += 1
            pos[k] = p
            if p < len(tl) and tl[p]["t"] == t:
                row = tl[p]
                running += row["running"]
                waiting += row["waiting"]
                tokens += row["tokens_per_s"]
                kv += row["kv_usage"]
                preempt += row["preemptions"]
            elif p > 0:  # between samples (another replica's end) or after its last: its last state
                row = tl[p - 1]
                if p < len(tl):
                    running += row["running"]
                    waiting += row["waiting"]
                kv += row["kv_usage"]
                preempt += row["preemptions"]
        out.append({"t": t, "running": running, "waiting": waiting, "kv_usage": round(kv / n, 6),
                    "tokens_per_s": round(tokens, 3), "preemptions": preempt})
    return out


def replica_rows(engines: Sequence[Engine]) -> list[dict]:
    """Per replica: its requests, completed, rejected, its requests/s over its own window, TTFT p99."""
    from .engine_kv import DONE
    from .result import summarize

    rows = []
    for j, e in enumerate(engines):
        done = [r for r in e.reqs if r.status == DONE]
        first = min((r.arrival for r in e.reqs), default=0.0)
        end = max((r.t_end for r in done), default=None)
        window = (end - first) if end is not None and end > first else None
        ttft = summarize([r.t_first - r.arrival for r in done])
        rows.append({"replica": j, "requests": len(e.reqs), "completed": len(done), "rejected": e.rejected,
                     "requests_per_s": round(len(done) / window, 6) if window else None,
                     "ttft_p99_s": ttft["p99"], "max_waiting": e.max_waiting, "preemptions": e.preemptions,
                     "kv_peak": round(e.kv_peak, 6)})
    return rows
