"""GPU prices (``prices.json``: on-demand USD per GPU-hour from a public price list, dated and
sourced per row; GPUs the list does not carry are marked unpriced with the reason) and what a
fleet costs: per hour, and per million output tokens at the load it carries.

``--gpu-price A100-80GB=1.8,H100=2.5`` (catalog names or aliases) or ``--gpu-price FILE`` (a JSON
object ``{gpu: price}``, or this package's file shape) replaces the listed prices; the result says
which prices it used and where each came from.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError

_FILE = Path(__file__).with_name("prices.json")


@dataclass(frozen=True)
class PriceTable:
    """USD per GPU-hour by catalog GPU name; ``origin`` says where each price came from."""

    usd: dict[str, float]
    origin: dict[str, str]
    unpriced: dict[str, str] = field(default_factory=dict)
    date: str = ""

    def price(self, gpu: str) -> Optional[float]:
        return self.usd.get(gpu)

    def describe(self, gpu: str) -> dict[str, Any]:
        p = self.usd.get(gpu)
        return {"gpu": gpu, "usd_per_gpu_hour": p, "source": self.origin.get(gpu),
                "unpriced": None if p is not None else self.unpriced.get(gpu, "no price given")}


@lru_cache(maxsize=1)
def _shipped() -> dict:
    return json.loads(_FILE.read_text(encoding="utf-8"))


def shipped_table() -> PriceTable:
    d = _shipped()
    usd = {k: float(v["usd"]) for k, v in d["prices"].items()}
    origin = {k: f"{d['sources'][v['source']]['url']} ({v['row']}; {d['date']})" for k, v in d["prices"].items()}
    return PriceTable(usd, origin, dict(d.get("unpriced", {})), d["date"])


def load_prices(override: Optional[str] = None) -> PriceTable:
    """The shipped table, with ``--gpu-price``'s prices (``NAME=USD,...`` or a JSON file) over it."""
    table = shipped_table()
    if not override:
        return table
    given = _read_override(override)
    from . import find_gpu

    usd, origin = dict(table.usd), dict(table.origin)
    for name, value in given.items():
        try:
            gpu = find_gpu(name).name
        except UsageError:
            raise UsageError(f"--gpu-price: {name!r} is not a GPU of the catalog (see `kvplan gpus`)") from None
        if not (isinstance(value, (int, float)) and value >= 0):
            raise UsageError(f"--gpu-price: {name}={value!r} is not a non-negative price in USD per GPU-hour")
        usd[gpu] = float(value)
        origin[gpu] = "--gpu-price"
    return PriceTable(usd, origin, {k: v for k, v in table.unpriced.items() if k not in usd}, table.date)


def _read_override(text: str) -> dict[str, Any]:
    p = Path(text).expanduser()
    if p.suffix.lower() == ".json" or (p.exists() and p.is_file()):
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UsageError(f"--gpu-price {text}: cannot read: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise UsageError(f"--gpu-price {text}:{exc.lineno}: not JSON: {exc.msg}") from None
        if isinstance(d, dict) and isinstance(d.get("prices"), dict):
            d = {k: (v.get("usd") if isinstance(v, dict) else v) for k, v in d["prices"].items()}
        if not isinstance(d, dict):
            raise UsageError(f"--gpu-price {text}: expected an object {{gpu: USD per GPU-hour}}")
        return d
    out: dict[str, Any] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--gpu-price: {part!r} is not NAME=USD (e.g. --gpu-price A100-80GB=1.8,H100=2.5)")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--gpu-price: {part!r}: {value!r} is not a number") from None
    return out


def fleet_cost(table: PriceTable, gpu: str, gpus: Optional[int], rate: Optional[float],
               capacity_rps: Optional[float], mean_output_tokens: Optional[float]) -> dict[str, Any]:
    """What ``gpus`` GPUs of ``gpu`` cost per hour, and per million output tokens at ``rate``
    (the load the SLO was met at) and at the fleet's capacity."""
    p = table.price(gpu)
    out: dict[str, Any] = {"usd_per_gpu_hour": p, "price_source": table.origin.get(gpu),
                           "usd_per_hour": None, "usd_per_million_output_tokens": None,
                           "usd_per_million_output_tokens_at_capacity": None}
    if p is None:
        out["unpriced"] = table.unpriced.get(gpu, "no price given (--gpu-price NAME=USD)")
        return out
    if gpus:
        per_hour = p * gpus
        out["usd_per_hour"] = round(per_hour, 4)
        if mean_output_tokens:
            for key, r in (("usd_per_million_output_tokens", rate),
                           ("usd_per_million_output_tokens_at_capacity", capacity_rps)):
                if r:
                    out[key] = round(per_hour / (r * mean_output_tokens * 3600.0) * 1e6, 4)
    return out
