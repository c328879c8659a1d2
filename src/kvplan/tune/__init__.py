"""``kvplan tune``: search vLLM's flags, GPU type and TP × DP split for the configuration that
serves a trace within its SLOs, by simulating each (a client of :mod:`kvplan.sim`). See docs/tune.md.

Public API::

    from kvplan.tune import TuneSpace, tune, TuneResult
"""
from .search import TuneResult, TuneRow, tune
from .space import TuneSpace

__all__ = ["TuneResult", "TuneRow", "TuneSpace", "tune"]
