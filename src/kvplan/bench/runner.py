"""The load loop of one worker: open loop (rate / replay schedule) or closed loop (concurrency).

A worker owns one event loop and one aiohttp session. With N workers, worker ``w`` sends the
arrivals ``i ≡ w (mod N)`` of the one global schedule (open loop) or the users ``u ≡ w (mod N)``
(closed loop), so merging the workers' records gives the traffic of one ideal generator.

Stopping: the schedule ends (duration / max requests), or a shared :class:`StopFlag` is raised
(Ctrl-C, the server stopped answering). In-flight requests then finish or time out (normal end)
or are cancelled and recorded as ``cancelled`` (interrupted): no request is ever lost.
"""
from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import aiohttp

from ..traffic.arrivals import rate_schedule
from .client import Record, connector, execute
from .config import BenchConfig
from .prompts import RequestSource

REASONS = ("", "interrupted", "server_unreachable", "worker_failed", "all_requests_404")
NOT_FOUND_AFTER = 5  # requests answered 404 with none ok: the model is not served (a wrong --model)
LOOP_PROBE_S = 0.02  # the event-loop lag probe's period
SPIN_S = 0.001  # the last millisecond before a send is spent yielding, not sleeping (see _sleep_until)


class StopFlag:
    """Why the run must stop ('' = keep going). The multi-process version shares a ctypes int."""

    def __init__(self, shared=None):
        self._shared = shared
        self._local = 0

    @property
    def reason(self) -> str:
        return REASONS[self._shared.value if self._shared is not None else self._local]

    def set(self, reason: str) -> None:
        code = REASONS.index(reason)
        if self._shared is not None:
            with self._shared.get_lock():
                if self._shared.value == 0:
                    self._shared.value = code
        elif self._local == 0:
            self._local = code


@dataclass
class Counters:
    """Live progress of one worker (read by the progress display)."""

    sent: int = 0
    done: int = 0
    ok: int = 0
    failed: int = 0
    output_tokens: int = 0
    lag_sum: float = 0.0

    def as_tuple(self) -> tuple:
        return (self.sent, self.done, self.ok, self.failed, self.output_tokens, self.lag_sum)


@dataclass(frozen=True)
class WorkerPlan:
    cfg: BenchConfig
    source: RequestSource
    replay_offsets: Optional[Sequence[float]] = None
    worker: int = 0
    nworkers: int = 1


@dataclass
class WorkerOutput:
    records: list = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    worker: int = 0
    loop_lag: list = field(default_factory=list)  # event-loop lag samples (s): how late a timer fired


def global_schedule(plan: WorkerPlan) -> Iterator[float]:
    """The offsets of every arrival of the run (all workers), bounded by the run's end."""
    cfg = plan.cfg
    end = cfg.warmup_s + cfg.duration_s if cfg.duration_s is not None else None
    if plan.replay_offsets is not None:
        for off in plan.replay_offsets:
            if end is not None and off >= end:
                return
            yield off
        return
    # Without a duration, max_requests bounds the measured arrivals; warm-up arrivals come on
    # top, so the loop (open_loop) cuts the schedule, not the generator.
    if end is None and cfg.warmup_s > 0:
        end = float("inf")  # bounded by open_loop's count of measured arrivals
    yield from rate_schedule(cfg.rate, cfg.arrival, cfg.burstiness, cfg.ramp_s, cfg.seed, end_s=end,
                             max_count=cfg.max_requests if end is None else None)


class _Worker:
    def __init__(self, plan: WorkerPlan, t0: float, stop: StopFlag, counters: Counters):
        self.plan, self.cfg, self.t0, self.stop, self.c = plan, plan.cfg, t0, stop, counters
        self.records: list[Record] = []
        self.tasks: set[asyncio.Task] = set()
        self.url = self.cfg.base_url + self.cfg.path
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream" if self.cfg.stream else
                        "application/json"}
        if self.cfg.api_key:
            self.headers["Authorization"] = f"Bearer {self.cfg.api_key}"
        self.timeout = aiohttp.ClientTimeout(total=self.cfg.timeout_s)
        self.refused_since: Optional[float] = None
        self.refused_count = 0
        self.not_found = 0
        self.session: Optional[aiohttp.ClientSession] = None
        # Each request in flight holds a socket: stay under the open-file limit, or requests would
        # fail with EMFILE and look like server errors. Waiting at the cap shows up as schedule lag.
        self.max_inflight = min(self.cfg.max_inflight, _fd_budget())

    # ------------------------------------------------------------------ one request
    async def _one(self, i: int, scheduled: float, spec=None) -> Record:
        cfg = self.cfg
        spec = spec or self.plan.source.get(i)
        rec = Record(i, self.plan.worker, scheduled, scheduled < cfg.warmup_s, spec.max_tokens)
        self.records.append(rec)  # appended before sending: even a cancelled request is counted
        self.c.sent += 1
        try:
            await execute(self.session, self.url, spec.body, self.headers, rec, self.t0, cfg.stream, self.timeout)
        finally:
            self._account(rec)
        return rec

    def _account(self, rec: Record) -> None:
        c = self.c
        c.done += 1
        if rec.lag is not None:
            c.lag_sum += rec.lag
        if rec.ok:
            c.ok += 1
            c.output_tokens += rec.output_tokens or 0
            self.refused_since, self.refused_count = None, 0
        else:
            c.failed += 1
            if rec.error in ("connect_refused", "connect_error"):
                # The server is gone when connections keep failing for unreachable_after_s
                # with no success in between: stop instead of hammering a dead port.
                now = time.monotonic()
                self.refused_count += 1
                if self.refused_since is None:
                    self.refused_since = now
                elif self.refused_count >= 3 and now - self.refused_since >= self.cfg.unreachable_after_s:
                    self.stop.set("server_unreachable")
            elif rec.error != "cancelled":
                self.refused_since, self.refused_count = None, 0
            if rec.error == "http_404":
                # Every request answered 404 and none ok: the server does not serve this model (or
                # path). Stop at once instead of sending 404s for the whole duration.
                self.not_found += 1
                if self.not_found >= NOT_FOUND_AFTER and c.ok == 0:
                    self.stop.set("all_requests_404")

    def _spawn(self, i: int, scheduled: float, spec) -> None:
        t = asyncio.ensure_future(self._one(i, scheduled, spec))
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)

    async def _sleep_until(self, target: float) -> bool:
        """Sleep to ``target`` (monotonic) in slices, so a stop is seen quickly. False if stopped.

        The event loop's selector (epoll) rounds timeouts up to whole milliseconds, which alone
        makes the median send ~0.5-1 ms late. So the sleep aims 1 ms early and the rest is spent
        yielding to the loop (``sleep(0)`` runs one select with timeout 0: I/O keeps flowing).
        """
        while True:
            if self.stop.reason:
                return False
            delay = target - time.monotonic()
            if delay <= 0:
                return True
            if delay > SPIN_S:
                await asyncio.sleep(min(delay - SPIN_S, 0.25))
            else:
                await asyncio.sleep(0)

    # ------------------------------------------------------------------ loops
    async def open_loop(self) -> None:
        cfg, w, n = self.cfg, self.plan.worker, self.plan.nworkers
        measured = 0
        for i, off in enumerate(global_schedule(self.plan)):
            if off >= cfg.warmup_s:
                measured += 1  # counted over all workers' arrivals: the bound is global
                if cfg.max_requests is not None and measured > cfg.max_requests:
                    return
            if i % n != w:
                continue
            spec = self.plan.source.get(i)  # built before the due time, so it does not add to the lag
            if not await self._sleep_until(self.t0 + off):
                return
            while len(self.tasks) >= self.max_inflight and not self.stop.reason:
                await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
            self._spawn(i, off, spec)

    async def closed_loop(self) -> None:
        cfg, w, n = self.cfg, self.plan.worker, self.plan.nworkers
        users = [u for u in range(cfg.concurrency) if u % n == w]
        end = self.t0 + cfg.warmup_s + cfg.duration_s if cfg.duration_s is not None else None
        # max_requests counts measured requests; each worker gets its share of the budget.
        budget = None if cfg.max_requests is None else cfg.max_requests // n + (1 if w < cfg.max_requests % n else 0)
        counter = itertools.count()
        measured = 0

        async def user() -> None:
            nonlocal measured
            scheduled = time.monotonic() - self.t0
            while not self.stop.reason:
                if end is not None and time.monotonic() >= end:
                    return
                if scheduled >= cfg.warmup_s:
                    if budget is not None and measured >= budget:
                        return
                    measured += 1
                rec = await self._one(w + n * next(counter), scheduled)
                if rec.error in ("connect_refused", "connect_error"):
                    await asyncio.sleep(0.05)  # a dead port answers at once: do not spin on it
                scheduled = time.monotonic() - self.t0  # the slot is free: the next request is due now

        await asyncio.gather(*(user() for _ in users))

    async def drain(self) -> None:
        """Wait for in-flight requests (each bounded by its timeout); cancel them if interrupted."""
        while self.tasks:
            if self.stop.reason == "interrupted":
                for t in list(self.tasks):
                    t.cancel()
                await asyncio.gather(*list(self.tasks), return_exceptions=True)
                return
            await asyncio.wait(list(self.tasks), timeout=0.25)

    async def run(self) -> None:
        async with aiohttp.ClientSession(connector=connector(limit=0, ttl_dns_cache=300), auto_decompress=False,
                                         timeout=aiohttp.ClientTimeout(total=None)) as session:
            self.session = session
            await self._sleep_until(self.t0)
            try:
                if self.cfg.mode == "closed":
                    users = asyncio.ensure_future(self.closed_loop())
                    # closed-loop users run their requests inline; watch for an interrupt meanwhile
                    while not users.done():
                        await asyncio.wait([users], timeout=0.25)
                        if self.stop.reason == "interrupted":
                            users.cancel()
                            await asyncio.gather(users, return_exceptions=True)
                    if not users.cancelled() and users.exception() is not None:
                        raise users.exception()
                else:
                    await self.open_loop()
            finally:
                await self.drain()


def _fd_budget() -> int:
    """Sockets this process may open: the soft RLIMIT_NOFILE, raised to the hard limit first."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass
        return max(16, soft - 64)
    except (ImportError, ValueError, OSError):  # not POSIX
        return 1 << 20


async def run_worker(plan: WorkerPlan, t0: float, stop: StopFlag, counters: Counters) -> WorkerOutput:
    """Run one worker to its end. ``t0`` is the monotonic time of offset 0."""
    cpu0, wall0 = time.process_time(), time.monotonic()
    w = _Worker(plan, t0, stop, counters)
    lags: list[float] = []
    probe = asyncio.ensure_future(_probe_loop_lag(lags))
    try:
        await w.run()
    finally:
        probe.cancel()
    return WorkerOutput(w.records, time.process_time() - cpu0, time.monotonic() - wall0, plan.worker, lags)


async def _probe_loop_lag(out: list) -> None:
    """How late a timer of :data:`LOOP_PROBE_S` fires: the event loop's own lag. High with the
    client's CPU busy (the loop has too much to do) or with the host's CPU taken by another
    process (the loop is not scheduled); the client's CPU time tells the two apart."""
    loop = asyncio.get_running_loop()
    while True:
        t = loop.time()
        await asyncio.sleep(LOOP_PROBE_S)
        out.append(max(0.0, loop.time() - t - LOOP_PROBE_S))
