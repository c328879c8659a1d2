"""Optional: fetch the config.json of a model the catalog lacks from the Hugging Face hub.

Needs the ``hub`` extra (huggingface_hub) and network access; kvplan works offline without it.
Only ``config.json`` is downloaded; no code from the hub is ever run (no trust_remote_code).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional


def fetch_config(model_id: str) -> Optional[Path]:
    """Path of the cached config.json, or None when the hub is unavailable or offline."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("KVPLAN_OFFLINE") == "1":
        return None
    if "/" not in model_id:
        return None
    try:
        from huggingface_hub import hf_hub_download  # heavy: import only when needed
    except ImportError:
        return None
    try:
        return Path(hf_hub_download(model_id, "config.json", etag_timeout=5))
    except Exception:  # any hub failure (offline, 404, gated) means "not found"
        return None
