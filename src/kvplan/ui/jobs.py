"""The page's work runs in killable processes: a few at a time, each with a deadline.

A thread cannot be stopped, so one long simulation in the server's executor kept running after its
client left and held Ctrl-C for as long as it ran. Here each job is a fresh process forked from a
``forkserver`` that imported kvplan once (a clean, single-threaded parent: forking the server
itself, with its event loop and threads, could inherit a held lock). A job is killed (SIGKILL, by
its PID: our own child) when its deadline passes, when the client disconnects (the handler is
cancelled) and when the server stops; at most ``slots`` run at once and one more is refused with
429 rather than queued, so no request can pile up work behind the page's back.

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
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

#: modules the forkserver imports once, so that each job starts in milliseconds
PRELOAD = ["kvplan.ui.job_main"]
DEFAULT_SLOTS = 2
DEFAULT_DEADLINE_S = 120.0
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


class JobPool:
    """Run ``module:function(*args)`` in a child process; see the module docstring."""

    def __init__(self, slots: int = DEFAULT_SLOTS, deadline_s: float = DEFAULT_DEADLINE_S,
                 memory_bytes: Optional[int] = JOB_MEMORY_BYTES):
        if slots < 1:
            raise ValueError("a pool needs at least one slot")
        self.slots = slots
        self.deadline_s = deadline_s
        self.memory_bytes = memory_bytes
        self._running: dict[int, Any] = {}  # pid -> process
        self.started = 0  # jobs started since the pool was made
        self._closed = False
        # one thread per slot waits on its job's pipe (a blocking recv ends when the job ends or dies)
        self._waiters = ThreadPoolExecutor(max_workers=slots * 2, thread_name_prefix="kvplan-ui-job")

    @property
    def running(self) -> int:
        return len(self._running)

    def pids(self) -> list[int]:
        return list(self._running)

    def warm(self) -> None:
        """Start the forkserver now (it imports kvplan once), not at the first request."""
        from multiprocessing import forkserver

        _context()
        forkserver.ensure_running()

    async def run(self, target: str, *args: Any, deadline_s: Optional[float] = None) -> Any:
        """The job's result. Raises PoolFull, JobTimeout, JobFailed or JobError; on cancellation
        (the client left, the server stops) the job is killed before CancelledError goes on."""
        if self._closed:
            raise JobFailed("the server is stopping")
        if len(self._running) >= self.slots:
            raise PoolFull(f"{self.slots} jobs are already running (the page runs at most {self.slots} at once): "
                           "try again when one finishes")
        ctx = _context()
        recv_end, send_end = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_entry, args=(send_end, target, args, self.memory_bytes), daemon=True,
                           name="kvplan-ui-job")
        proc.start()
        send_end.close()
        self.started += 1
        self._running[proc.pid] = proc
        loop = asyncio.get_running_loop()
        try:
            waiting = loop.run_in_executor(self._waiters, _receive, recv_end)
            try:
                status, payload = await asyncio.wait_for(waiting, deadline_s or self.deadline_s)
            except asyncio.TimeoutError:
                raise JobTimeout(f"the job ran past its deadline of {deadline_s or self.deadline_s:g} s and was "
                                 "stopped (run the same flags with the kvplan CLI)") from None
        finally:
            self._kill(proc)
            recv_end.close()
        if status == "ok":
            return payload
        if status == "died":
            raise JobFailed(f"the job's process ended without an answer (exit code {proc.exitcode})")
        raise JobError(status, payload)

    def _kill(self, proc) -> None:
        self._running.pop(proc.pid, None)
        if proc.exitcode is None:
            try:
                os.kill(proc.pid, signal.SIGKILL)  # our own child, by its PID
            except ProcessLookupError:
                pass
        proc.join(timeout=5)

    def close(self) -> None:
        """Kill every running job (the server stops); later runs are refused."""
        self._closed = True
        for proc in list(self._running.values()):
            self._kill(proc)
        self._waiters.shutdown(wait=False, cancel_futures=True)


def _receive(conn) -> tuple[str, Any]:
    try:
        return conn.recv()
    except (EOFError, OSError):
        return "died", None


def _entry(conn, target: str, args: tuple, memory_bytes: Optional[int]) -> None:  # pragma: no cover - a child
    """A job's process: run ``target`` under the page's caps, send (status, payload), exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the server stops the jobs
    if memory_bytes:
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        except (ImportError, ValueError, OSError):
            pass
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
    conn.close()


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
