"""``kvplan preflight``: the pre-launch checklist as one GO / NO-GO / GO_WITH_RISKS verdict.

Library::

    from kvplan.preflight import PreflightOptions, run_preflight, CHECK_IDS
    result = run_preflight(plan_request, PreflightOptions(requests="log.jsonl", target_qps=50, dry_run=True))
    result.verdict, result.exit_code, result.to_dict()

Attributes load on first use, so importing this package costs nothing on the ``kvplan plan`` path.
See docs/preflight.md for the check ids, thresholds, verdict rules and the JSON schema.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "run_preflight": "run", "PreflightOptions": "options", "PreflightResult": "model", "CheckResult": "model",
    "CHECK_IDS": "model", "verdict_of": "model", "exit_code_for": "model", "load_config": "config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvplan.preflight' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
