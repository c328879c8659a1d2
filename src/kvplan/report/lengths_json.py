"""JSON rendering of ``kvplan lengths`` (the contract documented in docs/lengths.md)."""
from __future__ import annotations

import json

from ..workload.result import LengthsResult


def render_json(result: LengthsResult) -> str:
    return json.dumps(result.to_dict(), indent=2, ensure_ascii=False)
