"""Slow responses, read from vLLM's periodic stats lines: requests queueing, the KV cache full.

vLLM prints one line every 10 s (``LoggingStatLogger``: V0 ``engine/metrics.py``, V1
``v1/metrics/loggers.py``, read in 0.6.4-0.8.5): prompt and generation tokens/s, the running and
waiting (V0: pending) request counts and the KV-cache usage. Two patterns explain most slow
servers, and both are in those lines:

* **queueing**: ``Waiting`` stays above zero and grows. Requests wait before their first token,
  so TTFT grows with the queue. When the queue grows for the whole window, requests arrive
  faster than the server completes them: the growth rate (requests/s) is the missing capacity.
* **saturation**: the KV cache is full (≥ 95 %) while requests wait. The scheduler admits a
  request only when its blocks fit (V1 ``Scheduler.schedule`` → ``allocate_slots``), so the
  KV cache, not the GPU's compute, caps how many run at once.

A server completes requests as fast as it admits them once it runs full, so its completion rate
is its prompt throughput divided by the mean prompt length (from ``--requests``); arrivals are
that plus the queue's growth, and the replicas needed follow (``capacity_fix``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from . import planned_fixes as pf
from .model import Fix
from .planned import BASIS_RULE, LogPlanner, log_basis

#: waiting > 0 on this many consecutive stats lines (≥ 20 s at vLLM's 10-s interval) is a queue,
#: not a burst the next step absorbs
QUEUED_LINES = 3
#: KV-cache usage (%) at which the scheduler cannot admit a typical request any more: vLLM frees
#: blocks only as requests finish, so above this the waiting requests wait for blocks
KV_FULL_PCT = 95.0
#: running at this share of max_num_seqs (with KV to spare) means the sequence limit caps admission
SEQS_CAP_SHARE = 0.95


@dataclass(frozen=True)
class StatsLine:
    """One periodic stats line: what the scheduler held at that moment."""

    index: int  # 0-based line number in the file
    time: Optional[float]  # seconds (vLLM's year-less stamp), None when the line has no stamp
    running: int
    waiting: Optional[int]
    kv_pct: Optional[float]
    prompt_tps: Optional[float]
    generation_tps: Optional[float]


@dataclass(frozen=True)
class Queue:
    """The longest stretch of stats lines with requests waiting."""

    lines: tuple[StatsLine, ...]

    @property
    def first(self) -> StatsLine:
        return self.lines[0]

    @property
    def last(self) -> StatsLine:
        return self.lines[-1]

    @property
    def seconds(self) -> Optional[float]:
        if self.first.time is None or self.last.time is None or self.last.time <= self.first.time:
            return None
        return self.last.time - self.first.time

    @property
    def growth_per_s(self) -> Optional[float]:
        """Waiting requests added per second over the stretch (arrivals minus completions)."""
        s = self.seconds
        if s is None or self.first.waiting is None or self.last.waiting is None:
            return None
        return (self.last.waiting - self.first.waiting) / s

    @property
    def peak_waiting(self) -> int:
        return max(ln.waiting or 0 for ln in self.lines)

    @property
    def peak_running(self) -> int:
        return max(ln.running for ln in self.lines)

    @property
    def peak_kv_pct(self) -> Optional[float]:
        kv = [ln.kv_pct for ln in self.lines if ln.kv_pct is not None]
        return max(kv) if kv else None

    def mean(self, field: str) -> Optional[float]:
        values = [getattr(ln, field) for ln in self.lines if getattr(ln, field) is not None]
        return sum(values) / len(values) if values else None

    @property
    def full_lines(self) -> tuple[StatsLine, ...]:
        return tuple(ln for ln in self.lines if ln.kv_pct is not None and ln.kv_pct >= KV_FULL_PCT)


def longest_queue(stats: list[StatsLine]) -> Optional[Queue]:
    """The longest run of consecutive stats lines with waiting > 0, if it is at least
    :data:`QUEUED_LINES` long."""
    best: list[StatsLine] = []
    current: list[StatsLine] = []
    for ln in stats:
        if ln.waiting:
            current.append(ln)
            if len(current) > len(best):
                best = list(current)
        else:
            current = []
    return Queue(tuple(best)) if len(best) >= QUEUED_LINES else None


#: (mean prompt tokens, mean output tokens) of the user's requests (doctor --requests), or None
Lengths = Optional[tuple[float, float]]


def completion_rate(queue: Queue, lengths: Lengths) -> Optional[float]:
    """Requests/s the server completes while it runs full: each admitted request's prompt is
    prefilled once, so admissions = prompt tokens/s ÷ mean prompt tokens, and a full server
    completes as many as it admits."""
    prompt_tps = queue.mean("prompt_tps")
    if not lengths or not prompt_tps or lengths[0] <= 0:
        return None
    return prompt_tps / lengths[0]


def capacity_fix(queue: Queue, lengths: Lengths, replicas: int) -> Fix:
    """More replicas, as many as the observed arrival rate needs."""
    growth = queue.growth_per_s
    done = completion_rate(queue, lengths)
    prompt_tps = queue.mean("prompt_tps")
    if growth is not None and growth > 0 and done:
        arrivals = done + growth
        needed = max(replicas + 1, math.ceil(replicas * arrivals / done))
        return Fix(f"{needed} replicas instead of {replicas} (--data-parallel-size {needed}, or {needed} servers behind "
                   "a load balancer)",
                   f"arrivals ≈ {arrivals:.1f} req/s: this server completes ≈ {done:.1f} req/s (prompt throughput "
                   f"{prompt_tps:,.0f} tokens/s ÷ {lengths[0]:,.0f} mean prompt tokens) and its queue grew "
                   f"{growth:.1f} req/s; {needed} replicas complete ≈ {needed * done / replicas:.1f} req/s",
                   "hardware", (("replicas", needed), ("arrivals_per_s", round(arrivals, 2)),
                                ("completions_per_s", round(done, 2))),
                   "log arithmetic (stats lines and --requests' mean prompt length)")
    if growth is not None and growth > 0:
        return Fix(f"at least {replicas + 1} replicas (--data-parallel-size, or servers behind a load balancer)",
                   f"the queue grew {growth:.1f} req/s for {queue.seconds:.0f} s: arrivals exceed what this server "
                   f"completes. Replicas needed = arrivals ÷ completions per replica; completions/s = prompt "
                   f"throughput ({prompt_tps:,.0f} tokens/s) ÷ mean prompt tokens (pass --requests for the count)"
                   if prompt_tps else f"the queue grew {growth:.1f} req/s: arrivals exceed what this server completes",
                   "hardware", (("replicas", replicas + 1), ("queue_growth_per_s", round(growth, 2))),
                   log_basis("stats lines; pass --requests for a replica count"))
    return Fix("more replicas (--data-parallel-size, or servers behind a load balancer)",
               f"requests waited on {len(queue.lines)} consecutive stats lines (peak {queue.peak_waiting:,}) without "
               "a steady growth: bursts above what one server completes", "hardware", (), BASIS_RULE)


def seqs_fix(queue: Queue, max_num_seqs: Optional[int]) -> Optional[Fix]:
    """The sequence limit, not the KV cache, caps admission: raise it."""
    kv = queue.peak_kv_pct
    if not max_num_seqs or queue.peak_running < SEQS_CAP_SHARE * max_num_seqs or (kv is not None and kv >= 90):
        return None
    more = max_num_seqs * 2
    return Fix(f"--max-num-seqs {more}", f"{queue.peak_running} requests ran at once, the limit {max_num_seqs}, while "
               f"the KV cache was at most {kv:.1f} % full: the limit, not memory, kept the {queue.peak_waiting:,} "
               "waiting (each step gets larger: inter-token latency rises a little)", "free",
               (("max_num_seqs", more),), "vLLM rule (scheduler: running ≤ max_num_seqs)")


def lengths_fix(queue: Queue, kv_tokens: Optional[int], lengths: Lengths, p99: Optional[int]) -> Fix:
    """Shorter requests hold fewer blocks, so more of them fit in the same cache."""
    running = queue.mean("running") or queue.peak_running
    kv = queue.mean("kv_pct")
    held = kv_tokens * kv / 100 / running if kv_tokens and kv and running else None
    effect = (f"each running request held ≈ {held:,.0f} KV tokens ({kv_tokens:,} tokens × {kv:.0f} % ÷ "
              f"{running:,.0f} running); a request holds its prompt and every token generated so far, so capping "
              "max_tokens (in the clients, or --max-model-len) shortens the longest holders" if held else
              "a request holds its prompt and every token generated so far; capping max_tokens (in the clients, or "
              "--max-model-len) lets more run in the same KV cache")
    if lengths:
        effect += f"; your requests average {lengths[0]:,.0f} prompt + {lengths[1]:,.0f} output tokens"
    if p99:
        effect += f" (P99 of prompt + max_tokens {p99:,})"
    return Fix("lower max_tokens (or --max-model-len) to what the requests need", effect, "capacity",
               (("kv_tokens_per_running_request", round(held)),) if held else (), BASIS_RULE,
               "requests asking for more are cut or refused")


def kv_fixes(planner: Optional[LogPlanner], why: str, args: dict[str, Any], util: Optional[float]) -> list[Fix]:
    """More KV cache per replica: the planner's fp8 and utilisation fixes, or vLLM's rule
    without one."""
    if planner is not None:
        return pf.more_kv(planner, args, util)
    fixes = []
    if "fp8" not in str(args.get("kv_cache_dtype", "auto")):
        fixes.append(Fix("--kv-cache-dtype fp8", "8-bit KV entries: twice the tokens in the same memory, so about twice "
                         "the requests run at once", "accuracy", (), log_basis(why)))
    if util is None or util < pf.UTIL_TARGET:
        fixes.append(Fix(f"--gpu-memory-utilization {pf.UTIL_TARGET}", "more KV memory (if the GPU has it)", "free", (),
                         BASIS_RULE))
    return fixes
