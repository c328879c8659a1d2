"""Does a simulated run keep up with its arrivals? The verdict every capacity answer rests on.

A finite run can look fine while its backlog grows (the trace ends first), or look overloaded
while it is only filling (the running batch, and with it the step time, still growing towards a
steady state it will reach). Three signals, over the *settled window* (the second half of the
arrivals, starting no earlier than the E2E's P90 after the first, when the engine has filled):

1. **completed < offered beyond noise**: the requests completed in the window fall short of those
   that arrived in it by more than 3 sigma (arrivals and completions counted as Poisson: sigma =
   sqrt(A + C)), and by at least 5;
2. **the queue's slope**: the waiting queue grows over the window beyond its noise
   (3 sqrt(2 λ W)) and ends with at least max(5, 2 % of the requests) waiting;
3. **the drain time**: after the last arrival the backlog takes more than twice the slowest E2E of
   the requests that arrived in the first half to clear.

A waiting queue that grows is saturation (vLLM queues only when the batch is at a limit:
``max_num_seqs``, the KV cache or the token budget). A shortfall with a long drain is too. A
shortfall with neither means the batch is still growing: it is saturation only when the offered
rate is above the **completion ceiling** - what the engine completes per second at overload, a
burst of the same requests measured between its 25th and 75th percentile completions
(:func:`completion_ceiling`); below the ceiling the run is still filling, and too short to judge.
No shortfall and no queue growth: the backlog is bounded. A run whose settled window is too short
(less than a fifth of the arrivals, fewer than 3 timeline samples or 30 arrivals) is judged by the
ceiling alone: saturated above it, bounded at half of it or less, else not judged.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from ..quantiles import order_statistic

#: the rate above the ceiling that counts as over it (the ceiling's own spread between bursts)
CEILING_TOLERANCE = 0.02
#: the drain after the last arrival that betrays a backlog, in slowest E2Es of the first half's requests
DRAIN_E2E_SPANS = 2.0
#: a short run offered at most this share of the ceiling is judged bounded without the window test
FAR_BELOW = 0.5
#: the fewest arrivals in the settled window that judge a run (3 sigma of 30 is a 40 % shortfall)
MIN_WINDOW_ARRIVALS = 30


# A trace judges a configuration when its arrivals span several of that configuration's E2E times
# (the second half of the arrivals must start after the engine filled, one median E2E in, and then
# a fifth of the span must remain to fit a slope): five median E2Es leave margin.
JUDGE_E2E_SPANS = 5.0
DERIVED_ROUND = 500  # lengths derived from it are rounded up to a multiple of this


def requests_to_judge_at(rate: Optional[float], e2e_median: float) -> Optional[int]:
    """Requests at ``rate`` whose arrivals span :data:`JUDGE_E2E_SPANS` median E2Es, rounded up to
    :data:`DERIVED_ROUND` (None without a rate or an E2E): the length ``tune`` derives for a run
    too short to judge, and the one ``simulate`` proposes."""
    if not rate or e2e_median <= 0:
        return None
    n = math.ceil(rate * JUDGE_E2E_SPANS * e2e_median)
    return -(-n // DERIVED_ROUND) * DERIVED_ROUND


def is_finite_benchmark(trace) -> bool:
    """A closed loop (at most ``max_concurrency`` in flight: the backlog waits in the client) or a
    burst (every request at one instant): the saturation detector's open-loop question (does a
    backlog grow at this rate?) does not apply; the result is the benchmark itself."""
    reqs = trace.requests
    burst = len(reqs) > 1 and reqs[-1].arrival_s <= reqs[0].arrival_s
    return bool(getattr(trace, "max_concurrency", None)) or burst


def steady_state_checks(saturated: Optional[bool], reason: str = "") -> tuple:
    """The checks an open-loop run with an SLO adds for its backlog, the one rule ``simulate`` and
    ``tune`` share: a saturated run misses every SLO once its trace is long enough, whatever this
    trace's percentiles say (``not_saturated`` fails); a run too short to judge cannot meet one either,
    since its percentiles may be optimistic (``saturation_judged`` fails, the reason says which trace
    judges it). A bounded run adds nothing."""
    from ..slo import Check

    if saturated:
        return (Check("not_saturated", False, 1.0, 0.0, note=reason),)
    if saturated is None:
        return (Check("saturation_judged", False, 0.0, 1.0, note=reason),)
    return ()


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 6)


def _slope(pts: list[tuple[float, float]]) -> Optional[float]:
    """Least-squares slope of (t, y) points, None for fewer than two."""
    if len(pts) < 2:
        return None
    mt = sum(t for t, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((t - mt) ** 2 for t, _ in pts)
    return sum((t - mt) * (y - my) for t, y in pts) / den if den > 0 else 0.0


def verdict(reqs: Sequence, timeline: Sequence[dict], interval: float, max_waiting: int, *,
            ceiling_rps: Optional[float] = None) -> dict:
    """The saturation verdict of a run (``reqs``: the engine's requests with client-side
    arrivals; ``timeline``: its samples). ``ceiling_rps``: the completion ceiling of the whole
    run's engines (replicas × one replica's), when known. ``saturated`` is True, False or None
    (not judged), with the reason, the signals and ``needs_ceiling`` (the verdict waits on it)."""
    from .engine_kv import DONE, Req

    requests: list[Req] = list(reqs)  # (typed: the native build reads their fields directly)
    base: dict[str, Any] = {"saturated": None, "offered_rate": None, "completion_rate": None, "queue_slope_per_s": None,
            "in_system_slope_per_s": None, "max_waiting": max_waiting, "max_sustainable_rate_estimate": None,
            "window": None, "drain_s": None, "ceiling_rps": _r(ceiling_rps), "needs_ceiling": False}
    isfinite = math.isfinite
    arrivals = sorted([r.arrival for r in requests if isfinite(r.arrival)])
    if len(arrivals) < 2 or arrivals[-1] <= arrivals[0]:
        return dict(base, reason="too few arrivals to judge")
    done = [r for r in requests if r.status == DONE]
    done_ends = sorted([r.t_end for r in done])
    if not done_ends:
        return dict(base, reason="no request completed (every one was rejected): nothing to judge")
    a0, a1 = arrivals[0], arrivals[-1]
    offered = (len(arrivals) - 1) / (a1 - a0)
    e2e_by_request = [r.t_end - r.arrival for r in done]
    # the engine has filled once the slow requests of the first wave are done: with a long tail of
    # output lengths that is nearer the E2E's P90 than its median (that order statistic)
    filling = order_statistic(e2e_by_request, min(len(e2e_by_request) - 1, (9 * len(e2e_by_request)) // 10))
    mid = a0 + (a1 - a0) / 2
    early = [x for r, x in zip(done, e2e_by_request) if r.arrival < mid]
    stable_drain = max(early) if early else filling
    start = max(mid, a0 + filling)
    window = a1 - start
    completion = len(done_ends) / (done_ends[-1] - a0) if done_ends[-1] > a0 else None
    drain = done_ends[-1] - a1
    out = dict(base, offered_rate=_r(offered), completion_rate=_r(completion), drain_s=_r(drain))
    over_ceiling = ceiling_rps is not None and offered > ceiling_rps * (1 + CEILING_TOLERANCE)
    # the waiting queue over the second half of the arrivals: it grows only when the batch is at a
    # limit (max_num_seqs, the KV cache, the token budget) and more arrive than are admitted
    half = [row for row in timeline if mid <= row["t"] <= a1 + interval]
    q_slope = _slope([(row["t"], row["waiting"]) for row in half])
    q_span = half[-1]["t"] - half[0]["t"] if half else 0.0
    end_wait = half[-1]["waiting"] if half else 0
    floor = max(5, 0.02 * len(arrivals))
    queue_grows = bool(q_slope is not None and q_slope * q_span > max(5.0, 3.0 * math.sqrt(2.0 * offered * q_span))
                       and end_wait >= floor)
    out["queue_slope_per_s"] = _r(q_slope)
    if queue_grows:
        return dict(out, saturated=True, max_sustainable_rate_estimate=_r(min(completion or 0.0,
                                                                              ceiling_rps or math.inf)),
                    reason=(f"the waiting queue grows by {q_slope:.2f} requests/s over the second half of the "
                            f"arrivals ({end_wait} waiting at the last arrival)"))
    rows = [row for row in timeline if start <= row["t"] <= a1 + interval]
    import bisect

    arrived = len(arrivals) - bisect.bisect_left(arrivals, start)
    if window < 0.2 * (a1 - a0) or len(rows) < 3 or arrived < MIN_WINDOW_ARRIVALS:
        if over_ceiling:
            return dict(out, saturated=True, max_sustainable_rate_estimate=_r(ceiling_rps),
                        reason=(f"{offered:.3g} req/s offered is above the {ceiling_rps:.3g} req/s the engine "
                                "completes at overload"))
        if ceiling_rps is not None and offered <= FAR_BELOW * ceiling_rps:
            return dict(out, saturated=False,
                        reason=(f"bounded: {offered:.3g} req/s offered is under {FAR_BELOW:.0%} of the {ceiling_rps:.3g} "
                                "req/s the engine completes at overload, and no queue grows (the trace is too short "
                                "for the window test)"))
        return dict(out, needs_ceiling=ceiling_rps is None,
                    reason=(f"too short to judge: {a1 - a0:.0f} s of arrivals against an E2E (P90) of "
                            f"{filling:.0f} s (the engine is still filling); use a trace several times "
                            "longer than the E2E"))
    # completions against arrivals in the settled window
    completed = bisect.bisect_right(done_ends, a1) - bisect.bisect_left(done_ends, start)
    deficit = arrived - completed
    sigma = math.sqrt(arrived + completed)
    short = deficit > max(5.0, 3.0 * sigma)
    in_slope = _slope([(row["t"], row["running"] + row["waiting"]) for row in rows])
    drain_long = drain > DRAIN_E2E_SPANS * stable_drain and short
    out.update(in_system_slope_per_s=_r(in_slope),
               window={"start_s": _r(start), "end_s": _r(a1), "arrived": arrived, "completed": completed,
                       "deficit": deficit, "sigma": _r(sigma)})
    shortfall = (f"{completed:,} of the {arrived:,} requests that arrived in the settled window completed "
                 f"({deficit:,} short, {deficit / sigma:.1f} sigma)") if sigma else ""
    saturated: Optional[bool]
    if over_ceiling:
        reason = (f"{offered:.3g} req/s offered is above the {ceiling_rps:.3g} req/s the engine completes at overload; "
                  + (shortfall or "the backlog grows"))
        saturated = True
    elif short and drain_long:
        reason = (f"{shortfall}, and the backlog takes {drain:.0f} s to drain after the last arrival (over "
                  f"{DRAIN_E2E_SPANS:g} x the {stable_drain:.0f} s the slowest request of the first half took): the "
                  "running batch absorbs a backlog it cannot serve")
        saturated = True
    elif short:
        saturated = None
        if ceiling_rps is None:
            out["needs_ceiling"] = True
        reason = (f"still filling: {shortfall} while no queue forms and the drain is short: the running batch "
                  "is still growing"
                  + (f" below the {ceiling_rps:.3g} req/s ceiling" if ceiling_rps is not None else "")
                  + "; a longer trace judges it")
    else:
        reason = (f"bounded: the requests completed in the settled window keep up with those that arrived "
                  f"({completed:,} of {arrived:,}) and the waiting queue does not grow")
        saturated = False
    out.update(saturated=saturated, reason=reason,
               max_sustainable_rate_estimate=_r(min(completion or 0.0, ceiling_rps or math.inf)) if saturated else None)
    return out


#: the traffic's requests a ceiling burst draws on, at least (when the traffic has that many)
CEILING_SAMPLE = 1000


def completion_ceiling(make_engine, requests: Sequence, *, max_num_seqs: int, kv_tokens: Optional[int] = None,
                       front_end=None) -> Optional[float]:
    """What one engine completes per second at overload: a burst of ``requests`` (cycled to at
    least 4 × ``max_num_seqs`` and 200, and at least ``CEILING_SAMPLE`` of them when there are as many; ``kv_tokens`` is not used to shrink it), all sent at t = 0, the completions between the 25th and the
    75th percentile (the batch full, the queue not yet drained) over their span. ``front_end``
    (``() -> FrontEnd or None``) makes the API server(s) in front of the engine (kvplan.sim.frontend),
    when the step model has one."""
    from .engine_kv import DONE
    from ..traffic.trace import SimRequest

    if not requests:
        return None
    # 4 x max_num_seqs even when the KV cache holds fewer: requests of one output length finish in
    # waves, and the window must span many of them (a KV-bound batch of a 4 x kv_tokens burst
    # measured 11-18 % low on Llama-2-70B on H100 at 512-token outputs)
    # and at least CEILING_SAMPLE of the traffic's own requests when it has them: the ceiling is a
    # mean over the burst's lengths, and 200 draws of outputs uniform in 4-51 tokens put it 4 % above
    # what the same traffic completes at overload (a mean's sampling error; about 2 % at 1,000)
    m = max(4 * max_num_seqs, min(len(requests), CEILING_SAMPLE), 200)
    burst = [SimRequest(0.0, r.prompt_tokens, r.output_tokens) for r in _cycle(requests, m)]
    e = make_engine(burst, front_end=front_end() if front_end is not None else None)
    e.run()
    ends = sorted(r.t_end for r in e.reqs if r.status == DONE)
    if len(ends) < 20:
        return None
    lo, hi = len(ends) // 4, (3 * len(ends)) // 4
    span = ends[hi] - ends[lo]
    return (hi - lo) / span if span > 0 else None


def _cycle(requests: Sequence, n: int) -> list:
    out = list(requests[:n])
    while len(out) < n:
        out.extend(requests[: n - len(out)])
    return out
