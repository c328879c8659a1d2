"""Run a load test end to end: discover the model, build the requests, run the worker(s) with the
server scraper on the same clock, and turn the records into a :class:`BenchResult`.

``--workers 1`` runs the load loop in this process; ``--workers N`` starts N processes (spawn,
so no event loop or thread is inherited), each running the same :func:`runner.run_worker` on
its share of the global schedule, all against one ``t0`` on the system-wide monotonic clock. The
scraper and the progress display stay in this process. Ctrl-C (SIGINT reaches the whole
process group) and an unreachable server both stop every worker through one shared flag;
the partial result is still built and written.
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import json
import multiprocessing as mp
import signal
import time
from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import UsageError
from .config import BenchConfig
from .prompts import RequestSource, read_log_requests
from .result import BenchResult, build_result
from .runner import Counters, StopFlag, WorkerOutput, WorkerPlan, run_worker
from .scrape import GpuSampler, ServerScraper

T0_LEAD_S = 0.2  # offset 0 lies this far after everything is ready, so the first arrival is not late
#: The longest the parent waits for its worker processes to start before it sets their common t0.
WORKER_START_S = 120.0
IGNORE_EOS_OWNERS = {"vllm", "sglang"}


class ServerUnavailable(Exception):
    """The server could not be asked for its models (not a usage error: exit code 1)."""


@dataclass(frozen=True)
class Progress:
    """A snapshot for the live display."""

    elapsed: float
    sent: int
    done: int
    ok: int
    failed: int
    output_tokens: int
    mean_lag: Optional[float]
    server: Optional[dict]


#: the longest the model listing may take, in all (a server that trickles bytes included)
SETUP_DEADLINE_S = 10.0


def discover(cfg: BenchConfig) -> tuple[str, Optional[str]]:
    """(model name, owner) from ``/v1/models``: the first model listed, unless --model was given.
    A redirect is an error saying where it pointed (the key is never sent there)."""
    from .http import HttpError, get

    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    url = cfg.base_url + "/v1/models"
    try:
        status, body = get(url, headers, deadline_s=min(SETUP_DEADLINE_S, cfg.timeout_s))
        if status != 200:
            raise HttpError(f"{url} answered HTTP {status}: {body[:200].decode('utf-8', 'replace')}", status)
        data = json.loads(body.decode("utf-8", "replace"))
    except HttpError as exc:
        if exc.location is None and cfg.model:
            return cfg.model, None
        raise ServerUnavailable(f"cannot list models at {url}: {exc}" if exc.location is None else str(exc)) from None
    except (ValueError, RecursionError) as exc:
        if cfg.model:
            return cfg.model, None
        raise ServerUnavailable(f"cannot list models at {url}: the answer is not JSON ({str(exc)[:100]})") from None
    models = [m for m in data.get("data", []) if isinstance(m, dict) and m.get("id")] if isinstance(data, dict) else []
    if cfg.model:
        if models and all(m["id"] != cfg.model for m in models):
            # vLLM would answer 404 ("The model `X` does not exist.") to every request: fail fast.
            served = ", ".join(m["id"] for m in models[:10])
            raise ServerUnavailable(f"--model {cfg.model} is not served at {cfg.base_url} (it serves: {served}); "
                                    "every request would get HTTP 404: fix --model, or omit it to use the first")
        owner = next((m.get("owned_by") for m in models if m["id"] == cfg.model), None)
        return cfg.model, owner
    if not models:
        raise ServerUnavailable(f"{cfg.base_url}/v1/models lists no model; give --model")
    return models[0]["id"], models[0].get("owned_by")


def prepare(cfg: BenchConfig) -> tuple[RequestSource, Optional[list[float]], dict]:
    """The request source (and replay offsets) of a run; raises UsageError on a bad log."""
    model, owner = discover(cfg)
    ignore_eos = cfg.ignore_eos if cfg.ignore_eos is not None else (str(owner).lower() in IGNORE_EOS_OWNERS)
    log, account = [], None
    if cfg.requests_log:
        limit = cfg.max_requests if cfg.replay and cfg.max_requests else None
        log, account = read_log_requests([cfg.requests_log], limit=limit)
    exact = None
    if cfg.prompt_length == "exact":
        from ..workload.tokenizer import ChatTokenizer
        from .exact_prompts import measure
        from .prompts import _WORDS

        tok = ChatTokenizer.from_path(cfg.tokenizer) if cfg.tokenizer else ChatTokenizer.for_model(model)
        if tok is None:
            raise UsageError(f"--prompt-length exact needs the model's tokenizer: none found for {model} offline; "
                             "give --tokenizer DIR")
        exact = measure(tok, cfg.endpoint, _WORDS)
    source = RequestSource(cfg, model, ignore_eos, log, exact)
    offsets = None
    if cfg.replay:
        from ..traffic.arrivals import replay_schedule

        try:
            offsets = replay_schedule(source.timestamps(), cfg.replay_speed)
        except ValueError as exc:
            raise UsageError(f"--replay: {exc}") from None
    info = {"model": model, "server_owner": owner, "ignore_eos": ignore_eos, "requests_log": account,
            "prompt_length": exact.to_dict() if exact else {"mode": "words",
                                                             "note": "N one-token words; the server adds the chat "
                                                                     "template / BOS (see usage.prompt_tokens)"}}
    return source, offsets, info


# --------------------------------------------------------------------------- worker processes
_NCOUNT = 6


def _worker_main(plan: WorkerPlan, t0_shared, stop_shared, counters_shared, out_q, ready_shared) -> None:  # pragma: no cover
    """Entry point of a worker process (covered by the multi-worker tests, in a subprocess)."""
    stop = StopFlag(stop_shared)
    signal.signal(signal.SIGINT, lambda *_: stop.set("interrupted"))
    counters = Counters()
    with ready_shared.get_lock():  # imports done (this module brings aiohttp): ready for t0
        ready_shared.value += 1
    try:
        while t0_shared.value == 0.0:
            time.sleep(0.002)
        out = asyncio.run(_worker_with_counters(plan, t0_shared.value, stop, counters, counters_shared))
        out_q.put(out)
    except BaseException as exc:  # noqa: BLE001 - report, never hang the parent
        stop.set("worker_failed")
        out_q.put(f"worker {plan.worker} failed: {type(exc).__name__}: {exc}")


async def _worker_with_counters(plan, t0, stop, counters, shared) -> WorkerOutput:
    async def publish() -> None:
        base = plan.worker * _NCOUNT
        while True:
            for k, v in enumerate(counters.as_tuple()):
                shared[base + k] = v
            await asyncio.sleep(0.25)

    pub = asyncio.ensure_future(publish())
    try:
        return await run_worker(plan, t0, stop, counters)
    finally:
        pub.cancel()


# --------------------------------------------------------------------------- orchestration
class Bench:
    def __init__(self, cfg: BenchConfig, source: RequestSource, offsets: Optional[list[float]], info: dict,
                 on_progress: Optional[Callable[[Progress], None]] = None):
        self.cfg, self.source, self.offsets, self.info = cfg, source, offsets, info
        self.on_progress = on_progress
        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        self.scraper = ServerScraper(cfg.base_url, cfg.scrape_interval_s, headers)
        self.gpu: Optional[GpuSampler] = None
        self.gpu_notice: Optional[str] = None
        self._loop_lag: list = []

    def run(self) -> tuple[BenchResult, list]:
        started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        if self.cfg.ray_address:
            from .ray_backend import connect

            connect(self.cfg.ray_address)
        if self.cfg.is_local:
            self.gpu = GpuSampler()
            self.gpu_notice = self.gpu.notice
            self.scraper.gpu = self.gpu if self.gpu.active else None
        else:
            self.gpu_notice = "GPU telemetry skipped: the server is not on this host"
        records, stop_reason, cpu_s, wall_s = asyncio.run(self._main())
        loop_lag, self._loop_lag = self._loop_lag, []
        records.sort(key=lambda r: (r.scheduled, r.i))
        meta = {"started_at": started, "kvplan_version": _version(), **self.info}
        result = build_result(self.cfg, records, meta=meta, server=self.scraper.to_dict(),
                              gpu={"active": bool(self.gpu and self.gpu.active), "notice": self.gpu_notice},
                              stop_reason=stop_reason, cpu_s=cpu_s, wall_s=wall_s, loop_lag=loop_lag)
        return result, records

    async def _main(self):
        import aiohttp

        cfg = self.cfg
        loop = asyncio.get_running_loop()
        n = cfg.workers
        if cfg.mode == "closed":
            n = min(n, cfg.concurrency)
        shared_stop = mp.get_context("spawn").Value("i", 0) if n > 1 and not cfg.ray_address else None
        stop = StopFlag(shared_stop)
        interrupts = 0

        def on_sigint() -> None:
            nonlocal interrupts
            interrupts += 1
            stop.set("interrupted")
            if interrupts >= 3:  # a user who insists: stop waiting for anything
                raise KeyboardInterrupt

        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests) / platform
            pass
        scrape_stop = asyncio.Event()
        from .client import connector

        async with aiohttp.ClientSession(connector=connector()) as session:
            t_base = time.monotonic()
            if cfg.scrape_metrics:
                await self.scraper.baseline(session, t_base + T0_LEAD_S)
            else:
                self.scraper.available, self.scraper.notice = False, "server metrics not scraped (--no-metrics)"
            cpu0, wall0 = time.process_time(), time.monotonic()
            if cfg.ray_address:
                records, cpu_s, t0 = await self._ray(n, stop, session, scrape_stop, t_base)
                cpu_s += time.process_time() - cpu0
            elif n == 1:
                t0 = time.monotonic() + T0_LEAD_S
                self.scraper.first = _retime(self.scraper.first, t_base + T0_LEAD_S, t0)
                counters = [Counters()]
                scr = asyncio.ensure_future(self.scraper.loop(session, t0, scrape_stop))
                prog = asyncio.ensure_future(self._progress(t0, lambda: [c.as_tuple() for c in counters], stop))
                try:
                    out = await run_worker(WorkerPlan(cfg, self.source, self.offsets, 0, 1), t0, stop, counters[0])
                finally:
                    scrape_stop.set()
                    await asyncio.gather(scr, return_exceptions=True)
                    prog.cancel()
                records, cpu_s = out.records, time.process_time() - cpu0
                self._loop_lag = out.loop_lag
            else:
                records, cpu_s, t0 = await self._multi(n, stop, shared_stop, session, scrape_stop, t_base)
                cpu_s += time.process_time() - cpu0  # the workers' CPU plus this process' own
            wall_s = time.monotonic() - wall0
            await self.scraper.final(session, t0)
        with _suppress():
            loop.remove_signal_handler(signal.SIGINT)
        return records, stop.reason or "completed", cpu_s, wall_s

    async def _multi(self, n, stop, shared_stop, session, scrape_stop, t_base):
        ctx = mp.get_context("spawn")
        t0_shared = ctx.Value("d", 0.0)
        counters_shared = ctx.Array("d", n * _NCOUNT)
        out_q = ctx.Queue()
        ready = ctx.Value("i", 0)
        procs = []
        for w in range(n):
            plan = WorkerPlan(self.cfg, self.source, self.offsets, w, n)
            p = ctx.Process(target=_worker_main, args=(plan, t0_shared, shared_stop, counters_shared, out_q, ready),
                            name=f"kvplan-bench-worker-{w}", daemon=True)
            p.start()
            procs.append(p)
        # Worker start-up (interpreter + imports) takes a second idle, several on a loaded host: the
        # common t0 comes once every worker says it is ready (or one died, or WORKER_START_S passed),
        # so the schedule does not start behind.
        started = time.monotonic()
        while (ready.value < n and all(p.is_alive() for p in procs)
               and time.monotonic() - started < WORKER_START_S):
            await asyncio.sleep(0.01)
        t0 = time.monotonic() + T0_LEAD_S
        self.scraper.first = _retime(self.scraper.first, t_base + T0_LEAD_S, t0)
        t0_shared.value = t0
        scr = asyncio.ensure_future(self.scraper.loop(session, t0, scrape_stop))

        def read_counters():
            vals = list(counters_shared)
            return [tuple(vals[w * _NCOUNT:(w + 1) * _NCOUNT]) for w in range(n)]

        prog = asyncio.ensure_future(self._progress(t0, read_counters, stop))
        outs: list = []
        failures: list[str] = []
        # Each worker ends by itself (schedule end + request timeouts); this bound only guards
        # against a worker that hangs, so the parent always returns and writes a result.
        deadline = t0 + self._planned_s() + self.cfg.timeout_s + 60.0 if self.cfg.duration_s else None
        try:
            while len(outs) + len(failures) < n:
                item = await asyncio.get_running_loop().run_in_executor(None, _q_get, out_q, 0.5)
                if item is None:
                    if all(not p.is_alive() for p in procs) and out_q.empty():
                        failures.append("a worker exited without a result")
                        break
                    if deadline is not None and time.monotonic() > deadline:
                        stop.set("worker_failed")
                        failures.append("workers did not finish in time")
                        break
                    continue
                (failures if isinstance(item, str) else outs).append(item)
        finally:
            scrape_stop.set()
            await asyncio.gather(scr, return_exceptions=True)
            prog.cancel()
            for p in procs:
                p.join(timeout=5)
                if p.is_alive():  # our own child, by PID
                    p.kill()
                    p.join(timeout=5)
        if failures:
            stop.set("worker_failed")
            self.info = {**self.info, "worker_failures": failures}
        records = [r for o in outs for r in o.records]
        self._loop_lag = [x for o in outs for x in o.loop_lag]
        return records, sum(o.cpu_s for o in outs), t0

    async def _ray(self, n, stop, session, scrape_stop, t_base):
        from .ray_backend import run_ray_workers

        rows: list = []
        tasks: list = []

        def on_counters(new_rows) -> None:
            rows[:] = new_rows

        def on_start(t0: float) -> None:
            self.scraper.first = _retime(self.scraper.first, t_base + T0_LEAD_S, t0)
            tasks.append(asyncio.ensure_future(self.scraper.loop(session, t0, scrape_stop)))
            tasks.append(asyncio.ensure_future(self._progress(t0, lambda: rows or [(0,) * _NCOUNT], stop)))

        try:
            return await run_ray_workers(self, n, stop, on_counters, on_start)
        finally:
            scrape_stop.set()
            for t in tasks[1:]:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _planned_s(self) -> float:
        return self.cfg.warmup_s + (self.cfg.duration_s or 0.0)

    async def _progress(self, t0: float, read, stop: StopFlag) -> None:
        if self.on_progress is None:
            return
        while True:
            rows = read()
            tot = [sum(r[k] for r in rows) for k in range(_NCOUNT)]
            sent, done, ok, failed, out_tok, lag_sum = tot
            last = self.scraper.samples[-1] if self.scraper.samples else None
            self.on_progress(Progress(time.monotonic() - t0, int(sent), int(done), int(ok), int(failed), int(out_tok),
                                      lag_sum / done if done else None, last))
            await asyncio.sleep(0.5)


def _q_get(q, timeout: float):
    import queue

    try:
        return q.get(timeout=timeout)
    except queue.Empty:
        return None


def _retime(snap, old_t0: float, new_t0: float):
    """Shift a snapshot's time onto the final t0 (the baseline is taken before t0 is fixed)."""
    if snap is None or snap.t is None:
        return snap
    from dataclasses import replace

    return replace(snap, t=snap.t + old_t0 - new_t0)


class _suppress:  # noqa: N801 - used as contextlib.suppress is
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("kvplan")
    except Exception:  # noqa: BLE001
        return "unknown"


def run_bench(cfg: BenchConfig, on_progress: Optional[Callable[[Progress], None]] = None) -> tuple[BenchResult, list]:
    """Validate, prepare and run. Returns the result and the raw records (for the records file)."""
    cfg.validate()
    source, offsets, info = prepare(cfg)
    return Bench(cfg, source, offsets, info, on_progress).run()
