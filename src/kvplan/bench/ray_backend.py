"""Optional Ray backend (extra ``kvplan[ray]``): the workers of a run as Ray actors on an existing
Ray cluster, beyond one host; one merged result, exactly as ``--workers N`` on one host.

Each actor runs the same :func:`runner.run_worker` on its share of the global schedule. Monotonic
clocks are per host, so the common start is a wall-clock time that each actor converts to its own
monotonic clock: records stay on one time axis as far as the hosts' clocks agree (NTP: ~1 ms).
kvplan must be importable on every node (the same environment, or a ``runtime_env``).

The scraper and the progress display stay in the calling process. A stop (Ctrl-C, or one
actor finding the server unreachable) is relayed to every actor by the caller's poll loop.
"""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from .._ray import connect  # noqa: F401 - kvplan.bench.run joins the cluster through here
from .._ray import import_ray as _ray
from .runner import REASONS, Counters, StopFlag, WorkerOutput, WorkerPlan, run_worker

_ACTOR_CLS = None


class _BenchActor:
    """One load-generator worker. An async actor: ``stop`` and ``counters`` run while ``run`` runs."""

    def __init__(self) -> None:
        self.stop_flag = StopFlag()
        self.counters = Counters()

    async def run(self, plan: WorkerPlan, t0_wall: float) -> WorkerOutput:
        t0 = time.monotonic() + (t0_wall - time.time())
        return await run_worker(plan, t0, self.stop_flag, self.counters)

    async def stop(self, reason: str) -> None:
        self.stop_flag.set(reason)

    async def status(self) -> tuple:
        return self.counters.as_tuple() + (REASONS.index(self.stop_flag.reason),)


def _actor_cls():
    global _ACTOR_CLS
    if _ACTOR_CLS is None:
        _ACTOR_CLS = _ray().remote(num_cpus=1, max_concurrency=4)(_BenchActor)
    return _ACTOR_CLS


async def run_ray_workers(bench, n: int, stop: StopFlag, on_counters, on_start) -> tuple[list, float, float]:
    """Run ``n`` actors; returns (records, actors' CPU seconds, t0 as this host's monotonic time).
    ``on_start(t0)`` is called once the start is fixed; ``on_counters(rows)`` with live counters."""
    ray = _ray()
    cls = _actor_cls()
    actors = [cls.remote() for _ in range(n)]
    # Actor start-up (a worker process per actor) takes a moment: wait for all before t0.
    await asyncio.gather(*(_aw(a.status.remote()) for a in actors))
    lead = 0.5
    t0_wall, t0 = time.time() + lead, time.monotonic() + lead
    on_start(t0)
    refs = [a.run.remote(WorkerPlan(bench.cfg, bench.source, bench.offsets, w, n), t0_wall)
            for w, a in enumerate(actors)]
    pending = list(refs)
    relayed = ""
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
            statuses = await asyncio.gather(*(_aw(a.status.remote()) for a in actors), return_exceptions=True)
            rows = [s[:-1] for s in statuses if isinstance(s, tuple)]
            on_counters(rows)
            reasons = [REASONS[s[-1]] for s in statuses if isinstance(s, tuple) and s[-1]]
            if reasons and not stop.reason:
                stop.set(reasons[0])
            if stop.reason and stop.reason != relayed:
                relayed = stop.reason
                await asyncio.gather(*(_aw(a.stop.remote(relayed)) for a in actors), return_exceptions=True)
            if pending:
                await asyncio.sleep(0.25)
        outs: list[WorkerOutput] = [await _aw(r) for r in refs]
    finally:
        for a in actors:
            ray.kill(a)
    records = [r for o in outs for r in o.records]
    return records, sum(o.cpu_s for o in outs), t0


async def _aw(ref) -> Optional[object]:
    """Await a Ray ObjectRef without blocking the event loop (the scraper shares it)."""
    return await asyncio.wrap_future(ref.future())
