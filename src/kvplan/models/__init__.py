"""Model architectures: read config.json files and the built-in catalog into :class:`ModelSpec`."""
from __future__ import annotations

from pathlib import Path

from ..errors import UnknownModelError, UsageError
from . import catalog
from .hf_config import load_config_file, spec_from_config
from .spec import (
    ChunkedLocalAttention,
    DenseMLP,
    FullAttention,
    Layer,
    LinearAttentionState,
    Mamba2State,
    MLAttention,
    ModelSpec,
    MoEMLP,
    Quantization,
    SlidingWindowAttention,
)


def _looks_like_a_path(name: str) -> bool:
    """./x, ../x, /x, ~/x, x/ or more than one slash: a path, never a hub id (org/name)."""
    return name.startswith((".", "/", "~")) or name.endswith(("/", "\\")) or name.count("/") > 1


def local_model_path(name: str) -> str:
    """The model folder as ``vllm serve`` must be given it: the folder of a config.json, and a
    relative path kept relative with its ``./`` (``vllm serve mymodel`` reads as a hub id)."""
    folder = name.rstrip("/\\") or name
    if folder.endswith(".json"):
        folder = str(Path(folder).parent) if "/" in folder or "\\" in folder else "."
    if not folder.startswith((".", "/", "~")) and not Path(folder).is_absolute():
        folder = "./" + folder
    return folder


def load_model(name: str) -> ModelSpec:
    """A model by config.json path, model folder, catalog id/alias, or (online) hub id."""
    path = Path(name).expanduser()
    if path.exists() or name.endswith(".json"):
        from dataclasses import replace

        return replace(load_config_file(path), name=local_model_path(name))
    if _looks_like_a_path(name):
        raise UsageError(f"--model {name}: no such file or directory (a model folder or config.json was expected; "
                         "hub ids look like org/name)")
    entry = catalog.find(name)
    if entry is not None:
        return spec_from_config(entry.config(), f"catalog:{entry.id}", name=entry.id,
                                published_params=entry.published_params, aliases=entry.aliases)
    from .hub import HubError, fetch_config

    try:
        fetched = fetch_config(name)
    except HubError as exc:
        raise UsageError(f"--model {name}: {exc.reason}") from None
    if fetched is not None:
        spec = load_config_file(fetched)
        return spec_from_config(spec.raw, f"hub:{name}", name=name)
    raise UnknownModelError(name, catalog.suggest(name))


__all__ = [
    "ChunkedLocalAttention", "DenseMLP", "FullAttention", "Layer", "LinearAttentionState", "Mamba2State",
    "MLAttention", "ModelSpec", "MoEMLP", "Quantization", "SlidingWindowAttention",
    "load_model", "spec_from_config", "load_config_file", "catalog",
]
