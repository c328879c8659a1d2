"""``kvplan tune``: search vLLM's flags, GPU type and TP × DP split for the configuration that
serves a trace within its SLOs, by simulating each (a client of :mod:`kvplan.sim`). See docs/tune.md.

Public API::

    from kvplan.tune import TuneSpace, tune, TuneResult

Attributes are imported on first use, so ``import kvplan.tune.run`` (the CLI reads its tables of
flags at start-up) costs nothing on the ``kvplan plan`` path.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {"TuneResult": ".search", "TuneRow": ".search", "tune": ".search", "TuneSpace": ".space"}

__all__ = ["TuneResult", "TuneRow", "TuneSpace", "tune"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvplan.tune' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value
