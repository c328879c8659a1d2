"""Model architectures: read config.json files and the built-in catalog into :class:`ModelSpec`."""
from __future__ import annotations

from pathlib import Path

from ..errors import UnknownModelError
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


def load_model(name: str) -> ModelSpec:
    """A model by config.json path, model folder, catalog id/alias, or (online) hub id."""
    path = Path(name).expanduser()
    if path.exists() or name.endswith(".json"):
        return load_config_file(path)
    entry = catalog.find(name)
    if entry is not None:
        return spec_from_config(entry.config(), f"catalog:{entry.id}", name=entry.id,
                                published_params=entry.published_params, aliases=entry.aliases)
    from .hub import fetch_config

    fetched = fetch_config(name)
    if fetched is not None:
        spec = load_config_file(fetched)
        return spec_from_config(spec.raw, f"hub:{name}", name=name)
    raise UnknownModelError(name, catalog.suggest(name))


__all__ = [
    "ChunkedLocalAttention", "DenseMLP", "FullAttention", "Layer", "LinearAttentionState", "Mamba2State",
    "MLAttention", "ModelSpec", "MoEMLP", "Quantization", "SlidingWindowAttention",
    "load_model", "spec_from_config", "load_config_file", "catalog",
]
