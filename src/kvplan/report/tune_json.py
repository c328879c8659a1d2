"""JSON rendering of ``kvplan tune`` (``TuneResult.to_dict``, schema_version 1)."""
from __future__ import annotations

import json

from ..sim.tune import TuneResult


def render_json(result: TuneResult) -> str:
    return json.dumps(result.to_dict(), indent=2)
