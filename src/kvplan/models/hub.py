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


def fetch_config(model_id: str) -> Optional[Path]:
    """Path of the cached config.json, or None when the hub is unavailable or offline."""
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
    except Exception:  # not cached yet
        pass
    if not _reachable(constants.ENDPOINT):
        return None
    try:
        return Path(hf_hub_download(model_id, "config.json", etag_timeout=5))
    except Exception:  # any hub failure (404, gated, network) means "not found"
        return None
