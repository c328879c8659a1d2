"""pytest fixtures for real-vLLM tests.  Pull them into a conftest with::

    from tests.vllm_server.fixtures import *  # noqa: F401,F403

Policy for tests marked ``@pytest.mark.vllm`` (autouse fixture ``_vllm_mark_policy``):

* ``KVPLAN_SKIP_VLLM=1``   -> skipped (``make test-fast``);
* vLLM venv missing/broken -> **failed** with the install hint (never silently skipped).

Servers are session-scoped and shared per configuration (``ServerConfig``: model + args + env)
in a ``ServerPool``.  When the first test that needs a server runs, every configuration that a selected test
will need (found through the fixture names in ``PRELAUNCH``) is launched at once, so the
~30-50 s start-ups overlap instead of adding up; a fixture then only waits for ``/health``.
Every server is stopped (process group, by PID) at session end, and
``_vllm_no_stray_processes`` asserts that no process of any server started by the suite is
still alive.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from typing import Callable, Iterator

import pytest

from . import env, models, server

__all__ = [
    "pytest_configure",
    "_vllm_mark_policy",
    "_vllm_no_stray_processes",
    "vllm_version",
    "tiny_llama_model",
    "vllm_servers",
    "tiny_llama_server",
    "small_kv_server",
    "kv_too_small_exit",
    "gemma3_model",
    "gemma3_server",
    "ServerConfig",
    "ServerPool",
    "PRELAUNCH",
    "SHARED",
    "SMALL_KV",
    "SIM_FIDELITY",
    "KV_TOO_SMALL",
    "GEMMA3_HYBRID",
]


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """One server configuration: a model (built on demand), CLI args and env overrides."""

    name: str
    model: Callable[[], models.BuiltModel]
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    expect_failure: bool = False  # a start-up that must fail (run until it exits)

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def arg(self, flag: str) -> str:
        return self.args[self.args.index(flag) + 1]


def _env(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


# --------------------------------------------------------------------------- the configurations
#: Shared tiny-Llama server: float32, 2048-token requests, VLLM_CPU_KVCACHE_SPACE=1 (GiB), block 128.
SHARED = ServerConfig(
    "tiny-llama-shared",
    models.build_tiny_llama,
    ("--max-model-len", "2048"),
    _env(VLLM_CPU_KVCACHE_SPACE="1"),
)
#: Deliberately small KV cache for preemption: 160 blocks of 32 tokens (5,120 tokens).
SMALL_KV = ServerConfig(
    "tiny-llama-small-kv",
    models.build_tiny_llama,
    ("--max-model-len", "2048", "--block-size", "32", "--num-gpu-blocks-override", "160"),
)
#: The same small KV cache as SMALL_KV for the simulator's scheduler-fidelity bursts
#: (tests/vllm_real/test_vllm_sim_fidelity.py); its own server, because test_vllm_preemption stops SMALL_KV.
SIM_FIDELITY = ServerConfig(
    "tiny-llama-sim-fidelity",
    models.build_tiny_llama,
    ("--max-model-len", "2048", "--block-size", "32", "--num-gpu-blocks-override", "160"),
)
#: KV cache of 4 blocks x 128 tokens x 2,048 B/token = 1 MiB: too small for --max-model-len 2048.
KV_TOO_SMALL = ServerConfig(
    "tiny-llama-kv-too-small",
    models.build_tiny_llama,
    ("--max-model-len", "2048", "--kv-cache-memory-bytes", str(4 * 128 * 2048)),
    expect_failure=True,
)
#: Gemma-3 style hybrid model (sliding-window + full attention layers).
GEMMA3_HYBRID = ServerConfig(
    "tiny-gemma3-hybrid",
    lambda: models.build_model(models.tiny_gemma3_spec()),
    ("--max-model-len", "2048"),
    _env(VLLM_CPU_KVCACHE_SPACE="1"),
)

#: fixture name -> configuration it serves; used to launch everything a session needs up front.
PRELAUNCH: dict[str, ServerConfig] = {
    "tiny_llama_server": SHARED,
    "small_kv_server": SMALL_KV,
    "kv_too_small_exit": KV_TOO_SMALL,
    "gemma3_server": GEMMA3_HYBRID,
    "fidelity_server": SIM_FIDELITY,  # fixture of tests/vllm_real/test_vllm_sim_fidelity.py
}


# --------------------------------------------------------------------------- pool
class ServerPool:
    """Session-wide servers, one per configuration."""

    def __init__(self) -> None:
        self._servers: dict[str, server.VllmServer] = {}
        self._stopped: set[str] = set()
        self._exits: dict[str, server.VllmExit] = {}

    def launch(self, cfg: ServerConfig) -> server.VllmServer:
        """Start ``cfg``'s process without waiting (idempotent while it runs)."""
        srv = self._servers.get(cfg.name)
        if srv is not None and cfg.name not in self._stopped:
            return srv
        model = cfg.model()
        srv = server.VllmServer(model.path, cfg.args, cfg.env_dict, label=cfg.name)
        self._servers[cfg.name] = srv  # registered before launch so teardown always stops it
        self._stopped.discard(cfg.name)
        srv.launch()
        return srv

    def get(self, cfg: ServerConfig, timeout: float = server.DEFAULT_STARTUP_TIMEOUT) -> server.VllmServer:
        """The healthy server for ``cfg`` (launched now if it was not prelaunched)."""
        assert not cfg.expect_failure
        srv = self.launch(cfg)
        if srv.startup_seconds is None:
            srv.wait_healthy(timeout)
        elif not srv.is_running():
            raise RuntimeError(f"shared server {srv} died; log: {srv.log_path}")
        return srv

    def wait_exit(self, cfg: ServerConfig, timeout: float = server.DEFAULT_STARTUP_TIMEOUT) -> server.VllmExit:
        """For an ``expect_failure`` configuration: wait until the process exits."""
        assert cfg.expect_failure
        if cfg.name not in self._exits:
            srv = self.launch(cfg)
            self._exits[cfg.name] = srv.wait_exit(timeout)
        return self._exits[cfg.name]

    def stop(self, cfg: ServerConfig) -> None:
        srv = self._servers.get(cfg.name)
        if srv is not None:
            srv.stop()
            self._stopped.add(cfg.name)

    def stop_all(self) -> None:
        server.stop_servers(self._servers.values())

    def servers(self) -> list[server.VllmServer]:
        return list(self._servers.values())


# --------------------------------------------------------------------------- hooks & fixtures
def pytest_configure(config: pytest.Config) -> None:  # pragma: no cover - registration only
    config.addinivalue_line("markers", "vllm: needs the real vLLM CPU server (.venv-vllm); KVPLAN_SKIP_VLLM=1 skips")


def _env_problem() -> str | None:
    try:
        env.check_vllm_env()
    except env.VllmEnvMissing as e:
        return str(e)
    return None


@pytest.fixture(autouse=True)
def _vllm_mark_policy(request: pytest.FixtureRequest) -> None:
    """Skip (KVPLAN_SKIP_VLLM=1) or fail loudly (env missing) for tests marked ``vllm``."""
    if request.node.get_closest_marker("vllm") is None:
        return
    if env.skip_requested():
        pytest.skip("KVPLAN_SKIP_VLLM=1: real-vLLM tests skipped")
    problem = _env_problem()
    if problem:
        pytest.fail(f"real-vLLM test environment missing: {problem}", pytrace=False)


@pytest.fixture(scope="session")
def vllm_version() -> str:
    """vLLM's version in the vLLM venv (skips under KVPLAN_SKIP_VLLM=1, fails loudly if missing)."""
    if env.skip_requested():
        pytest.skip("KVPLAN_SKIP_VLLM=1")
    problem = _env_problem()
    if problem:
        pytest.fail(f"real-vLLM test environment missing: {problem}", pytrace=False)
    return env.check_vllm_env()


@pytest.fixture(scope="session")
def vllm_servers(request: pytest.FixtureRequest, vllm_version: str,
                 _vllm_no_stray_processes: None) -> Iterator[ServerPool]:
    """The session's ServerPool: ``vllm_servers.get(cfg)`` / ``.wait_exit(cfg)`` / ``.stop(cfg)``.

    Created by the first test that needs a server; it then launches, in parallel, every server
    configuration the selected tests will ask for, so the ~30-50 s start-ups overlap. Launching
    here rather than at session start keeps the CPU-heavy start-ups away from the rest of the
    suite, whose timing-sensitive tests (load generation, time-outs) run before."""
    pool = ServerPool()
    try:
        if os.environ.get("KVPLAN_VLLM_PRELAUNCH", "1").strip() not in {"0", "false", "no", "off"}:
            for cfg in _wanted_configs(request.session):
                pool.launch(cfg)
        yield pool
    finally:
        pool.stop_all()


def _wanted_configs(session: pytest.Session) -> list[ServerConfig]:
    """Every configuration a selected ``vllm`` test asks for through a PRELAUNCH fixture."""
    return [
        cfg
        for name, cfg in PRELAUNCH.items()
        if any(
            name in getattr(item, "fixturenames", ()) and item.get_closest_marker("vllm") is not None
            for item in session.items
        )
    ]


@pytest.fixture(scope="session")
def tiny_llama_model(vllm_version: str) -> models.BuiltModel:
    """The dense GQA tiny Llama folder (built once, cached under .cache/vllm-models/)."""
    return models.build_tiny_llama()


@pytest.fixture(scope="session")
def gemma3_model(vllm_version: str) -> models.BuiltModel:
    return GEMMA3_HYBRID.model()


@pytest.fixture(scope="session")
def tiny_llama_server(vllm_servers: ServerPool) -> server.VllmServer:
    """The shared tiny-Llama server (``SHARED``: --max-model-len 2048, VLLM_CPU_KVCACHE_SPACE=1)."""
    return vllm_servers.get(SHARED)


@pytest.fixture(scope="session")
def small_kv_server(vllm_servers: ServerPool) -> server.VllmServer:
    """Tiny Llama with 160 blocks of 32 tokens (``SMALL_KV``). A test may stop it; the next ``get`` restarts it."""
    return vllm_servers.get(SMALL_KV)


@pytest.fixture(scope="session")
def kv_too_small_exit(vllm_servers: ServerPool) -> server.VllmExit:
    """Exit code + log of a start-up whose KV cache cannot hold one max-length request (``KV_TOO_SMALL``)."""
    return vllm_servers.wait_exit(KV_TOO_SMALL)


@pytest.fixture(scope="session")
def gemma3_server(vllm_servers: ServerPool) -> server.VllmServer:
    """Gemma-3 style sliding-window/full-attention model server (``GEMMA3_HYBRID``)."""
    return vllm_servers.get(GEMMA3_HYBRID)


def _sigterm_to_keyboard_interrupt(signum, frame):  # pragma: no cover - signal path
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session", autouse=True)
def _vllm_no_stray_processes() -> Iterator[None]:
    """At session start, reap servers orphaned by an earlier killed run (by recorded PID + start
    time); at session end (after every server fixture has stopped): no server process may be alive."""
    if not env.skip_requested():
        env.prune_logs()
        reaped = server.reap_orphaned_servers()
        if reaped:
            print(f"[vllm_server] stopped servers orphaned by an earlier run: {reaped}")
    # A SIGTERM to the test run (e.g. a CI time-out) becomes KeyboardInterrupt, so that fixture
    # teardown still stops the servers (SIGINT is already a KeyboardInterrupt).
    previous = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        previous = signal.signal(signal.SIGTERM, _sigterm_to_keyboard_interrupt)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    deadline = time.monotonic() + 15
    while server.alive_registered_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    stray = server.alive_registered_processes()
    if stray:
        # Kill them (our own processes, by PID / process group) so nothing outlives the run, then fail.
        server._kill_records(server.registered_servers(), grace=5.0)
        pytest.fail(f"vLLM processes outlived the test session: {[(label, p.pid) for label, p in stray]}")
