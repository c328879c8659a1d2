"""What ``kvplan lengths`` keeps while it reads: exact histograms and small per-session state.

Nothing here grows with the number of records, only with the number of distinct token counts,
open sessions (capped: the least recently seen is closed first), seconds of log (arrival
counts) and the ``history_sample`` longest multi-turn requests kept for trimming.

Each request contributes, besides its prompt (p) and output (o) counts:

* budgeted (``max_tokens`` given, or ``--max-tokens``): total = p + b, reject key a = max(p + 1, b)
  (vLLM refuses a prompt that leaves no room for one output token, or a budget above the
  context), observed c = p + o;
* open (no budget, output known): vLLM gives it max_model_len − p, so what it needs is p + o:
  total = c = p + o, a = p + 1;
* deferred (neither): only p is kept; the recommended max_tokens is added at the end.

With those, every row of the coverage table is an exact count (see :func:`coverage_row`).
"""
from __future__ import annotations

import heapq
import math
from collections import Counter, OrderedDict
from typing import Optional

from .shapes import Request
from .stats import Dist, Hist

CONCURRENCY_RESOLUTION = 10  # buckets per second for the in-flight sweep
MAX_SECONDS = 2_000_000  # arrival buckets kept (23 days of per-second counts)
TURN_CAP = 50  # turns above this share one "≥ 50" row


class Accumulator:
    def __init__(self, history_sample: int = 2000, max_open_sessions: int = 200_000):
        self.prompt, self.output, self.budget = Hist(), Hist(), Hist()
        self.total, self.reject, self.observed, self.min_ac, self.final = Hist(), Hist(), Hist(), Hist(), Hist()
        self.deferred = Hist()
        self.turns: dict[int, Hist] = {}
        self.sessions: "OrderedDict[str, list]" = OrderedDict()  # id → [turns, max total, max deferred p]
        self.max_open_sessions = max_open_sessions
        self.conv_turns, self.conv_known, self.conv_deferred = Hist(), [], []
        self.evicted = 0
        self.finish: Counter = Counter()
        self.counted_by: Counter = Counter()
        self.output_counted_by: Counter = Counter()
        self.shapes: Counter = Counter()
        self.per_second: dict[int, int] = {}
        self.arrival_overflow = False
        self.in_flight: dict[int, int] = {}
        self.timed = 0
        self.with_duration = 0
        self.history_sample = history_sample
        self.history: list = []  # min-heap of (total, seq, request, budget)
        self._seq = 0
        self.server_prompt_max = (0, 0)  # (largest vLLM-logged prompt, how many had it)
        self.server_prompts = 0

    def add(self, r: Request, p: int, p_src: str, o: Optional[int], o_src: str,
            budget_override: Optional[int]) -> None:
        self.counted_by[p_src] += 1
        self.output_counted_by[o_src] += 1
        self.shapes[r.shape] += 1
        self.prompt.add(p)
        b = budget_override if budget_override is not None else r.max_tokens
        if o is not None:
            self.output.add(o)
        if b is not None:
            self.budget.add(b)
            total, a = p + b, max(p + 1, b)
        elif o is not None:
            total, a = p + max(o, 1), p + 1
        else:
            total, a = None, None
            self.deferred.add(p)
        if total is not None:
            self.total.add(total)
            self.reject.add(a)
            self.final.add(p + o if o is not None else total)
        if o is not None and a is not None:
            self.observed.add(p + o)
            self.min_ac.add(min(a, p + o))
        if r.finish_reason:
            self.finish[r.finish_reason] += 1
        turn = r.turn
        if r.session is not None:
            state = self.sessions.get(r.session)
            if state is None:
                state = self.sessions[r.session] = [0, 0, -1]
                if len(self.sessions) > self.max_open_sessions:
                    self._close(self.sessions.popitem(last=False)[1])
                    self.evicted += 1
            else:
                self.sessions.move_to_end(r.session)
            state[0] = max(state[0] + 1, turn or 0) if r.shape != "sharegpt" else max(state[0], turn or 1)
            if total is not None:
                state[1] = max(state[1], total)
            else:
                state[2] = max(state[2], p)
            if turn is None:
                turn = state[0]
        if turn is not None:
            self.turns.setdefault(min(turn, TURN_CAP), Hist()).add(p)
        if r.timestamp is not None:
            self._arrival(r.timestamp, r.duration)
        if r.shape == "vllm-log" and p_src == "usage":
            self.server_prompts += 1
            top, n = self.server_prompt_max
            self.server_prompt_max = (p, 1) if p > top else (top, n + 1) if p == top else (top, n)
        if r.messages is not None and self.history_sample > 0 and sum(1 for m in r.messages if m.get("role") == "user") > 1:
            key = total if total is not None else p
            self._seq += 1
            item = (key, self._seq, r, b if b is not None else o)
            if len(self.history) < self.history_sample:
                heapq.heappush(self.history, item)
            elif key > self.history[0][0]:
                heapq.heapreplace(self.history, item)

    def _arrival(self, ts: float, duration: Optional[float]) -> None:
        self.timed += 1
        if not self.arrival_overflow:
            sec = int(math.floor(ts))
            self.per_second[sec] = self.per_second.get(sec, 0) + 1
            if len(self.per_second) > MAX_SECONDS:
                self.arrival_overflow = True
                self.per_second.clear()
        if duration is not None:
            self.with_duration += 1
            start = int(math.floor(ts * CONCURRENCY_RESOLUTION))
            end = max(start + 1, int(math.ceil((ts + duration) * CONCURRENCY_RESOLUTION)))
            self.in_flight[start] = self.in_flight.get(start, 0) + 1
            self.in_flight[end] = self.in_flight.get(end, 0) - 1

    def _close(self, state: list) -> None:
        self.conv_turns.add(state[0])
        self.conv_known.append(state[1])
        self.conv_deferred.append(state[2])

    def close_sessions(self) -> None:
        for state in self.sessions.values():
            self._close(state)
        self.sessions.clear()

    def apply_deferred(self, budget: int) -> None:
        """Give the deferred requests (no budget, no output) the recommended budget."""
        for p, n in self.deferred.counts.items():
            self.total.add(p + budget, n)
            self.reject.add(max(p + 1, budget), n)
            self.final.add(p + budget, n)
        self.deferred = Hist()


def coverage_counts(total: Dist, reject: Dist, observed: Dist, min_ac: Dist, length: int) -> tuple[int, int, int]:
    """(rejected, clamped, truncated) at one max_model_len, exactly:

    rejected = #(a > L); clamped = #(p + b > L) − rejected (every rejected request also has
    p + b > L); truncated = #(a ≤ L < p + o) = #(p + o > L) − #(min(a, p + o) > L).
    """
    rejected = reject.count_gt(length)
    clamped = total.count_gt(length) - rejected
    truncated = observed.count_gt(length) - min_ac.count_gt(length)
    return rejected, clamped, truncated


def concurrency_stats(in_flight: dict[int, int]) -> tuple[int, int, float]:
    """(peak, P99, mean) of requests in flight, from the +1/−1 sweep at 1/10 s resolution."""
    if not in_flight:
        return 0, 0, 0.0
    keys = sorted(in_flight)
    level, levels = 0, Hist()
    busy = 0
    for k, nxt in zip(keys, keys[1:] + [keys[-1]]):
        level += in_flight[k]
        if nxt > k:
            levels.add(level, nxt - k)
            busy += level * (nxt - k)
    dist = levels.freeze()
    span = keys[-1] - keys[0]
    return dist.max, dist.quantile(99), busy / span if span else 0.0
