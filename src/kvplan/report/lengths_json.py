"""JSON rendering of ``kvplan lengths`` (the contract documented in docs/lengths.md)."""
from __future__ import annotations

from .._json import dumps_report
from ..workload.result import LengthsResult


def render_json(result: LengthsResult) -> str:
    return dumps_report(result.to_dict())
