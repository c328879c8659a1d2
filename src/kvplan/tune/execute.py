"""Running the simulations of a sweep: in this process, in a process pool, or on a Ray cluster.

Every backend runs the same pure function on the same inputs (the trace is already drawn, the
simulator is deterministic) and returns the outputs in task order, so the ranking cannot depend on
the backend or the number of processes. The trace travels once per worker (a pool initializer, a
Ray object-store reference), not once per task.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from .._ray import connect as _connect
from .._ray import import_ray as _ray
from ..errors import UsageError

#: The worker's copy of what every task shares (set by the pool initializer or the Ray task).
_SHARED: dict[str, Any] = {}


@dataclass(frozen=True)
class Backend:
    kind: str  # serial | processes | ray
    workers: int
    address: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "workers": self.workers, "address": self.address}


def choose_backend(processes: Optional[int], ray_address: Optional[str], tasks: int) -> Backend:
    """Ray when an address is given; else ``processes`` (default: the CPU count) capped by the
    number of tasks; one means in this process."""
    if processes is not None and processes < 1:
        raise UsageError(f"--processes must be at least 1, got {processes}")
    if ray_address:
        return Backend("ray", processes or 0, ray_address)
    n = processes or os.cpu_count() or 1
    n = max(1, min(n, tasks))
    return Backend("serial" if n == 1 else "processes", n)


def _init_worker(shared: dict[str, Any]) -> None:
    _SHARED.clear()
    _SHARED.update(shared)


def _run_chunk(fn: Callable[[Any, dict], Any], chunk: Sequence[Any]) -> list[Any]:
    return [fn(task, _SHARED) for task in chunk]


class Runner:
    """A backend kept open across the phases of a sweep (planning, then simulating): one pool, or
    one Ray connection, for both. ``shared`` reaches every worker once."""

    def __init__(self, backend: Backend, shared: dict[str, Any]):
        self.backend = backend
        self.shared = shared
        self._pool = None
        self._shared_ref = None
        self._ray_owned = False  # this runner joined the cluster: it leaves it at the end

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._ray_owned:
            _ray().shutdown()
            self._ray_owned = False

    def map(self, fn: Callable[[Any, dict], Any], tasks: Sequence[Any]) -> list[Any]:
        """``[fn(task, shared) for task in tasks]``, in task order. ``fn`` must be a module-level
        function (it is pickled by name)."""
        if not tasks:
            return []
        kind = self.backend.kind
        if kind == "serial" or len(tasks) == 1 and kind != "ray":
            return [fn(t, self.shared) for t in tasks]
        if kind == "ray":
            return self._map_ray(fn, tasks)
        if self._pool is None:
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(max_workers=self.backend.workers, initializer=_init_worker,
                                             initargs=(self.shared,))
        chunks, n = _chunks(tasks, self.backend.workers)
        parts = list(self._pool.map(_run_chunk, [fn] * len(chunks), chunks))
        return _uninterleave(parts, n, len(tasks))

    def _map_ray(self, fn, tasks: Sequence[Any]) -> list[Any]:
        global _RAY_FN
        ray = _ray()
        if self._shared_ref is None:
            if not ray.is_initialized():
                _connect(self.backend.address or "local")
                self._ray_owned = True
            self._shared_ref = ray.put(self.shared)
        if _RAY_FN is None:
            _RAY_FN = ray.remote(num_cpus=1)(_ray_chunk)
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        chunks, n = _chunks(tasks, cpus)
        parts = ray.get([_RAY_FN.remote(fn, self._shared_ref, c) for c in chunks])
        return _uninterleave(parts, n, len(tasks))


def run_tasks(fn: Callable[[Any, dict], Any], tasks: Sequence[Any], shared: dict[str, Any],
              backend: Backend) -> list[Any]:
    """One ``Runner.map`` on a fresh backend."""
    with Runner(backend, shared) as runner:
        return runner.map(fn, tasks)


def _chunks(tasks: Sequence[Any], workers: int) -> tuple[list[list[Any]], int]:
    """About four chunks per worker: few round trips, and a slow chunk cannot leave the others idle
    for long. Tasks are interleaved so that each chunk mixes cheap and expensive configurations."""
    n = max(1, min(len(tasks), workers * 4))
    return [list(tasks[k::n]) for k in range(n) if tasks[k::n]], n


# ---- Ray ---------------------------------------------------------------------------------------

_RAY_FN = None


def _ray_chunk(fn, shared, chunk):
    _init_worker(shared)
    return _run_chunk(fn, chunk)


def _uninterleave(parts: list[list[Any]], n: int, total: int) -> list[Any]:
    out: list[Any] = [None] * total
    for k, part in enumerate(parts):
        for j, r in enumerate(part):
            out[k + j * n] = r
    return out
