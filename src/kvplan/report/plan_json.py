"""JSON rendering of a plan: the stable, documented contract for CI (see README)."""
from __future__ import annotations

import json

from ..memory.result import PlanResult


def render_json(result: PlanResult, extra: dict | None = None) -> str:
    """``extra`` adds sections computed outside the plan (``traffic`` from ``--requests``)."""
    return json.dumps({**result.to_dict(), **(extra or {})}, indent=2, sort_keys=False)
