"""``kvplan bench``: load-test a live OpenAI-compatible server (vLLM first) and read the server's
own ``/metrics`` on the same time axis.

Public API (attributes are imported on first use, so ``import kvplan.bench`` costs nothing on
the ``kvplan plan`` path; aiohttp loads only when a run starts)::

    from kvplan.bench import BenchConfig, run_bench, BenchResult, compare
    from kvplan.bench import parse_metrics, MetricsSnapshot, delta, histogram_quantile  # the one Prometheus parser
    from kvplan.bench import SSEParser

See docs/bench.md for the result schema.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "BenchConfig": "config", "LengthDist": "config", "Slo": "config", "parse_slo": "config",
    "parse_length": "config",
    "run_bench": "run", "Progress": "run", "ServerUnavailable": "run",
    "BenchResult": "result", "build_result": "result",
    "compare": "compare", "Comparison": "compare",
    "parse_metrics": "metrics", "MetricsSnapshot": "metrics", "Histogram": "metrics", "delta": "metrics",
    "histogram_delta": "metrics", "histogram_quantile": "metrics", "counter_delta": "metrics", "ALIASES": "metrics",
    "SSEParser": "sse", "Event": "sse",
    "Record": "client", "ERROR_CLASSES": "client",
    "read_log_requests": "prompts",
    "write_result": "io", "write_records": "io", "load_result": "io",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvplan.bench' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
