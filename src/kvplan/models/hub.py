"""Optional: fetch the config.json of a model the catalog lacks from the Hugging Face hub.

Needs the ``hub`` extra (huggingface_hub) and network access; kvplan works offline without it.
Only ``config.json`` is downloaded; no code from the hub is ever run (no trust_remote_code).
Offline, huggingface_hub retries for tens of seconds before it gives up, so a quick connection
check to the hub's endpoint comes first and an unreachable hub answers "not found" at once.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse


def _reachable(endpoint: str, timeout: float = 2.0) -> bool:
    url = urlparse(endpoint)
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    if not host:
        return False
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class HubError(Exception):
    """The hub was asked for a model's config.json and said no; ``reason`` says how."""

    def __init__(self, model_id: str, reason: str):
        self.model_id, self.reason = model_id, reason
        super().__init__(f"model {model_id!r}: {reason}")


def fetch_config(model_id: str) -> Optional[Path]:
    """Path of the cached config.json; None when the hub is not to be asked (offline, no
    ``hub`` extra, not a hub id). A hub that is asked and fails raises :class:`HubError` naming
    the failure: unreachable, gated, no such repository, no config.json, another HTTP error."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("KVPLAN_OFFLINE") == "1":
        return None
    if "/" not in model_id:
        return None
    try:
        from huggingface_hub import constants, hf_hub_download  # heavy: import only when needed
    except ImportError:
        return None
    try:
        cached = hf_hub_download(model_id, "config.json", local_files_only=True)
        return Path(cached)
    except Exception:  # noqa: BLE001, S110 - not cached yet
        pass
    if not _reachable(constants.ENDPOINT):
        raise HubError(model_id, f"not in kvplan's catalog, and the Hugging Face hub ({constants.ENDPOINT}) is "
                                 "unreachable from here: pass a local config.json or model folder, or retry online")
    try:
        return Path(hf_hub_download(model_id, "config.json", etag_timeout=5))
    except Exception as exc:  # noqa: BLE001 - classified below, never swallowed
        raise HubError(model_id, _why(exc, constants.ENDPOINT)) from None


def _why(exc: Exception, endpoint: str) -> str:
    from huggingface_hub import errors

    if isinstance(exc, errors.GatedRepoError):
        return ("the repository is gated on the Hugging Face hub: accept its licence on the model page and log in "
                "(HF_TOKEN or `hf auth login`), or pass a local config.json")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return (f"no such repository on the Hugging Face hub ({endpoint}), or it is private and you are not logged "
                "in: check the id (see `kvplan models` for the catalog)")
    if isinstance(exc, (errors.EntryNotFoundError, getattr(errors, "RemoteEntryNotFoundError", errors.EntryNotFoundError))):
        return "the repository exists on the Hugging Face hub but has no config.json (not a transformers model?)"
    if isinstance(exc, errors.RevisionNotFoundError):
        return "the Hugging Face hub has no such revision of the repository"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    detail = f"HTTP {status}" if status else type(exc).__name__
    return f"the Hugging Face hub failed to serve its config.json ({detail}: {str(exc).splitlines()[0][:200]})"
