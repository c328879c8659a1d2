"""JSON rendering of a plan: the stable, documented contract for CI (see README)."""
from __future__ import annotations

from .._json import dumps_report
from ..memory.result import PlanResult


def render_json(result: PlanResult, extra: dict | None = None, traffic=None) -> str:
    """``extra`` adds sections computed outside the plan; ``traffic`` (a ``TrafficFit`` from
    ``--requests``) adds its ``traffic`` section."""
    more = {**(extra or {}), **({"traffic": traffic.to_dict()} if traffic is not None else {})}
    return dumps_report({**result.to_dict(), **more})
