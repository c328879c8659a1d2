"""JSON rendering of a plan: the stable, documented contract for CI (see README)."""
from __future__ import annotations

import json

from ..memory.result import PlanResult


def render_json(result: PlanResult) -> str:
    return json.dumps(result.to_dict(), indent=2, sort_keys=False)
