"""Joining a Ray cluster, for every part of kvplan that can run on one (``kvplan bench
--ray-address``, ``kvplan tune --ray-address``). Low-level on purpose: both kvplan.bench and
kvplan.sim use it, and sim must not import bench. Ray is an optional extra (``kvplan[ray]``),
imported only when asked for.
"""
from __future__ import annotations

from typing import Any

from .errors import UsageError

#: addresses whose Ray traffic is kept on loopback (``_node_ip_address``)
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def import_ray():
    """The ``ray`` module, or a usage error saying how to install it."""
    try:
        import ray  # type: ignore[import-not-found]
    except ImportError:
        raise UsageError("--ray-address needs Ray: pip install 'kvplan[ray]'") from None
    return ray


def connect(address: str) -> None:
    """Join the cluster at ``address`` (``local``: a private instance for this run). Nothing
    listening at a host:port address is a usage error within seconds (Ray itself retries for
    minutes). A caller already connected to Ray keeps its connection (and its cluster)."""
    ray = import_ray()
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False, "include_dashboard": False}
    if address != "local":
        kwargs["address"] = address
        host, _, port = address.rpartition(":")
        if host and port.isdigit():
            _probe(host, int(port), address)
            if host in LOOPBACK:
                kwargs["_node_ip_address"] = "127.0.0.1"  # keep Ray's own traffic on loopback too
    else:
        kwargs["_node_ip_address"] = "127.0.0.1"
    try:
        ray.init(**kwargs)
    except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, …: say what failed
        raise UsageError(f"--ray-address {address}: cannot join the Ray cluster ({type(exc).__name__}: {exc})") from None


def _probe(host: str, port: int, address: str) -> None:
    """Fail fast when nothing listens at the head's address."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=3.0):
            pass
    except OSError as exc:
        raise UsageError(f"--ray-address {address}: no Ray head answers there ({exc})") from None
