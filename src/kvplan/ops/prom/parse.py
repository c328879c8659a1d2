"""Strict parsing of Prometheus HTTP API answers (``/api/v1/query``, ``query_range``, ``series``).

Every answer is checked against the documented envelope (``{"status": "success"|"error", "data":
..., "errorType", "error", "warnings"}``) and result types (``vector``, ``matrix``, ``scalar``,
``string``; series lists for ``/api/v1/series``). Anything else -- not JSON, a wrong shape, a value
that is not a number string -- raises :class:`PromResponseError` naming the query, never a
KeyError or TypeError deep inside kvplan (tests/test_prom_parse.py fuzzes this with hypothesis).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Optional

Labels = tuple[tuple[str, str], ...]
MAX_ERROR_TEXT = 300


class PromResponseError(ValueError):
    """The answer to ``query`` could not be used; ``str()`` names the query and why."""

    def __init__(self, query: str, why: str) -> None:
        self.query, self.why = query, why
        super().__init__(f"query {query!r}: {why}")


@dataclass(frozen=True)
class Series:
    """One result series: its labels (``__name__`` included when Prometheus kept it) and samples."""

    labels: Labels
    samples: tuple[tuple[float, float], ...]  # (unix time, value)

    def label(self, key: str) -> Optional[str]:
        return dict(self.labels).get(key)

    @property
    def name(self) -> Optional[str]:
        return self.label("__name__")


@dataclass(frozen=True)
class Result:
    result_type: str  # vector | matrix | scalar | string | series
    series: tuple[Series, ...]
    warnings: tuple[str, ...] = ()


def _cut(text: str) -> str:
    return text if len(text) <= MAX_ERROR_TEXT else text[:MAX_ERROR_TEXT] + "…"


def _value(query: str, pair: Any) -> tuple[float, float]:
    if not isinstance(pair, list) or len(pair) != 2:
        raise PromResponseError(query, f"a sample is not [time, \"value\"]: {_cut(json.dumps(pair))}")
    t, v = pair
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        raise PromResponseError(query, f"a sample time is not a number: {_cut(json.dumps(t))}")
    if not isinstance(v, str):
        raise PromResponseError(query, f"a sample value is not a string: {_cut(json.dumps(v))}")
    try:
        value = float(v)  # Prometheus writes "NaN", "+Inf", "-Inf" too; float() reads all three
    except ValueError:
        raise PromResponseError(query, f"a sample value is not a number: {_cut(v)!r}") from None
    return float(t), value


def _labels(query: str, metric: Any) -> Labels:
    if not isinstance(metric, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items()):
        raise PromResponseError(query, f"series labels are not a string map: {_cut(json.dumps(metric))}")
    return tuple(sorted(metric.items()))


def parse_response(body: bytes | str, query: str, endpoint: str = "query") -> Result:
    """Parse one answer. ``endpoint`` is ``query``, ``query_range`` or ``series``."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as exc:
        what = f"line {exc.lineno} column {exc.colno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "nested too deep"
        raise PromResponseError(query, f"the answer is not JSON ({what}): {_cut(body)!r}") from None
    if not isinstance(doc, dict):
        raise PromResponseError(query, f"the answer is not a JSON object: {_cut(body)!r}")
    status = doc.get("status")
    if status == "error":
        kind, err = doc.get("errorType"), doc.get("error")
        raise PromResponseError(query, f"Prometheus answered {kind if isinstance(kind, str) else 'an'} error: "
                                       f"{_cut(err) if isinstance(err, str) else _cut(json.dumps(err))}")
    if status != "success":
        raise PromResponseError(query, f"status is {_cut(json.dumps(status))}, expected \"success\"")
    warnings = doc.get("warnings") or []
    warns = tuple(_cut(w) for w in warnings if isinstance(w, str)) if isinstance(warnings, list) else ()
    data = doc.get("data")
    if endpoint == "series":
        if not isinstance(data, list):
            raise PromResponseError(query, "data is not a list of series")
        return Result("series", tuple(Series(_labels(query, m), ()) for m in data), warns)
    if not isinstance(data, dict):
        raise PromResponseError(query, "data is not an object with resultType and result")
    rtype, result = data.get("resultType"), data.get("result")
    if rtype in ("scalar", "string"):
        t, v = _value(query, result) if rtype == "scalar" else (0.0, math.nan)
        return Result(rtype, (Series((), ((t, v),)),), warns)
    if rtype not in ("vector", "matrix"):
        raise PromResponseError(query, f"unknown resultType {_cut(json.dumps(rtype))}")
    if not isinstance(result, list):
        raise PromResponseError(query, f"{rtype} result is not a list")
    out = []
    for item in result:
        if not isinstance(item, dict):
            raise PromResponseError(query, f"a {rtype} element is not an object: {_cut(json.dumps(item))}")
        labels = _labels(query, item.get("metric", {}))
        if rtype == "vector":
            if "histogram" in item and "value" not in item:
                continue  # a native histogram sample: kvplan reads classic buckets only
            samples = (_value(query, item.get("value")),)
        else:
            values = item.get("values", [])
            if not isinstance(values, list):
                raise PromResponseError(query, "a matrix series' values is not a list")
            samples = tuple(_value(query, p) for p in values)
        out.append(Series(labels, samples))
    return Result(rtype, tuple(out), warns)
