"""Arrival schedules: the offsets (seconds from the run's start) at which requests are due.

Open loop only; the closed loop needs no schedule. Every schedule is a pure function of its
parameters and seed, so N worker processes each regenerate the same global schedule and take
arrivals ``i ≡ worker (mod N)``: the merged traffic is exactly the one-process traffic.

A ramp is a time change of a unit-rate process: arrivals ``u_k`` of a rate-1 process (constant,
Poisson or gamma) are mapped through the inverse of the cumulative rate Λ(t) = ∫λ, with λ rising
linearly from 0 to R over ``ramp_s``. This keeps the burstiness shape while the rate grows.
"""
from __future__ import annotations

import math
import random
from typing import Iterator, Optional, Sequence


def unit_gaps(kind: str, burstiness: float, rng: random.Random) -> Iterator[float]:
    """Inter-arrival gaps of a rate-1 process: constant 1, exponential (Poisson), or gamma with
    shape ``burstiness`` and mean 1 (shape < 1 is burstier than Poisson, > 1 smoother)."""
    if kind == "constant":
        while True:
            yield 1.0
    elif kind == "poisson" or (kind == "gamma" and burstiness == 1.0):
        while True:
            yield rng.expovariate(1.0)
    elif kind == "gamma":
        scale = 1.0 / burstiness
        while True:
            yield rng.gammavariate(burstiness, scale)
    else:
        raise ValueError(f"unknown arrival kind {kind!r}")


def _warp(u: float, rate: float, ramp_s: float) -> float:
    """Inverse cumulative rate: the time at which Λ(t) = u for a linear ramp to ``rate``."""
    if ramp_s <= 0:
        return u / rate
    knee = rate * ramp_s / 2.0  # Λ at the end of the ramp
    if u < knee:
        return math.sqrt(2.0 * ramp_s * u / rate)
    return ramp_s + (u - knee) / rate


def rate_schedule(rate: float, kind: str = "poisson", burstiness: float = 1.0, ramp_s: float = 0.0,
                  seed: int = 0, end_s: Optional[float] = None, max_count: Optional[int] = None) -> Iterator[float]:
    """Offsets of an open-loop schedule at ``rate`` req/s, stopping before ``end_s`` or after
    ``max_count`` arrivals (at least one bound is required). The first arrival is at 0 for a
    constant schedule (no ramp) and one random gap in otherwise, as a real arrival process would."""
    if end_s is None and max_count is None:
        raise ValueError("an unbounded schedule")
    rng = random.Random(seed)
    gaps = unit_gaps(kind, burstiness, rng)
    u = 0.0 if kind == "constant" and ramp_s <= 0 else next(gaps)
    n = 0
    while max_count is None or n < max_count:
        t = _warp(u, rate, ramp_s)
        if end_s is not None and t >= end_s:
            return
        yield t
        n += 1
        u += next(gaps)


def replay_schedule(timestamps: Sequence[Optional[float]], speed: float = 1.0) -> list[float]:
    """Offsets from a log's timestamps, relative to the earliest, divided by ``speed``. Records
    without a timestamp keep the previous record's offset (they are sent together with it)."""
    known = [t for t in timestamps if t is not None]
    if not known:
        raise ValueError("the request log has no timestamps to replay")
    t0 = min(known)
    out, last = [], 0.0
    for t in timestamps:
        if t is not None:
            last = (t - t0) / speed
        out.append(last)
    return out
