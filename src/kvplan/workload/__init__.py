"""Workload analysis: real request logs → token lengths → serving settings.

``analyze_lengths`` reads logs (JSONL, JSON arrays, CSV, vLLM's request log; gzip/zstd; any
size) and counts every request exactly, with server-reported usage or the model's own
tokenizer and chat template. ``trim_messages`` fits a conversation to a token budget in whole
turns. ``traffic_fit`` measures a plan against the observed length mix.

Attributes are imported on first use, so ``import kvplan.workload`` costs nothing on the
``kvplan plan`` path (tokenizers and jinja2 load only when a prompt is really counted).
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "analyze_lengths": "analysis", "LengthsOptions": "analysis",
    "LengthsResult": "result", "Recommendation": "result", "CoverageRow": "result",
    "trim_messages": "trim", "TrimResult": "trim", "split_turns": "trim",
    "traffic_fit": "traffic", "TrafficFit": "traffic",
    "ChatTokenizer": "tokenizer", "Estimator": "tokenizer",
    "FieldNames": "shapes", "Request": "shapes",
    "coverage_at": "finalize",
    "StrictModeError": "issues", "Issue": "issues",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvplan.workload' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
