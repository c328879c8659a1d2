"""The page's work runs in killable processes: a few at a time, each with a deadline.

A thread cannot be stopped, so one long simulation in the server's executor kept running after its
client left and held Ctrl-C for as long as it ran. Here each job runs in a process forked from a
``forkserver`` that imported kvplan once (a clean, single-threaded parent: forking the server
itself, with its event loop and threads, could inherit a held lock). A job is killed (SIGKILL, by
its PID: our own child) when its deadline passes, when the client disconnects (the handler is
cancelled) and when the server stops; at most ``slots`` run at once and one more is refused with
429 rather than queued, so no request can pile up work behind the page's back. A process whose job
ended cleanly may take the next one (see :class:`JobPool`); one that was stopped never does.

Inside a job the library runs under the page's caps (:data:`kvplan.limits.PAGE`) and, as a last
line, an address-space limit (``resource.RLIMIT_AS``), so a job that still grows too large fails
with MemoryError, reported as a usage error, instead of taking the machine.
"""
from __future__ import annotations

import asyncio
import importlib
import multiprocessing as mp
import os
import signal
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional

#: modules the forkserver imports once, so that each job starts in milliseconds (this one too: a job
#: unpickles its entry point from it, and its imports, asyncio's included, cost ~50 ms each time)
PRELOAD = ["kvplan.ui.jobs", "kvplan.ui.job_main"]
DEFAULT_SLOTS = 2
DEFAULT_DEADLINE_S = 120.0
#: jobs one process runs before it is replaced (what a job leaves behind cannot accumulate)
JOBS_PER_PROCESS = 100
#: the address space one job may map (Python, numpy, tokenizers and the work: a 100,000-request
#: simulation peaks near 0.3 GB resident)
JOB_MEMORY_BYTES = 4 << 30


class PoolFull(Exception):
    """Every slot is busy: answered 429."""


class JobTimeout(Exception):
    """The job ran past its deadline and was stopped: answered 503."""


class JobFailed(Exception):
    """The job's process died without an answer (killed, out of memory): answered 500 or 503."""


class JobError(Exception):
    """The job raised: ``kind`` is usage / kvplan / memory / bug, ``message`` what to say."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


_CTX_LOCK = threading.Lock()
_CTX: Optional[Any] = None


def _context():
    """The forkserver context, its preload set once per process."""
    global _CTX
    with _CTX_LOCK:
        if _CTX is None:
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD)
            _CTX = ctx
        return _CTX


class _Worker:
    """A job process, its two pipes (tasks in, results out) and how many jobs it has run."""

    __slots__ = ("proc", "tasks", "results", "jobs")

    def __init__(self, proc: Any, tasks: Any, results: Any):
        self.proc, self.tasks, self.results, self.jobs = proc, tasks, results, 0


class JobPool:
    """Run ``module:function(*args)`` in a job process; see the module docstring.

    A process that finished its job cleanly waits for the next one (at most ``slots`` wait, each
    runs at most :data:`JOBS_PER_PROCESS`): a fresh fork pays for every page of the inherited heap
    it touches (CPython writes reference counts), about 50 ms of a plan's 70, once. A process that
    was stopped, ran out of memory or hit a bug is never reused. The first process is forked ahead.
    """

    def __init__(self, slots: int = DEFAULT_SLOTS, deadline_s: float = DEFAULT_DEADLINE_S,
                 memory_bytes: Optional[int] = JOB_MEMORY_BYTES):
        if slots < 1:
            raise ValueError("a pool needs at least one slot")
        self.slots = slots
        self.deadline_s = deadline_s
        self.memory_bytes = memory_bytes
        self._running: dict[int, Any] = {}  # pid -> process of a job that was given its task
        self._busy = 0  # slots taken (a job being started counts)
        self.started = 0  # jobs started since the pool was made
        self._closed = False
        self._idle: list[_Worker] = []  # processes waiting for a task
        self._forking: Optional[Future] = None  # a process forked ahead (warm())
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvplan-ui-fork")
        # one thread per slot waits on its job's pipe (a blocking recv ends when the job ends or dies)
        self._waiters = ThreadPoolExecutor(max_workers=slots * 2, thread_name_prefix="kvplan-ui-job")

    @property
    def running(self) -> int:
        return len(self._running)

    def pids(self) -> list[int]:
        return list(self._running)

    def warm(self) -> None:
        """Start the forkserver now (it imports kvplan once) and fork the first job's process."""
        from multiprocessing import forkserver

        _context()
        forkserver.ensure_running()
        if self._forking is None and not self._closed:
            self._forking = self._spawner.submit(self._spawn)

    def _spawn(self) -> _Worker:
        """A new job process waiting for its task (blocks ~10-20 ms: in the spawner thread)."""
        ctx = _context()
        task_recv, task_send = ctx.Pipe(duplex=False)
        result_recv, result_send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_serve, args=(task_recv, result_send, self.memory_bytes), daemon=True,
                           name="kvplan-ui-job")
        proc.start()
        task_recv.close()
        result_send.close()
        return _Worker(proc, task_send, result_recv)

    async def _take(self) -> _Worker:
        """An idle process, the one forked ahead, or a new one."""
        while self._idle:
            worker = self._idle.pop()
            if worker.proc.exitcode is None:
                return worker
            _discard_worker(worker)
        forking = self._forking if self._forking is not None else self._spawner.submit(self._spawn)
        self._forking = None
        try:
            return await asyncio.shield(asyncio.wrap_future(forking))
        except asyncio.CancelledError:
            forking.add_done_callback(_discard)
            raise

    def _give_back(self, worker: _Worker) -> None:
        worker.jobs += 1
        if self._closed or worker.jobs >= JOBS_PER_PROCESS or len(self._idle) >= self.slots:
            _discard_worker(worker)
        else:
            self._idle.append(worker)

    async def run(self, target: str, *args: Any, deadline_s: Optional[float] = None) -> Any:
        """The job's result. Raises PoolFull, JobTimeout, JobFailed or JobError; on cancellation
        (the client left, the server stops) the job is killed before CancelledError goes on."""
        if self._closed:
            raise JobFailed("the server is stopping")
        if self._busy >= self.slots:
            raise PoolFull(f"{self.slots} jobs are already running (the page runs at most {self.slots} at once): "
                           "try again when one finishes")
        self._busy += 1
        try:
            worker = await self._take()
            if self._closed:
                _discard_worker(worker)
                raise JobFailed("the server is stopping")
            return await self._run_on(worker, target, args, deadline_s or self.deadline_s)
        finally:
            self._busy -= 1

    async def _run_on(self, worker: _Worker, target: str, args: tuple, deadline_s: float) -> Any:
        proc = worker.proc
        self._running[proc.pid] = proc
        self.started += 1
        clean = False
        try:
            worker.tasks.send((target, args))
            waiting = asyncio.get_running_loop().run_in_executor(self._waiters, _receive, worker.results)
            try:
                status, payload = await asyncio.wait_for(waiting, deadline_s)
            except asyncio.TimeoutError:
                raise JobTimeout(f"the job ran past its deadline of {deadline_s:g} s and was stopped (run the same "
                                 "flags with the kvplan CLI)") from None
            clean = status in ("ok", "usage", "kvplan")
        except (BrokenPipeError, OSError) as exc:  # it died before taking its task
            raise JobFailed(f"the job's process was gone ({type(exc).__name__})") from None
        finally:
            self._running.pop(proc.pid, None)
            if clean:
                self._give_back(worker)
            else:  # stopped, cancelled, out of memory, a bug: never reused
                _discard_worker(worker)
        if status == "ok":
            return payload
        if status == "died":
            raise JobFailed(f"the job's process ended without an answer (exit code {proc.exitcode})")
        raise JobError(status, payload)

    def close(self) -> None:
        """Kill every job and idle process (the server stops); later runs are refused."""
        self._closed = True
        for proc in list(self._running.values()):
            _kill(proc)
        self._running.clear()
        for worker in self._idle:
            _discard_worker(worker)
        self._idle.clear()
        if self._forking is not None:
            self._forking.add_done_callback(_discard)
            self._forking = None
        self._spawner.shutdown(wait=False, cancel_futures=True)
        self._waiters.shutdown(wait=False, cancel_futures=True)


def _kill(proc) -> None:
    if proc.exitcode is None:
        try:
            os.kill(proc.pid, signal.SIGKILL)  # our own child, by its PID
        except ProcessLookupError:
            pass
    proc.join(timeout=5)


def _discard_worker(worker: _Worker) -> None:
    _kill(worker.proc)
    for conn in (worker.tasks, worker.results):
        conn.close()


def _discard(future: Future) -> None:
    """A spare nobody will use (the pool closed, its taker left): killed once it exists."""
    if not future.cancelled() and future.exception() is None:
        _discard_worker(future.result())


def _receive(conn) -> tuple[str, Any]:
    try:
        return conn.recv()
    except (EOFError, OSError):
        return "died", None


def _serve(tasks, conn, memory_bytes: Optional[int]) -> None:  # pragma: no cover - a child
    """A job process: run each task it is given under the page's caps, send (status, payload);
    exit when the pool closes its pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the server stops the jobs
    if memory_bytes:
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        except (ImportError, ValueError, OSError):
            pass
    while True:
        try:
            target, args = tasks.recv()
        except (EOFError, OSError):  # the pool closed its end
            return
        _entry(conn, target, args)


def _entry(conn, target: str, args: tuple) -> None:  # pragma: no cover - a child
    from ..limits import PAGE, using

    try:
        module, _, name = target.partition(":")
        fn = getattr(importlib.import_module(module), name)
        with using(PAGE):
            out: tuple[str, Any] = ("ok", fn(*args))
    except BaseException as exc:  # noqa: BLE001 - every outcome goes back to the server as data
        out = _classify(exc)
    try:
        conn.send(out)
    except Exception:  # noqa: BLE001 - e.g. an answer too big or unpicklable: say so instead
        conn.send(_classify(RuntimeError("the job's answer could not be sent back")))


def _classify(exc: BaseException) -> tuple[str, str]:
    from ..errors import KvplanError, UsageError

    if isinstance(exc, UsageError):
        return "usage", str(exc)
    if isinstance(exc, KvplanError):
        return "kvplan", str(exc)
    if isinstance(exc, MemoryError):
        return "memory", ("the job ran out of its memory budget "
                          f"({JOB_MEMORY_BYTES >> 30} GiB): ask for less, or run the same flags with the kvplan CLI")
    import traceback

    return "bug", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
