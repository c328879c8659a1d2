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
from typing import NamedTuple, Optional

from ..quantiles import percentile
from ..runs.sections import LatencyStats
from .engine_kv import DONE


class ClientLatencies(NamedTuple):
    """What the clients measure, per completed request (``done``), in seconds with the API server's
    latency (``overhead_s``) added: TTFT, TPOT (requests with more than one output token) and E2E,
    in request order and sorted; the ITL as (gap, count) pairs and their statistics. Computed once
    for the result's latency section and bench's figures (a million-request run sorts each once)."""

    done: list
    ttft: list
    tpot: list
    e2e: list
    ttft_sorted: list
    tpot_sorted: list
    e2e_sorted: list
    itl_pairs: list
    itl: LatencyStats

    @classmethod
    def of(cls, engine, overhead_s: float) -> "ClientLatencies":
        done = [r for r in engine.reqs if r.status == DONE]
        ttft = [r.t_first - r.arrival + overhead_s for r in done]
        e2e = [r.t_end - r.arrival + overhead_s for r in done]
        tpot = [(r.t_end - r.t_first) / (r.num_output_tokens - 1) for r in done if r.num_output_tokens > 1]
        itl_pairs = list(engine.itl_w) + [(x, 1) for x in engine.itl_x]
        return cls(done, ttft, tpot, e2e, sorted(ttft), sorted(tpot), sorted(e2e), itl_pairs,
                   LatencyStats.of_weighted(itl_pairs))


def _stats(s: list, name: str, out: dict) -> None:
    """bench's mean, median, std and P99 of samples in ascending order."""
    n = len(s)
    mean = math.fsum(s) / n if n else 0.0
    var = math.fsum((x - mean) ** 2 for x in s) / n if n else 0.0
    out[f"mean_{name}_ms"] = _ms(mean)
    out[f"median_{name}_ms"] = _ms(percentile(s, 50.0) or 0.0)
    out[f"std_{name}_ms"] = _ms(math.sqrt(var))
    out[f"p99_{name}_ms"] = _ms(percentile(s, 99.0) or 0.0)


def _weighted_stats(pairs: list, summ: LatencyStats, name: str, out: dict) -> None:
    """The same of (value, count) pairs, whose :class:`LatencyStats` is ``summ``."""
    n = summ["count"]
    if not n:
        for k in ("mean", "median", "std", "p99"):
            out[f"{k}_{name}_ms"] = 0.0
        return
    mean = summ["mean"]
    var = math.fsum(c * (v - mean) ** 2 for v, c in pairs) / n
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
    reqs = engine.reqs
    client = [getattr(r, "client_prompt_tokens", None) for r in trace.requests]
    done = latencies.done
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
    _stats(latencies.ttft_sorted, "ttft", out)
    _stats(latencies.tpot_sorted, "tpot", out)
    _weighted_stats(latencies.itl_pairs, latencies.itl, "itl", out)
    _stats(latencies.e2e_sorted, "e2el", out)
    peak_req, peak_tok = _peaks(done, overhead_s)
    out["max_concurrent_requests"] = peak_req
    out["max_output_tokens_per_s"] = peak_tok
    return out


def _rate(x: float, d: float) -> Optional[float]:
    return round(x / d, 6) if d == d and d > 0 else None


def _peaks(done: list, overhead_s: float) -> tuple[int, float]:
    """vLLM's per-second buckets of active requests and of output tokens (difference arrays: O(1)
    per request; a request's tokens after the first at a constant rate between first and last)."""
    if not done:
        return 0, 0.0
    t0 = min(r.arrival for r in done)
    last = max(r.t_end + overhead_s for r in done)
    nb = int(math.ceil(last - t0)) + 1
    active = [0] * (nb + 1)
    tokens = [0.0] * (nb + 1)
    rate_diff = [0.0] * (nb + 2)
    last_bucket = nb - 1
    for r in done:  # (min() spelt as comparisons: a million requests pass here)
        end = r.t_end + overhead_s - t0
        b = int(end) + 1
        active[int(r.arrival - t0)] += 1
        active[b if b < nb else nb] -= 1
        k = r.num_output_tokens
        if k <= 0:
            continue
        first = r.t_first + overhead_s - t0
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
        v = tokens[i] + dens
        if v > best:
            best = v
    return peak, round(best, 3)
