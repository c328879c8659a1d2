"""JSON rendering of ``kvplan tune`` (``TuneResult.to_dict``, schema_version 1)."""
from __future__ import annotations

from .._json import dumps_report
from ..tune.search import TuneResult


def render_json(result: TuneResult) -> str:
    return dumps_report(result.to_dict())
