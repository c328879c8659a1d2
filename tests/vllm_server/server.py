"""Start / stop a real vLLM (CPU build) OpenAI server as a subprocess, on 127.0.0.1 only.

* argv list, never a shell string; ``start_new_session=True`` so the server and the
  EngineCore / worker processes it spawns share one process group that we can kill.
* ``stop()`` sends SIGTERM to the group, waits a grace period, then SIGKILL.
* Every server started is recorded in a PID registry (pid + /proc start time, and every
  descendant seen while it ran); ``alive_registered_processes()`` lists what is still
  running, and an ``atexit`` hook kills any group left behind.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import pathlib
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from typing import Iterable, Mapping, NamedTuple, Sequence

from . import env

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
DEFAULT_SERVED_NAME = "kvplan-tiny"
DEFAULT_STARTUP_TIMEOUT = 240.0
DEFAULT_STOP_GRACE = 20.0


class VllmStartupError(RuntimeError):
    """The server exited (or never became healthy) during start-up. ``log_text`` has its output."""

    def __init__(self, message: str, log_text: str = "", returncode: int | None = None):
        super().__init__(message)
        self.log_text = log_text
        self.returncode = returncode


# --------------------------------------------------------------------------- process registry
@dataclasses.dataclass(frozen=True)
class ProcId:
    pid: int
    start_time: str  # field 22 of /proc/<pid>/stat: tells a reused PID apart

    def alive(self) -> bool:
        st = _proc_stat(self.pid)
        return st is not None and st[1] == self.start_time and st[0] != "Z"


def _proc_stat(pid: int) -> tuple[str, str, int, int] | None:
    """(state, start_time, ppid, pgid) of a process, or None if it is gone."""
    try:
        raw = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = raw[raw.rindex(")") + 2 :].split()
    # rest[0] = state (field 3), rest[1] = ppid (4), rest[2] = pgrp (5), rest[19] = starttime (22)
    return rest[0], rest[19], int(rest[1]), int(rest[2])


def _proc_id(pid: int) -> ProcId | None:
    st = _proc_stat(pid)
    return ProcId(pid, st[1]) if st else None


def _descendants_and_group(root: int, pgid: int) -> set[ProcId]:
    """Every live process that is a descendant of ``root`` or in process group ``pgid``."""
    children: dict[int, list[int]] = {}
    found: set[ProcId] = set()
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        st = _proc_stat(int(d.name))
        if st is None:
            continue
        children.setdefault(st[2], []).append(int(d.name))
        if st[3] == pgid and st[0] != "Z":
            found.add(ProcId(int(d.name), st[1]))
    stack = [root]
    while stack:
        p = stack.pop()
        for c in children.get(p, []):
            pid_ = _proc_id(c)
            if pid_:
                found.add(pid_)
            stack.append(c)
    return found


_registry_lock = threading.Lock()
#: every process id seen belonging to a server started by this module (root + descendants)
_REGISTRY: dict[int, "ProcRecord"] = {}


@dataclasses.dataclass
class ProcRecord:
    root: ProcId
    pgid: int
    label: str
    seen: set[ProcId] = dataclasses.field(default_factory=set)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

    def refresh(self) -> None:
        """Record every live descendant / process-group member (EngineCore, workers, trackers)."""
        found = _descendants_and_group(self.root.pid, self.pgid) if self.root.alive() else set()
        with self.lock:
            self.seen = self.seen | found | {self.root}

    def all_seen(self) -> set[ProcId]:
        with self.lock:
            return set(self.seen) | {self.root}

    def alive(self) -> list[ProcId]:
        return sorted((p for p in self.all_seen() if p.alive()), key=lambda p: p.pid)


_monitor: threading.Thread | None = None


def _monitor_loop() -> None:
    """Every 0.5 s, record the children of every running server (so that processes spawned
    while nobody polls, e.g. by a prelaunched server, are still known and checked at the end)."""
    while True:
        recs = [r for r in registered_servers() if r.root.alive()]
        if not recs:
            time.sleep(0.5)
            continue
        for r in recs:
            with contextlib.suppress(Exception):
                r.refresh()
        time.sleep(0.5)


def _ensure_monitor() -> None:
    global _monitor
    with _registry_lock:
        if _monitor is None or not _monitor.is_alive():
            _monitor = threading.Thread(target=_monitor_loop, name="vllm-proc-monitor", daemon=True)
            _monitor.start()


def registered_servers() -> list[ProcRecord]:
    with _registry_lock:
        return list(_REGISTRY.values())


def alive_registered_processes() -> list[tuple[str, ProcId]]:
    """(label, process) for every process of a server started by this module that is still alive."""
    out = []
    for rec in registered_servers():
        out += [(rec.label, p) for p in rec.alive()]
    return out


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill_record(rec: ProcRecord, grace: float) -> None:
    """SIGTERM the group (and any stray descendant), wait ``grace``, then SIGKILL what is left."""
    _kill_records([rec], grace)


def _kill_records(recs: Sequence[ProcRecord], grace: float) -> None:
    """Like _kill_record for several servers at once: one shared grace period, not one each."""
    recs = list(recs)
    for rec in recs:
        rec.refresh()
        _kill_group(rec.pgid, signal.SIGTERM)
        for p in rec.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(rec.alive() for rec in recs):
        time.sleep(0.1)
    for rec in recs:
        if rec.alive():
            _kill_group(rec.pgid, signal.SIGKILL)
            for p in rec.alive():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(rec.alive() for rec in recs):
        time.sleep(0.1)


@atexit.register
def _kill_leftovers() -> None:
    _kill_records([rec for rec in registered_servers() if rec.alive()], grace=5.0)
    for rec in registered_servers():
        _ledger_remove(rec.root)


# A small on-disk ledger of running servers (root pid + start time + owner), so that servers
# orphaned by a test process that was SIGKILLed can be reaped by the next run: by PID, and only
# if the PID still has the recorded start time (i.e. it is the very process we started).
def _ledger_path() -> pathlib.Path:
    return env.log_dir() / "running-servers.json"


def _ledger_update(fn) -> None:
    import fcntl
    import json

    path = _ledger_path()
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            data = []
        data = fn(data)
        path.write_text(json.dumps(data, indent=1))


def _ledger_add(rec: "ProcRecord") -> None:
    me = _proc_id(os.getpid())
    entry = {
        "pid": rec.root.pid,
        "start_time": rec.root.start_time,
        "pgid": rec.pgid,
        "label": rec.label,
        "owner_pid": os.getpid(),
        "owner_start_time": me.start_time if me else "?",
    }
    with contextlib.suppress(OSError):
        _ledger_update(lambda d: [e for e in d if e["pid"] != rec.root.pid] + [entry])


def _ledger_remove(root: ProcId) -> None:
    with contextlib.suppress(OSError):
        _ledger_update(lambda d: [e for e in d if not (e["pid"] == root.pid and e["start_time"] == root.start_time)])


def reap_orphaned_servers(grace: float = 5.0) -> list[int]:
    """Stop servers recorded in the ledger whose owning test process is gone (e.g. SIGKILLed).

    Only processes whose PID *and* start time match the record are touched. Returns their PIDs.
    """
    reaped: list[int] = []

    def _scan(data):
        keep = []
        for e in data:
            root = ProcId(e["pid"], e["start_time"])
            owner = ProcId(e["owner_pid"], e["owner_start_time"])
            if not root.alive():
                continue
            if owner.alive():
                keep.append(e)
                continue
            rec = ProcRecord(root=root, pgid=e["pgid"], label=e["label"])
            _kill_record(rec, grace)
            reaped.append(root.pid)
        return keep

    with contextlib.suppress(OSError):
        _ledger_update(_scan)
    return reaped


# --------------------------------------------------------------------------- helpers
_HANDED_OUT_PORTS: set[int] = set()
_PORT_LOCK = threading.Lock()


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now and that this process has not handed out
    before. Servers the pool starts side by side bind their ports seconds later, and the kernel may
    give a just-released ephemeral port out again in between: once two servers got the same port
    (and so the same log file), and the tests read one server's lines as the other's."""
    with _PORT_LOCK:
        for _ in range(1000):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _HANDED_OUT_PORTS:
                _HANDED_OUT_PORTS.add(port)
                return port
    raise RuntimeError("no unused TCP port on 127.0.0.1 after 1000 tries")


def _http_get(url: str, timeout: float) -> tuple[int, bytes]:
    assert url.startswith("http://127.0.0.1:"), url  # loopback only
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (loopback only)
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _has_flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def build_argv(
    model_dir: os.PathLike | str,
    port: int,
    args: Sequence[str] = (),
    *,
    served_model_name: str = DEFAULT_SERVED_NAME,
    python: os.PathLike | str | None = None,
) -> list[str]:
    """The server's argv. Adds --enforce-eager / --dtype float32 / --served-model-name unless ``args`` sets them."""
    argv = [
        str(python or env.vllm_python()),
        "-m",
        API_SERVER_MODULE,
        "--model",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    args = list(args)
    if not (_has_flag(args, "--enforce-eager") or _has_flag(args, "--no-enforce-eager")):
        argv.append("--enforce-eager")
    if not _has_flag(args, "--dtype"):
        argv += ["--dtype", "float32"]
    if not _has_flag(args, "--served-model-name"):
        argv += ["--served-model-name", served_model_name]
    return argv + args


def build_env(args: Sequence[str] = (), env_overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: offline, no usage stats, and a KV cache size.

    If neither ``VLLM_CPU_KVCACHE_SPACE`` (in ``env_overrides``) nor ``--kv-cache-memory-bytes``
    (in ``args``) is given, ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB) is set: leaving both unset makes
    vLLM try to reserve 0.92 of NUMA node 0, which fails on the 24 GiB test machines.
    """
    e = dict(os.environ)
    # Never inherit the KV size from the caller's shell, nor the caller's venv / import paths.
    for k in ("VLLM_CPU_KVCACHE_SPACE", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"):
        e.pop(k, None)
    e.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",
        VLLM_HOST_IP="127.0.0.1",  # keep vLLM's internal sockets on loopback
    )
    overrides = dict(env_overrides or {})
    if "VLLM_CPU_KVCACHE_SPACE" not in overrides and not _has_flag(args, "--kv-cache-memory-bytes"):
        overrides["VLLM_CPU_KVCACHE_SPACE"] = "1"
    e.update({k: str(v) for k, v in overrides.items()})
    return e


# --------------------------------------------------------------------------- the server
class VllmServer:
    """A running vLLM OpenAI server. Use as a context manager or call ``stop()``."""

    def __init__(
        self,
        model_dir: os.PathLike | str,
        args: Sequence[str] = (),
        env_overrides: Mapping[str, str] | None = None,
        *,
        port: int | None = None,
        log_path: os.PathLike | str | None = None,
        served_model_name: str = DEFAULT_SERVED_NAME,
        label: str | None = None,
    ):
        self.model_dir = pathlib.Path(model_dir)
        self.args = list(args)
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.served_model_name = served_model_name
        self.label = label or f"vllm:{self.model_dir.name}:{self.port}"
        self.argv = build_argv(self.model_dir, self.port, self.args, served_model_name=served_model_name)
        self.env = build_env(self.args, env_overrides)
        self.env_overrides = dict(env_overrides or {})
        if log_path is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            log_path = env.log_dir() / f"{stamp}-{self.model_dir.name}-{self.port}.log"
        self.log_path = pathlib.Path(log_path)
        self.proc: subprocess.Popen | None = None
        self.record: ProcRecord | None = None
        self.startup_seconds: float | None = None
        self.returncode: int | None = None

    # -- lifecycle
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def launch(self) -> "VllmServer":
        """Start the process (does not wait for health)."""
        if self.proc is not None:
            raise RuntimeError("already started")
        env.check_vllm_env()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._t0 = time.monotonic()
        self._t0_wall = time.time()
        with open(self.log_path, "wb") as log:
            log.write(("# argv: " + " ".join(self.argv) + "\n").encode())
            log.write(
                ("# env: " + " ".join(f"{k}={v}" for k, v in sorted(self.env_overrides.items())) + "\n").encode()
            )
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=str(self.log_path.parent),
                start_new_session=True,
            )
        root = _proc_id(self.proc.pid) or ProcId(self.proc.pid, "?")
        self.record = ProcRecord(root=root, pgid=self.proc.pid, label=self.label)
        with _registry_lock:
            _REGISTRY[self.proc.pid] = self.record
        _ledger_add(self.record)
        _ensure_monitor()
        return self

    def wait_healthy(self, timeout: float = DEFAULT_STARTUP_TIMEOUT) -> "VllmServer":
        """Poll ``/health`` until 200. Raises VllmStartupError (with the log tail) if the process
        exits or the timeout passes; the server is stopped in both cases."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self.returncode = rc
                self.stop()
                text = self.log_text()
                raise VllmStartupError(
                    f"vLLM server exited with code {rc} during start-up ({self.log_path}); log tail:\n{_tail(text)}",
                    text,
                    rc,
                )
            try:
                status, _ = _http_get(self.base_url + "/health", timeout=2.0)
                if status == 200:
                    self.startup_seconds = time.monotonic() - self._t0
                    self.record.refresh()
                    return self
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                text = self.log_text()
                raise VllmStartupError(
                    f"vLLM server not healthy after {timeout:.0f} s ({self.log_path}); log tail:\n{_tail(text)}",
                    text,
                    None,
                )
            if self.record:
                self.record.refresh()
            time.sleep(0.5)

    def wait_exit(self, timeout: float = DEFAULT_STARTUP_TIMEOUT) -> "VllmExit":
        """For a start-up that must fail: wait until the process exits and return a VllmExit.

        Raises VllmStartupError if it becomes healthy instead, TimeoutError if it does neither
        within ``timeout``; the process group is stopped in every case.
        """
        assert self.proc is not None and self.record is not None
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                rc = self.proc.poll()
                if rc is not None:
                    # time of exit ~ last write to the log (the caller may come late to look)
                    seconds = min(time.monotonic() - self._t0, self.log_path.stat().st_mtime - self._t0_wall)
                    self.stop(grace=5.0)  # reap any children left in the group
                    rec = self.record
                    return VllmExit(
                        rc,
                        self.log_text(),
                        self.log_path,
                        seconds,
                        tuple(sorted(p.pid for p in rec.all_seen())),
                        tuple(p.pid for p in rec.alive()),
                    )
                with contextlib.suppress(OSError, urllib.error.URLError):
                    status, _ = _http_get(self.base_url + "/health", timeout=1.0)
                    if status == 200:
                        raise VllmStartupError(
                            f"expected start-up to fail but the server became healthy ({self.log_path})",
                            self.log_text(),
                            None,
                        )
                self.record.refresh()
                time.sleep(0.5)
            raise TimeoutError(
                f"vLLM did not exit within {timeout:.0f} s ({self.log_path}); tail:\n{_tail(self.log_text())}"
            )
        finally:
            self.stop(grace=5.0)

    def start(self, timeout: float = DEFAULT_STARTUP_TIMEOUT) -> "VllmServer":
        self.launch()
        return self.wait_healthy(timeout)

    def stop(self, grace: float = DEFAULT_STOP_GRACE) -> int | None:
        """SIGTERM the process group, SIGKILL after ``grace`` seconds. Idempotent. Returns the exit code."""
        if self.proc is None or self.record is None:
            return None
        _kill_record(self.record, grace)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self.returncode = self.proc.returncode
        if not self.record.alive():
            _ledger_remove(self.record.root)
        return self.returncode

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def processes(self) -> list[ProcId]:
        """Live processes of this server (API server, EngineCore, workers ...)."""
        if self.record is None:
            return []
        self.record.refresh()
        return self.record.alive()

    def __enter__(self) -> "VllmServer":
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- reading
    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def metrics_text(self, timeout: float = 10.0) -> str:
        status, body = _http_get(self.base_url + "/metrics", timeout=timeout)
        if status != 200:
            raise RuntimeError(f"/metrics returned {status}")
        return body.decode()

    def __repr__(self) -> str:
        return f"<VllmServer {self.label} pid={self.pid} {self.base_url}>"


def start_vllm(
    model_dir: os.PathLike | str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_STARTUP_TIMEOUT,
    **kwargs,
) -> VllmServer:
    """Start a server and wait for ``/health`` 200. The caller must ``stop()`` it (or use ``with``)."""
    return VllmServer(model_dir, args, env, **kwargs).start(timeout)


class VllmExit(NamedTuple):
    returncode: int
    log_text: str
    log_path: pathlib.Path
    seconds: float
    #: PIDs of every process seen for this run (API server, EngineCore, workers)
    pids: tuple[int, ...] = ()
    #: PIDs of those still alive after the run was reaped (should be empty)
    leftover_pids: tuple[int, ...] = ()


def run_vllm_until_exit(
    model_dir: os.PathLike | str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_STARTUP_TIMEOUT,
    **kwargs,
) -> VllmExit:
    """Run a server that is expected to fail at start-up; return (exit code, log text, log path, seconds, pids).

    If it becomes healthy instead, it is stopped and VllmStartupError is raised; if it neither
    exits nor becomes healthy within ``timeout``, it is killed and TimeoutError is raised.
    """
    return VllmServer(model_dir, args, env, **kwargs).launch().wait_exit(timeout)


def stop_servers(servers: Iterable["VllmServer"], grace: float = DEFAULT_STOP_GRACE) -> None:
    """Stop several servers at once (SIGTERM to all groups, one grace period, then SIGKILL)."""
    servers = [s for s in servers if s.proc is not None and s.record is not None]
    # A server still starting up may ignore SIGTERM for a while: give those a short grace.
    if any(s.startup_seconds is None and s.proc.poll() is None for s in servers):
        grace = min(grace, 5.0)
    _kill_records([s.record for s in servers], grace)
    for s in servers:
        s.stop(grace=1.0)  # reap the Popen, record the exit code, update the ledger


def assert_no_stray(records: Iterable[ProcRecord] | None = None) -> None:
    """Raise AssertionError listing any still-alive process of the given (default: all) servers."""
    recs = list(records) if records is not None else registered_servers()
    stray = [(r.label, p.pid) for r in recs for p in r.alive()]
    assert not stray, f"vLLM processes still alive: {stray}"
