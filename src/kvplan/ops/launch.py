"""Start ``vllm serve`` with a plan's flags as a subprocess kvplan owns, and stop it again.

Used by ``kvplan profile --launch`` and ``kvplan preflight --launch``. The rules, from the test
harness that runs the real CPU server (tests/vllm_server/server.py):

* argv list, never a shell string: a model path with spaces or ``;`` stays one argument;
* bound to 127.0.0.1 on a free port: a launched server is never reachable from the network;
* ``start_new_session=True``: the API server, its EngineCore and workers share one process group
  whose id is the PID kvplan started, so ``stop()`` can signal exactly them (SIGTERM, then SIGKILL
  after a grace period) and nothing else; every process is identified by PID *and* start time,
  so a reused PID is never signalled;
* stdout and stderr go, complete, to one log file that the start-up log parser reads afterwards;
* if vLLM exits before it serves (e.g. it refuses a KV cache too small for max_model_len), the
  caller gets :class:`LaunchFailed` with vLLM's own text and exit code, not a time-out.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from ..errors import KvplanError, UsageError

#: environment variable naming the ``vllm`` executable when ``--vllm-bin`` is not given
ENV_VLLM_BIN = "KVPLAN_VLLM_BIN"
DEFAULT_VLLM_BIN = "vllm"
#: what a Python interpreter given as --vllm-bin runs: the module behind `vllm serve`
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
LOOPBACK = "127.0.0.1"
_POLL_S = 0.5


class LaunchFailed(KvplanError):
    """vLLM exited (or never became healthy) before serving. ``log_text`` is its whole output;
    ``pids`` every process of it that was seen (all stopped by the time this is raised)."""

    def __init__(self, message: str, *, exit_code: Optional[int], log_text: str, log_path: Path,
                 pids: tuple[int, ...] = ()):
        super().__init__(message)
        self.exit_code = exit_code
        self.log_text = log_text
        self.log_path = log_path
        self.pids = pids


# --------------------------------------------------------------------------- processes
@dataclass(frozen=True)
class _Proc:
    pid: int
    start_time: str  # field 22 of /proc/<pid>/stat: tells a reused PID apart

    def alive(self) -> bool:
        st = _proc_stat(self.pid)
        return st is not None and st[1] == self.start_time and st[0] not in ("Z", "X")


def _proc_stat(pid: int) -> Optional[tuple[str, str, int, int]]:
    """(state, start time, parent pid, process group) of a live process, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    rest = raw[raw.rindex(")") + 2:].split()
    return rest[0], rest[19], int(rest[1]), int(rest[2])


def _members(root: _Proc, pgid: int) -> set[_Proc]:
    """Live processes in process group ``pgid`` or descending from ``root`` (a worker that moved to
    its own session is still found through its parent chain)."""
    children: dict[int, list[int]] = {}
    found: set[_Proc] = set()
    stats: dict[int, tuple[str, str, int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        st = _proc_stat(int(entry.name))
        if st is None:
            continue
        stats[int(entry.name)] = st
        children.setdefault(st[2], []).append(int(entry.name))
        if st[3] == pgid and st[0] != "Z":
            found.add(_Proc(int(entry.name), st[1]))
    if root.alive():
        stack = [root.pid]
        while stack:
            for child in children.get(stack.pop(), []):
                found.add(_Proc(child, stats[child][1]))
                stack.append(child)
    return found


# Servers started by this process that are still running: stopped at interpreter exit, so a crash
# or an unhandled error in kvplan never leaves a vLLM behind.
_RUNNING: "set[LaunchedServer]" = set()
_RUNNING_LOCK = threading.Lock()


@atexit.register
def _stop_leftovers() -> None:
    with _RUNNING_LOCK:
        servers = list(_RUNNING)
    for srv in servers:
        with contextlib.suppress(Exception):
            srv.stop(grace_s=5.0)


# --------------------------------------------------------------------------- the server
class LaunchedServer:
    """A ``vllm serve`` kvplan started. Context manager: ``__exit__`` stops it."""

    def __init__(self, proc: subprocess.Popen, argv: Sequence[str], log_path: Path, port: int,
                 env_overrides: Mapping[str, str]):
        self._proc = proc
        self.argv: tuple[str, ...] = tuple(argv)
        self.log_path = log_path
        self.port = port
        self.base_url = f"http://{LOOPBACK}:{port}"
        self.pid = proc.pid
        #: environment variables set for vLLM on top of kvplan's own (e.g. VLLM_CPU_KVCACHE_SPACE)
        self.env_overrides = dict(env_overrides)
        self.startup_seconds: Optional[float] = None
        self.exit_code: Optional[int] = None
        st = _proc_stat(proc.pid)
        self._root = _Proc(proc.pid, st[1] if st else "?")
        self._seen: set[_Proc] = {self._root}
        self._lock = threading.Lock()
        self._t0 = time.monotonic()

    # -- state
    def _refresh(self) -> None:
        found = _members(self._root, self.pid)
        with self._lock:
            self._seen |= found

    def processes_seen(self) -> tuple[int, ...]:
        """PIDs of every process of this server seen so far (API server, EngineCore, workers)."""
        self._refresh()
        with self._lock:
            return tuple(sorted(p.pid for p in self._seen))

    def alive_pids(self) -> tuple[int, ...]:
        """PIDs of this server's processes still alive (empty after ``stop()``)."""
        self._refresh()
        with self._lock:
            return tuple(sorted(p.pid for p in self._seen if p.alive()))

    def is_running(self) -> bool:
        return self._proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    # -- lifecycle
    def wait_ready(self, timeout_s: float) -> "LaunchedServer":
        """Poll ``/health`` (200) then ``/v1/models`` (200) until the server serves. Raises
        LaunchFailed, after stopping it, when vLLM exits first or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        healthy = False
        while True:
            rc = self._proc.poll()
            if rc is not None:
                self.stop(grace_s=5.0)
                text = self.log_text()
                raise LaunchFailed(f"vLLM exited with code {rc} before serving (log: {self.log_path}):\n"
                                   f"{_reason(text)}", exit_code=rc, log_text=text, log_path=self.log_path,
                                   pids=self.processes_seen())
            if not healthy:
                healthy = _get_status(self.base_url + "/health") == 200
            if healthy and _get_status(self.base_url + "/v1/models") == 200:
                self.startup_seconds = time.monotonic() - self._t0
                self._refresh()
                return self
            if time.monotonic() > deadline:
                self.stop(grace_s=5.0)
                text = self.log_text()
                raise LaunchFailed(f"vLLM did not serve within {timeout_s:.0f} s (log: {self.log_path}):\n"
                                   f"{_reason(text)}", exit_code=self.exit_code, log_text=text,
                                   log_path=self.log_path, pids=self.processes_seen())
            self._refresh()
            time.sleep(_POLL_S)

    def stop(self, grace_s: float = 30.0) -> Optional[int]:
        """SIGTERM the process group (and any descendant that left it), SIGKILL what is still alive
        after ``grace_s``. Only processes this server started are signalled. Idempotent; returns
        vLLM's exit code."""
        self._refresh()
        with self._lock:
            procs = set(self._seen)
        self._signal(procs, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(p.alive() for p in procs):
            self._reap()
            time.sleep(0.1)
        if any(p.alive() for p in procs):
            self._signal(procs, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(p.alive() for p in procs):
                self._reap()
                time.sleep(0.1)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)
        self.exit_code = self._proc.returncode
        with _RUNNING_LOCK:
            _RUNNING.discard(self)
        return self.exit_code

    def _signal(self, procs: set[_Proc], sig: int) -> None:
        if self._root.alive() or any(p.alive() for p in procs):
            # The group id is the PID we started with start_new_session: only our processes are in it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)
        for p in procs:
            if p.alive():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p.pid, sig)

    def _reap(self) -> None:
        self._proc.poll()  # collect the leader's exit status, so it does not linger as a zombie

    def __enter__(self) -> "LaunchedServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<LaunchedServer pid={self.pid} {self.base_url} log={self.log_path}>"


# --------------------------------------------------------------------------- launching
def resolve_vllm_bin(vllm_bin: Optional[str] = None) -> str:
    """The ``vllm`` executable to run: ``vllm_bin`` if given (a path or a name on PATH), else
    $KVPLAN_VLLM_BIN, else ``vllm`` on PATH. UsageError naming it when it cannot be run."""
    name = vllm_bin if vllm_bin and vllm_bin != DEFAULT_VLLM_BIN else os.environ.get(ENV_VLLM_BIN) or DEFAULT_VLLM_BIN
    if os.sep in name:
        path = Path(name)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise UsageError(f"vLLM executable {name!r} not found or not executable (give --vllm-bin PATH "
                             f"or set {ENV_VLLM_BIN})")
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise UsageError(f"vLLM executable {name!r} not found on PATH (install vLLM, or give --vllm-bin PATH "
                         f"or set {ENV_VLLM_BIN})")
    return found


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def has_flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def is_python(vllm_bin: str) -> bool:
    """A Python interpreter (``.../bin/python3.11``) rather than the ``vllm`` script."""
    return re.fullmatch(r"python(\d+(\.\d+)?)?", Path(vllm_bin).name) is not None


def build_argv(plan_result, vllm_bin: str, port: int, extra_args: Sequence[str] = ()) -> list[str]:
    """``[vllm_bin, "serve", MODEL, *plan flags, --host 127.0.0.1, --port PORT, *extra_args]``.

    ``plan_result.serve_argv`` is ``("vllm", "serve", MODEL, flags...)`` (kvplan.memory.launch).
    When ``vllm_bin`` is a Python interpreter (vLLM installed in another virtualenv, or a build
    whose ``vllm`` script is broken, like vllm-cpu 0.32's, which looks up the "vllm" distribution
    and finds "vllm-cpu"), the same server runs as ``python -m vllm.entrypoints.openai.api_server
    --model MODEL``: the module ``vllm serve`` starts, with the same flags.
    On the CPU backend a plan without an explicit KV size gets ``--kv-cache-memory-bytes`` set to
    the plan's own KV memory: otherwise vLLM would size the cache from ``gpu_memory_utilization``
    × the NUMA node's memory, which is not what was planned (and often more than is free)."""
    serve = [str(a) for a in plan_result.serve_argv]
    if len(serve) < 3 or serve[1] != "serve":
        raise UsageError(f"the plan's serve command is not `vllm serve MODEL ...`: {serve!r}")
    for reserved in ("--host", "--port"):
        if has_flag(serve, reserved) or has_flag(extra_args, reserved):
            raise UsageError(f"{reserved} is chosen by kvplan (127.0.0.1 and a free port); remove it")
    if is_python(vllm_bin):
        argv = [vllm_bin, "-m", API_SERVER_MODULE, "--model", serve[2], *serve[3:]]
    else:
        argv = [vllm_bin, "serve", *serve[2:]]
    if (plan_result.flags.device == "cpu" and not has_flag(argv, "--kv-cache-memory-bytes")
            and not has_flag(extra_args, "--kv-cache-memory-bytes")):
        argv += ["--kv-cache-memory-bytes", str(int(plan_result.memory.available_kv_cache_bytes))]
    return argv + ["--host", LOOPBACK, "--port", str(port), *[str(a) for a in extra_args]]


def build_env(argv: Sequence[str], env: Optional[Mapping[str, str]]) -> tuple[dict[str, str], dict[str, str]]:
    """(the child's environment, what kvplan set on top of the inherited one).

    VLLM_CPU_KVCACHE_SPACE overrides ``--kv-cache-memory-bytes`` on vLLM's CPU backend
    (vllm/platforms/cpu.py, "Legacy setting"), so an inherited value would silently replace the
    planned KV size: it is dropped when the argv sets the size, unless ``env`` passes it on purpose."""
    overrides = {k: str(v) for k, v in (env or {}).items()}
    child = dict(os.environ)
    if has_flag(argv, "--kv-cache-memory-bytes") and "VLLM_CPU_KVCACHE_SPACE" not in overrides:
        child.pop("VLLM_CPU_KVCACHE_SPACE", None)
    overrides.setdefault("PYTHONUNBUFFERED", "1")  # the log is complete up to the moment vLLM exits
    child.update(overrides)
    return child, overrides


def launch_vllm(plan_result, *, vllm_bin: str = DEFAULT_VLLM_BIN, extra_args: Sequence[str] = (),
                env: Optional[Mapping[str, str]] = None, port: Optional[int] = None,
                log_path: Optional[Path] = None, startup_timeout_s: float = 900.0) -> LaunchedServer:
    """Start ``vllm serve`` with ``plan_result``'s flags on 127.0.0.1 and wait until it serves.

    Raises UsageError when the executable is missing, LaunchFailed (with vLLM's log and exit code)
    when vLLM exits or does not serve within ``startup_timeout_s``. A KeyboardInterrupt while
    waiting stops the server before it propagates. The caller stops the returned server (``with``
    or ``stop()``); at interpreter exit any server still running is stopped."""
    binary = resolve_vllm_bin(vllm_bin)
    attempts = 1 if port is not None else 3
    for attempt in range(attempts):
        chosen = port if port is not None else free_port()
        srv = _start(plan_result, binary, chosen, extra_args, env, log_path)
        try:
            return srv.wait_ready(startup_timeout_s)
        except LaunchFailed as exc:
            # The port was free when picked; another process may have taken it since. Retry once
            # or twice on a new port, never on a real start-up failure.
            if attempt + 1 < attempts and "address already in use" in exc.log_text.lower():
                continue
            raise
        except BaseException:
            srv.stop(grace_s=5.0)
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def _start(plan_result, binary: str, port: int, extra_args: Sequence[str], env: Optional[Mapping[str, str]],
           log_path: Optional[Path]) -> LaunchedServer:
    argv = build_argv(plan_result, binary, port, extra_args)
    child_env, overrides = build_env(argv, env)
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix=f"kvplan-vllm-{port}-", suffix=".log")
        os.close(fd)
        path = Path(name)
    else:
        path = Path(log_path)
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "wb") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=child_env, start_new_session=True)
    except OSError as exc:
        raise UsageError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
    srv = LaunchedServer(proc, argv, path, port, overrides)
    with _RUNNING_LOCK:
        _RUNNING.add(srv)
    return srv


# The launched server is on 127.0.0.1: an http_proxy in the environment must not be asked for it.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get_status(url: str, timeout_s: float = 3.0) -> Optional[int]:
    """HTTP status of GET ``url`` on the loopback server (None: no answer yet)."""
    try:
        with _NO_PROXY.open(url, timeout=timeout_s) as r:
            r.read()
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, urllib.error.URLError, ValueError):
        return None


def _reason(text: str, tail_lines: int = 15) -> str:
    """vLLM's own error lines (read by the one start-up log parser), else the log's last lines."""
    from ..memory.startup_log import parse_startup_log

    errors = list(dict.fromkeys(parse_startup_log(text).errors))  # each once, in order
    if errors:
        return "\n".join(errors)
    return "\n".join(text.splitlines()[-tail_lines:]) or "(vLLM wrote nothing)"
