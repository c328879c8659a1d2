"""Reading vLLM and DCGM series from a Prometheus server's HTTP API (``kvplan watch --prometheus``,
``kvplan doctor --prometheus``): client.py (HTTP, errors naming the query), parse.py (strict
response parsing), history.py (series -> the snapshots kvplan's live mode already understands)."""
from .client import PromClient, PromError
from .parse import PromResponseError, parse_response

__all__ = ["PromClient", "PromError", "PromResponseError", "parse_response"]
