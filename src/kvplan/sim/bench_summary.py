"""The figures ``vllm bench serve`` prints at the end of a run, from a simulated one, with the keys of
its saved result JSON (``serve.py``'s ``calculate_metrics`` / ``benchmark``, 0.10 … 0.33):

- ``duration``: from the benchmark's start (t = 0, before the first send) until every request has
  returned (the last response, or the last rejection).
- ``completed``, ``failed``; ``total_input_tokens`` (the client's ``prompt_len`` per completed
  request), ``total_output_tokens``; ``request_throughput``, ``output_throughput``,
  ``total_token_throughput`` = those over ``duration``.
- TTFT, E2EL per request from its send time (the API server's latency included); TPOT per request
  with more than one output token = (E2EL - TTFT) / (output tokens - 1), the first token excluded;
  ITL = every gap between consecutive tokens. ``mean_*``, ``median_*``, ``std_*`` (numpy's
  population std) and ``p99_*`` (numpy's linear percentile), in milliseconds.
- ``max_concurrent_requests`` ("Peak concurrent requests", 0.11.1+): the most requests active in one
  whole second, counting seconds ``int(start - first start)`` … ``int(end - first start)`` of each
  request as vLLM does (so it can exceed the instantaneous peak by the requests that end and start
  within the same second).
- ``max_output_tokens_per_s`` ("Peak output token throughput"): the most tokens in one second. The
  simulator keeps each request's first and last token times, not every token's: the tokens in
  between are spread evenly (an approximation; the peak second is usually a steady decode second).
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional

from ..quantiles import percentiles
from ..runs.sections import PERCENTILES, TAIL, LatencyStats
from .engine_kv import DONE, Req

#: the percentiles kept per latency: the result's (p50, p90, p95, p99, p999); bench reads p50 and p99
RAW_PERCENTILES = [p for _, p in PERCENTILES + (TAIL,)]


class ClientLatencies(NamedTuple):
    """What the clients measure, per completed request (``done``), in seconds with the API server's
    latency (``overhead_s``) added: TTFT, TPOT (requests with more than one output token) and E2E,
    in request order, with their unrounded percentiles (``*_raw``: :data:`RAW_PERCENTILES`); the
    ITL as (gap, count) pairs and their statistics. Computed once for the result's latency section
    and bench's figures (a million-request run selects each percentile once)."""

    done: list
    ttft: list
    tpot: list
    e2e: list
    ttft_raw: list
    tpot_raw: list
    e2e_raw: list
    itl_pairs: list
    itl: LatencyStats

    @classmethod
    def of(cls, engine, overhead_s: float) -> "ClientLatencies":
        reqs: list[Req] = engine.reqs
        done: list[Req] = [r for r in reqs if r.status == DONE]
        ttft: list[float] = []
        e2e: list[float] = []
        tpot: list[float] = []
        for r in done:  # (one loop, in request order; the same operations as the lists' definitions)
            t_first: float = r.t_first
            t_end: float = r.t_end
            ttft.append(t_first - r.arrival + overhead_s)
            e2e.append(t_end - r.arrival + overhead_s)
            if r.num_output_tokens > 1:
                tpot.append((t_end - t_first) / (r.num_output_tokens - 1))
        itl_pairs = list(engine.itl_w) + [(x, 1) for x in engine.itl_x]
        return cls(done, ttft, tpot, e2e, percentiles(ttft, RAW_PERCENTILES), percentiles(tpot, RAW_PERCENTILES),
                   percentiles(e2e, RAW_PERCENTILES), itl_pairs, LatencyStats.of_weighted(itl_pairs))

    def stats(self, name: str) -> LatencyStats:
        """The result's latency section of ``ttft``, ``tpot`` or ``e2e`` (with the tail)."""
        return LatencyStats.of_percentiles(getattr(self, name), getattr(self, name + "_raw"), tail=True)


class RequestTotals(NamedTuple):
    """One pass over a run's requests for the result's other sums: the queueing time of each
    completed request that was scheduled (arrival to first schedule), the prompt and output tokens
    of the completed ones, the earliest arrival of all (0.0 without requests), the latest end of
    the completed ones (None without), and how many requests were preempted at least once."""

    queue: list
    prompt_tokens: int
    output_tokens: int
    first: Any
    end: Any
    preempted: int


def request_totals(reqs: list[Req], done: list[Req]) -> RequestTotals:
    """:class:`RequestTotals` (min and max as the builtins keep them: the first of equal values)."""
    queue: list = []
    prompt_tokens = output_tokens = 0
    end: Any = None
    for r in done:
        if r.t_sched is not None:
            queue.append(r.t_sched - r.arrival)
        prompt_tokens += r.num_prompt_tokens
        output_tokens += r.num_output_tokens
        if end is None or r.t_end > end:
            end = r.t_end
    first: Any = reqs[0].arrival if reqs else 0.0
    preempted = 0
    for r in reqs:
        if r.arrival < first:
            first = r.arrival
        if r.preempted:
            preempted += 1
    return RequestTotals(queue, prompt_tokens, output_tokens, first, end, preempted)


def _stats(values: list[float], raw: list, name: str, out: dict) -> None:
    """bench's mean, median, std and P99 of samples (any order: the sums are exact) whose
    :data:`RAW_PERCENTILES` are ``raw``."""
    n = len(values)
    mean = math.fsum(values) / n if n else 0.0
    var = math.fsum([(x - mean) ** 2.0 for x in values]) / n if n else 0.0
    out[f"mean_{name}_ms"] = _ms(mean)
    out[f"median_{name}_ms"] = _ms(raw[0] or 0.0)
    out[f"std_{name}_ms"] = _ms(math.sqrt(var))
    out[f"p99_{name}_ms"] = _ms(raw[3] or 0.0)


def _weighted_stats(pairs: list[tuple[float, int]], summ: LatencyStats, name: str, out: dict) -> None:
    """The same of (value, count) pairs, whose :class:`LatencyStats` is ``summ``."""
    n = summ["count"]
    if not n:
        for k in ("mean", "median", "std", "p99"):
            out[f"{k}_{name}_ms"] = 0.0
        return
    mean: float = summ["mean"]
    var = math.fsum([c * (v - mean) ** 2.0 for v, c in pairs]) / n
    # the median: the weighted statistics' p50
    out[f"mean_{name}_ms"] = _ms(mean)
    out[f"median_{name}_ms"] = _ms(summ["p50"])
    out[f"std_{name}_ms"] = _ms(math.sqrt(var))
    out[f"p99_{name}_ms"] = _ms(summ["p99"])


def _ms(x: Optional[float]) -> float:
    return round((x or 0.0) * 1000.0, 4)


def bench_summary(engine, trace, overhead_s: float, latencies: Optional[ClientLatencies] = None) -> dict:
    """The ``vllm bench serve`` result of a simulated run (keys as its result JSON); ``latencies``:
    the run's :class:`ClientLatencies` when the caller has them."""
    if latencies is None:
        latencies = ClientLatencies.of(engine, overhead_s)
    reqs: list[Req] = engine.reqs
    client: list = [getattr(r, "client_prompt_tokens", None) for r in trace.requests]
    done: list[Req] = latencies.done
    ends = [r.t_end + overhead_s for r in done]
    failed_at = [r.arrival for r in reqs if r.status != DONE and math.isfinite(r.arrival)]
    duration = max(ends + failed_at, default=0.0)
    total_in = sum((client[r.i] if client[r.i] is not None else r.num_prompt_tokens) for r in done)
    total_out = sum(r.num_output_tokens for r in done)
    out: dict = {"duration": round(duration, 6), "completed": len(done), "failed": len(reqs) - len(done),
                 "total_input_tokens": total_in, "total_output_tokens": total_out}
    if trace.bench is not None:
        out["request_rate"] = trace.bench.get("request_rate")
        out["burstiness"] = trace.bench.get("burstiness")
    out["max_concurrency"] = trace.max_concurrency
    d = duration if duration > 0 else math.nan
    out["request_throughput"] = _rate(len(done), d)
    out["output_throughput"] = _rate(total_out, d)
    out["total_token_throughput"] = _rate(total_in + total_out, d)
    _stats(latencies.ttft, latencies.ttft_raw, "ttft", out)
    _stats(latencies.tpot, latencies.tpot_raw, "tpot", out)
    _weighted_stats(latencies.itl_pairs, latencies.itl, "itl", out)
    _stats(latencies.e2e, latencies.e2e_raw, "e2el", out)
    peak_req, peak_tok = _peaks(done, overhead_s)
    out["max_concurrent_requests"] = peak_req
    out["max_output_tokens_per_s"] = peak_tok
    return out


def _rate(x: float, d: float) -> Optional[float]:
    return round(x / d, 6) if d == d and d > 0 else None


def _peaks(done: list[Req], overhead_s: float) -> tuple[int, float]:
    """vLLM's per-second buckets of active requests and of output tokens (difference arrays: O(1)
    per request; a request's tokens after the first at a constant rate between first and last)."""
    if not done:
        return 0, 0.0
    t0: float = min(r.arrival for r in done)
    last = max(r.t_end + overhead_s for r in done)
    nb = int(math.ceil(last - t0)) + 1
    active = [0] * (nb + 1)
    tokens = [0.0] * (nb + 1)
    rate_diff = [0.0] * (nb + 2)
    last_bucket = nb - 1
    for r in done:  # (min() spelt as comparisons: a million requests pass here)
        t_end: float = r.t_end
        end = t_end + overhead_s - t0
        b = int(end) + 1
        active[int(r.arrival - t0)] += 1
        active[b if b < nb else nb] -= 1
        k = r.num_output_tokens
        if k <= 0:
            continue
        t_first: float = r.t_first
        first = t_first + overhead_s - t0
        fb = int(first)
        eb = int(end)
        if eb > last_bucket:
            eb = last_bucket
        first_bucket = fb if fb < last_bucket else last_bucket
        if k < 2:
            tokens[first_bucket] += 1
            continue
        span = end - first
        if span <= 0 or eb <= fb:
            tokens[first_bucket] += 1
            tokens[first_bucket] += k - 1
            continue
        tokens[first_bucket] += 1
        rate = (k - 1) / span
        tokens[fb] += (fb + 1 - first) * rate
        tokens[eb] += (end - eb) * rate
        if eb > fb + 1:
            rate_diff[fb + 1] += rate
            rate_diff[eb] -= rate
    peak, run = 0, 0
    for v in active[:nb]:
        run += v
        if run > peak:
            peak = run
    dens, best = 0.0, 0.0
    for i in range(nb):
        dens += rate_diff[i]
        tokens_in_second = tokens[i] + dens
        if tokens_in_second > best:
            best = tokens_in_second
    return peak, round(best, 3)
