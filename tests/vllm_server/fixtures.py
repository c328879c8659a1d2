"""pytest fixtures for real-vLLM tests.  Pull them into a conftest with::

    from tests.vllm_server.fixtures import *  # noqa: F401,F403

Policy for tests marked ``@pytest.mark.vllm`` (enforced by the autouse fixture
``_vllm_mark_policy``):

* ``KVPLAN_SKIP_VLLM=1``  -> skipped (``make test-fast``);
* vLLM venv missing/broken -> **failed** with the install hint (never silently skipped).

Servers are session-scoped and shared per configuration (model dir + args + env), started
lazily by ``vllm_servers.get(...)`` and stopped (process group, by PID) at session end;
``_vllm_no_stray_processes`` then asserts that no process of any server started by the
suite is still alive.
"""

from __future__ import annotations

import time
from typing import Iterator, Mapping, Sequence

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
    "ServerPool",
    "SHARED_ARGS",
    "SHARED_ENV",
    "SHARED_MAX_MODEL_LEN",
    "SHARED_KVCACHE_GIB",
]

#: Flags of the shared tiny-Llama server (float32, 2048-token requests, 1 GiB KV cache).
SHARED_MAX_MODEL_LEN = 2048
SHARED_KVCACHE_GIB = 1
SHARED_ARGS: tuple[str, ...] = ("--max-model-len", str(SHARED_MAX_MODEL_LEN))
SHARED_ENV: Mapping[str, str] = {"VLLM_CPU_KVCACHE_SPACE": str(SHARED_KVCACHE_GIB)}


def pytest_configure(config: pytest.Config) -> None:  # pragma: no cover - registration only
    config.addinivalue_line("markers", "vllm: needs the real vLLM CPU server (.venv-vllm); KVPLAN_SKIP_VLLM=1 skips")


@pytest.fixture(autouse=True)
def _vllm_mark_policy(request: pytest.FixtureRequest) -> None:
    """Skip (KVPLAN_SKIP_VLLM=1) or fail loudly (env missing) for tests marked ``vllm``."""
    if request.node.get_closest_marker("vllm") is None:
        return
    if env.skip_requested():
        pytest.skip("KVPLAN_SKIP_VLLM=1: real-vLLM tests skipped")
    try:
        env.check_vllm_env()
    except env.VllmEnvMissing as e:
        pytest.fail(f"real-vLLM test environment missing: {e}", pytrace=False)


@pytest.fixture(scope="session")
def vllm_version() -> str:
    """vLLM's version in the vLLM venv (fails loudly if the venv is missing)."""
    if env.skip_requested():
        pytest.skip("KVPLAN_SKIP_VLLM=1")
    try:
        return env.check_vllm_env()
    except env.VllmEnvMissing as e:
        pytest.fail(f"real-vLLM test environment missing: {e}", pytrace=False)


@pytest.fixture(scope="session")
def tiny_llama_model(vllm_version: str) -> models.BuiltModel:
    """The dense GQA tiny Llama folder (built once, cached under .cache/vllm-models/)."""
    return models.build_tiny_llama()


class ServerPool:
    """Session-wide servers, one per (model dir, args, env) configuration."""

    def __init__(self) -> None:
        self._servers: dict[tuple, server.VllmServer] = {}
        self.startup_seconds: dict[str, float] = {}

    @staticmethod
    def _key(model_dir, args: Sequence[str], env_: Mapping[str, str] | None) -> tuple:
        return (str(model_dir), tuple(args), tuple(sorted((env_ or {}).items())))

    def get(
        self,
        model_dir,
        args: Sequence[str] = (),
        env_: Mapping[str, str] | None = None,
        timeout: float = server.DEFAULT_STARTUP_TIMEOUT,
    ) -> server.VllmServer:
        key = self._key(model_dir, args, env_)
        srv = self._servers.get(key)
        if srv is not None and srv.is_running():
            return srv
        if srv is not None:
            raise RuntimeError(f"shared server {srv} died; log: {srv.log_path}")
        srv = server.VllmServer(model_dir, args, env_)
        self._servers[key] = srv  # registered before start so teardown always stops it
        srv.start(timeout)
        self.startup_seconds[srv.label] = srv.startup_seconds or 0.0
        return srv

    def stop_all(self) -> None:
        for srv in self._servers.values():
            srv.stop()

    def servers(self) -> list[server.VllmServer]:
        return list(self._servers.values())


@pytest.fixture(scope="session")
def vllm_servers(vllm_version: str) -> Iterator[ServerPool]:
    """Factory of shared servers: ``vllm_servers.get(model_dir, args, env)``."""
    pool = ServerPool()
    try:
        yield pool
    finally:
        pool.stop_all()


@pytest.fixture(scope="session")
def tiny_llama_server(vllm_servers: ServerPool, tiny_llama_model: models.BuiltModel) -> server.VllmServer:
    """The shared tiny-Llama server (SHARED_ARGS / SHARED_ENV)."""
    return vllm_servers.get(tiny_llama_model.path, SHARED_ARGS, SHARED_ENV)


@pytest.fixture(scope="session", autouse=True)
def _vllm_no_stray_processes() -> Iterator[None]:
    """At session end (after every server fixture has stopped): no server process may be alive."""
    yield
    deadline = time.monotonic() + 15
    while server.alive_registered_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    stray = server.alive_registered_processes()
    if stray:
        # Kill them (by PID, our own processes only) so nothing outlives the run, then fail.
        for rec in server.registered_servers():
            server._kill_record(rec, grace=5.0)
        pytest.fail(f"vLLM processes outlived the test session: {[(label, p.pid) for label, p in stray]}")
