"""Token-length distributions (``--input-len`` / ``--output-len``) shared by the load generator
(``kvplan bench``) and the simulator (``kvplan simulate``).

Syntax: ``N`` / ``fixed:N``; ``uniform:LO:HI`` or ``uniform:LO,HI``; ``normal:MEAN:STD`` or
``normal:MEAN,STD`` (clipped to ≥ 1 when sampled); ``log`` / ``empirical`` (lengths taken from a
request log, resolved by the caller).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..errors import UsageError


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: fixed N, uniform LO..HI, normal MEAN,STD (clipped to ≥ 1),
    ``log`` (each log record's own prompt / output length) or ``empirical`` (synthetic prompts
    whose lengths are drawn from the log's length distribution)."""

    kind: str  # fixed | uniform | normal | log | empirical
    a: float = 0.0
    b: float = 0.0

    def describe(self) -> str:
        if self.kind == "fixed":
            return str(int(self.a))
        if self.kind in ("log", "empirical"):
            return self.kind
        return f"{self.kind}:{self.a:g}:{self.b:g}"

    def sample(self, rng: random.Random) -> int:
        """One length (≥ 1 token). ``uniform`` draws an integer in [LO, HI] inclusive."""
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))  # as kvplan bench draws it (prompts._draw)
        if self.kind == "normal":
            return max(1, int(round(rng.gauss(self.a, self.b))))
        raise ValueError(f"a {self.kind!r} length has no parametric distribution; resolve it from the log")

    @property
    def mean(self) -> float:
        if self.kind == "fixed":
            return float(self.a)
        if self.kind in ("uniform", "normal"):
            return (self.a + self.b) / 2.0 if self.kind == "uniform" else float(self.a)
        raise ValueError(f"a {self.kind!r} length has no parametric mean")


def parse_length(text: str, what: str) -> LengthDist:
    raw = text.strip().lower()
    try:
        if raw in ("log", "empirical"):
            return LengthDist(raw)
        if raw.isdigit() or raw.startswith("fixed:"):
            n = int(raw.split(":")[-1])
            if n < 1:
                raise ValueError
            return LengthDist("fixed", n)
        kind, _, rest = raw.partition(":")
        # both "uniform:LO:HI" and the "uniform:LO,HI" (one separator, never mixed twice)
        sep = "," if "," in rest else ":"
        lo_s, found, hi_s = rest.partition(sep)
        if not found or sep in hi_s or ":" in hi_s:
            raise ValueError
        lo, hi = float(lo_s), float(hi_s)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError
        if kind == "uniform" and 1 <= lo <= hi:
            return LengthDist("uniform", lo, hi)
        if kind == "normal" and lo >= 1 and hi >= 0:
            return LengthDist("normal", lo, hi)
    except ValueError:
        pass
    else:
        # readable, but the numbers do not make a distribution: say which rule they break
        if kind == "uniform" and lo > hi >= 1:
            raise UsageError(f"{what} {text!r}: LO > HI ({lo_s} > {hi_s}); write uniform:{hi_s},{lo_s}")
        if kind == "uniform" and min(lo, hi) < 1:
            raise UsageError(f"{what} {text!r}: lengths are at least 1 token (LO {lo_s}, HI {hi_s})")
        if kind == "normal":
            raise UsageError(f"{what} {text!r}: normal needs MEAN ≥ 1 and STD ≥ 0 (got {lo_s}, {hi_s})")
    raise UsageError(f"{what}: cannot read {text!r}; use N, uniform:LO:HI (or LO,HI), normal:MEAN:STD "
                     "(or MEAN,STD), log or empirical")
