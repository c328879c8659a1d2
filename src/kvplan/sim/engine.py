"""The step loop: vLLM V1's ``Scheduler.schedule`` / ``update_from_output`` (0.32 / 0.33 source,
``vllm/v1/core/sched/scheduler.py``) replayed over a trace, one engine step at a time.

Per step, as ``Scheduler.schedule`` does:

1. RUNNING requests in queue order, each asking ``num_tokens - num_computed_tokens`` tokens (one
   for a decode; the rest of its prompt, capped by ``long_prefill_token_threshold`` when more than
   one request is eligible, for a chunked prefill), capped by the token budget
   (``max_num_batched_tokens``); ``KVCacheManager.allocate_slots`` must find the blocks, else the
   LAST running request is preempted (recompute: blocks freed, ``num_computed_tokens = 0``, back to
   the head of WAITING) until it fits or the request preempted itself. The loop stops when the
   budget is spent.
2. Only if nothing was preempted: WAITING requests in order while the budget lasts and fewer than
   ``max_num_seqs`` run: prefix-cache lookup (full blocks, never the last prompt token),
   ``allocate_slots(full_sequence_must_fit=True)`` (``scheduler_reserve_full_isl``, default on
   from 0.19: the whole prompt must fit, plus the watermark; before, only this step's chunk), else
   stop.
3. The step runs for the step model's time of its :class:`~kvplan.sim.stepmodel.StepFeatures`
   (``SchedulerOutput.features``); every request whose prompt is complete samples one token
   (``update_from_output``), and a request stops at ``max_tokens`` or ``max_model_len``
   (``check_stop``).

The blocks are the KV manager's (:mod:`kvplan.sim.kvmanager`: one object per accounting scheme,
chosen once); its ``counted`` scheme (one group holding every token) allows the fast paths below.
A :class:`~kvplan.sim.recorder.StepRecorder` keeps a sample of the steps for the result's
median-step breakdown.

Speed: a decode costs nothing per request per step. Decoding requests advance together with a
global counter ``G`` (a decoder's computed tokens are ``G + off``), so a step touches only the
requests that cross a block boundary this step (bucketed by ``(G + off) mod block_size``), the
ones that finish (a dict keyed by ``G``), the prefills, and the waiting queue's head. When the free
blocks cannot cover every boundary crossing, the step falls back to the exact request-by-request
order (that is when preemptions happen).
"""
from __future__ import annotations

import math
from heapq import heappop, heappush  # (names, not the module's attributes: one lookup fewer)
from collections import deque
from typing import Final, NamedTuple, Optional, Sequence

from ..errors import UsageError
from .._native import mypyc_attr
from ..limits import active as active_limits
from .engine_clients import ClientSide
from .engine_kv import DECODE, DONE, PREFILL, REJECTED, WAITING, Req
from .kvmanager import make_kv_manager
from .recorder import StepRecorder
from .stepmodel import StepFeatures

_INF: Final = math.inf
_new: Final = tuple.__new__


class SchedulerOutput(NamedTuple):
    """What one ``Scheduler.schedule`` returns, in vLLM's words where they exist:
    ``total_num_scheduled_tokens``; the decoders that got their token (``num_scheduled_decodes``)
    and those the token budget ran out before (``unscheduled_decodes``: they fall one step
    behind); whether it preempted (``preempted_req_ids`` non-empty); and the step's
    :class:`~kvplan.sim.stepmodel.StepFeatures` for the step model."""

    total_num_scheduled_tokens: int
    num_scheduled_decodes: int
    unscheduled_decodes: list
    preempted: bool
    features: StepFeatures


@mypyc_attr(allow_interpreted_subclasses=True)  # (tests subclass it to audit and to switch paths off)
class Engine(ClientSide):
    """One simulation. ``run()`` fills the per-request fields and the step aggregates."""

    def __init__(self, *, requests: Sequence, num_gpu_blocks: int, block_size: int, max_num_seqs: int,
                 max_num_batched_tokens: int, max_model_len: int, profile, groups: Sequence = (), sizing=None,
                 enable_prefix_caching: bool = True, long_prefill_token_threshold: int = 0,
                 watermark: float = 0.0, async_scheduling: bool = True, timeline_interval_s: float = 1.0,
                 max_steps: Optional[int] = None, max_concurrency: Optional[int] = None,
                 warm_prefixes: Sequence[tuple] = (), reserve_full_prompt: bool = True, front_end=None):
        self.block_size = block_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.profile = profile
        self.long_prefill_token_threshold = long_prefill_token_threshold
        #: admission needs the whole prompt's blocks (scheduler_reserve_full_isl, 0.19+), else this chunk's
        self.reserve_full_prompt = reserve_full_prompt
        self.async_sched = async_scheduling
        self.interval = timeline_interval_s
        self.max_samples = active_limits().max_timeline_samples
        self.max_steps = max_steps
        # the plan's KV groups: one manager object counts their blocks (kvmanager.py)
        self.kv = make_kv_manager(groups=groups, sizing=sizing, num_gpu_blocks=num_gpu_blocks, block_size=block_size,
                                  max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens,
                                  enable_prefix_caching=enable_prefix_caching, progress=self._num_computed)
        #: the counted fast paths (decoders on one counter, decode stretches) apply
        self.counted = self.kv.counted
        self.caching = self.kv.prefix_caching
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.pool = self.kv.pool
        self.reqs = [Req(i, r.arrival_s, r.prompt_tokens, r.output_tokens, r.prefix_id, r.prefix_tokens,
                         getattr(r, "root_id", None), getattr(r, "root_tokens", 0) // block_size)
                     for i, r in enumerate(requests)]
        self.running: list[Req] = []
        self.waiting: deque = deque()
        self.G = 0
        self.buckets: list[set] = [set() for _ in range(block_size)]
        self.finish_at: dict[int, list] = {}
        self.finish_heap: list[int] = []  # keys of finish_at, lazily cleaned
        self.n_dec = 0
        self.sum_off = 0
        self.pre: list[Req] = []  # running requests still prefilling, in running order
        self.pending: list[Req] = []  # finished, blocks released after the next schedule (async)
        self._last_sample_t = 0.0
        self._irregular: set = set()  # decoders that skipped a step (their next gap is two steps)
        # results
        self.t = 0.0
        self.steps = 0
        self.busy_s = 0.0
        self.preemptions = 0
        self.rejected = 0
        self.prompt_computed = 0
        self.recomputed = 0  # prefill tokens computed again after a preemption
        self.cached_tokens = 0
        self.itl_w: list = []  # (duration, count) per step: gaps of requests decoding back to back
        self.itl_x: list = []  # irregular gaps (after a preemption or a skipped step)
        self.first_order: list[int] = []
        self.timeline: list[dict] = []
        self.step_tokens_acc = 0
        self.step_prompt_acc = 0
        self.kv_peak = 0.0
        self.max_waiting = 0
        # times the waiting queue's head stayed waiting for want of KV blocks (allocate_slots None):
        # a run without any ran as it would with more blocks (kvplan.tune.reuse)
        self.kv_waits = 0
        # Closed loop (vllm bench's --max-concurrency): a heap of the times at which a client slot
        # is free. Request k is sent at max(its arrival, the earliest free slot), in index order
        # (bench's asyncio.Semaphore wakes waiters first in, first out); a slot frees when the
        # client has the whole response (engine end + the API server's latency) or the rejection.
        self.slots: Optional[list] = [0.0] * max_concurrency if max_concurrency else None
        self._due = [r.arrival for r in self.reqs] if max_concurrency else None
        self._ovh = float(getattr(profile, "request_overhead_s", 0.0) or 0.0)
        self.peak_in_flight = 0
        self._in_flight = 0
        # the loop's position, kept between advance() calls
        self._nxt = 0  # the next request to take in
        self._last_start = self._last_end = -1.0
        self.next_sample = self.interval
        self.rejected_reasons: dict[str, int] = {}
        # what a load balancer in front of this engine can see (kvplan.sim.fleet)
        self.completed = 0  # requests finished so far
        self.last_step_end = 0.0  # when the last step ended, and how many requests it finished
        self.last_step_completed = 0
        self.recorder = StepRecorder()
        self._record_countdown = 1
        #: the API server(s) in front (kvplan.sim.frontend), or None: requests reach the engine at
        #: their ``handoff`` (set by the front end when the client's send enters its queue)
        self.fe = front_end
        self._committed = 0  # requests handed to the front end so far
        self._handoff_seen = False  # a request reached the engine since the flag was cleared
        self._fe_synced_at = None  # the engine time the front end last ran to
        if front_end is not None:
            front_end.on_handoff = self._on_handoff
            front_end.on_first = self._on_first_delivered
            front_end.on_last = self._on_last_delivered
        #: per-sequence features the step model reads beyond the step's sums (filled only then)
        self._needs = tuple(getattr(profile, "needs", ()) or ())
        if warm_prefixes:
            self.kv.warm(warm_prefixes)

    # -- the step loop ---------------------------------------------------------------------------
    def run(self) -> "Engine":
        """Every step until the trace is served."""
        self.advance(_INF)
        if self.fe is not None:  # what the client sees: when the API server delivered the tokens
            self.fe.advance(_INF)
            for r in self.reqs:
                if r.status == DONE and r.d_end is not None:
                    r.t_first, r.t_end = r.d_first, r.d_end
        return self

    def add_request(self, request, *, index: int, arrival: Optional[float] = None) -> Req:
        """A request that reaches this engine at ``arrival`` (default its own), appended to its
        requests (a fleet routes them one by one; :mod:`kvplan.sim.fleet`). Arrivals must not go
        back in time, and none may be earlier than a horizon :meth:`advance` has already passed."""
        r = Req(index, request.arrival_s if arrival is None else arrival, request.prompt_tokens,
                request.output_tokens, request.prefix_id, request.prefix_tokens,
                getattr(request, "root_id", None), getattr(request, "root_tokens", 0) // self.block_size)
        self.reqs.append(r)
        if self.fe is not None and self._committed < len(self.reqs) - 1:  # pragma: no cover - defensive
            raise ValueError("requests are added before a front end takes them in")
        return r

    def advance(self, horizon: float) -> "Engine":
        """Run every step that starts before ``horizon``, given that every request arriving before
        it has been added: the engine then stands as it is at ``horizon`` (its last step may end
        later). ``advance(inf)`` serves everything. Pausing changes nothing: the same requests give
        the same steps however the run is cut."""
        # The loop allocates no reference cycles; with a million live requests Python's cyclic
        # collector would re-scan all of them every few thousand allocations (quadratic time).
        import gc

        was = gc.isenabled()
        gc.disable()
        try:
            self._run(horizon)
        finally:
            if was:
                gc.enable()
        if horizon == _INF and (not self.timeline or self.timeline[-1]["t"] < self.t):
            self._sample(self.t)
        return self

    def _run(self, horizon: float) -> None:
        reqs, n = self.reqs, len(self.reqs)
        max_model_len, pool = self.max_model_len, self.pool
        nxt = self._nxt
        rejected_reasons = self.rejected_reasons
        never_fits = self.kv.never_fits
        prof_time = self.profile.time
        usable = pool.usable
        slots = self.slots
        fe = self.fe
        gate_here = slots is not None and fe is None  # without a front end the client sends on take-in
        # the decode stretch's conditions that hold for the whole run (checked first per step)
        stretch_allowed = self.counted and not self._needs
        async_sched = self.async_sched
        while True:
            if self.t >= horizon:
                break  # the next step starts at or after the horizon: arrivals before it may be missing
            if fe is not None:
                # the clients' sends up to now enter the API server's queue; its loop runs to now
                # (kvplan.sim.frontend): requests it handed on become visible
                if self._fe_synced_at != self.t:  # (the step that ended now did this already)
                    self._commit_sends(self.t)
                    fe.advance(self.t)
                limit = self._committed
                self._handoff_seen = False
            else:
                limit = n
                if slots is not None:
                    self._gate(nxt)  # a request that finished may have freed a client slot
            # arrivals the scheduler can see: with async scheduling the step starting now was
            # scheduled when the previous one started (EngineCore.step_with_batch_queue)
            vis = self._last_start if (async_sched and self._last_end == self.t) else self.t
            while nxt < limit and reqs[nxt].handoff <= vis:
                r = reqs[nxt]
                nxt += 1
                if gate_here:
                    heappop(slots)  # type: ignore[arg-type]
                    self._in_flight += 1
                    if self._in_flight > self.peak_in_flight:
                        self.peak_in_flight = self._in_flight
                # input_processor._validate_prompt_len / get_max_tokens: HTTP 400
                if r.num_prompt_tokens >= max_model_len:
                    r.status = REJECTED
                    self.rejected += 1
                    rejected_reasons["prompt_too_long"] = rejected_reasons.get("prompt_too_long", 0) + 1
                    self._client_done(r.handoff)
                    if gate_here:
                        self._gate(nxt)
                    continue
                # get_max_tokens: max_tokens is clamped to max_model_len - prompt, never rejected
                r.max_tokens = max(1, min(r.max_tokens, max_model_len - r.num_prompt_tokens))
                if never_fits(min(r.num_prompt_tokens + 1, max_model_len)):
                    r.status = REJECTED
                    self.rejected += 1
                    rejected_reasons["exceeds_kv_cache"] = rejected_reasons.get("exceeds_kv_cache", 0) + 1
                    self._client_done(r.handoff)
                    if gate_here:
                        self._gate(nxt)
                    continue
                self.waiting.append(r)
                if gate_here:
                    self._gate(nxt)
            if not self.running and not self.waiting:
                if nxt >= n:
                    break  # idle: the run ends, or waits for requests added before the next advance
                self.t = max(self.t, self._next_arrival(nxt, limit))
                self._last_end = -1.0
                continue
            if self.max_steps is not None and self.steps >= self.max_steps:
                break
            if (stretch_allowed and not self.waiting and self.n_dec and not self.pre and not self.pending
                    and not self._irregular):
                # (an open loop's sends enter the front end inside the stretch, at their times)
                if self._decode_stretch(min(self._next_arrival(nxt, limit, sends=False), horizon)):
                    continue  # time moved: take in the arrivals before the next scheduled step
            t_start = self.t
            # (unpacked, here and below: a named tuple's fields read by name are attribute lookups)
            tokens, num_scheduled_decodes, unscheduled_decodes, _, features = self._schedule(t_start)
            released = False
            if async_sched and self.pending:
                running, kv_free = self.running, self.kv.free
                for r in self.pending:
                    r.pending_free = False
                    running.remove(r)
                    kv_free(r, self._num_computed(r))
                self.pending = []
                released = True
            if tokens == 0:
                if released:
                    continue
                if self.waiting and not self.running:
                    r = self.waiting.popleft()  # cannot fit even in an empty cache: vLLM would wait forever
                    r.status = REJECTED
                    self.rejected += 1
                    rejected_reasons["exceeds_kv_cache"] = rejected_reasons.get("exceeds_kv_cache", 0) + 1
                    if slots is not None:
                        self._client_done(self.t)
                        if gate_here:
                            self._gate(nxt)
                    continue
                if not self.running and nxt < n:
                    self.t = max(self.t, self._next_arrival(nxt, limit))
                    self._last_end = -1.0
                    continue
                if not self.running and not self.waiting:
                    continue
                # nothing runnable now (e.g. waiting for frees): advance to the next arrival
                if nxt < n:
                    self.t = max(self.t, self._next_arrival(nxt, limit))
                    self._last_end = -1.0
                    continue
                break  # pragma: no cover - a stuck state; the remaining requests stay unfinished
            _, num_seqs, kv_read_tokens, attn_pairs, _, _, _ = features
            dt = prof_time(tokens, num_seqs, kv_read_tokens, attn_pairs, features)
            t_end = t_start + dt
            countdown = self._record_countdown - 1
            if countdown:
                self._record_countdown = countdown
            else:  # every stride-th step is sampled for the median step's breakdown (recorder.py)
                self._record_countdown = self.recorder.add(dt, *features, 1)
            self.steps += 1
            self.busy_s += dt
            self._finish_step(t_start, t_end, num_scheduled_decodes, unscheduled_decodes)
            self._last_start, self._last_end = t_start, t_end
            self.t = t_end
            self.step_tokens_acc += tokens
            u = 1.0 - pool.free / usable if usable else 0.0  # BlockPool.usage, inline
            if u > self.kv_peak:
                self.kv_peak = u
            if len(self.waiting) > self.max_waiting:
                self.max_waiting = len(self.waiting)
            while t_end >= self.next_sample:
                self._sample(self.next_sample)
                self.next_sample += self.interval
        self._nxt = nxt

    def _sample(self, t: float) -> None:
        if len(self.timeline) >= self.max_samples:
            raise UsageError(f"--timeline-interval {self.interval:g}s: more than {self.max_samples:,} timeline samples "
                             f"(the run had reached {t:.6g} s), {active_limits().who}'s cap of timeline samples per "
                             "run: give a larger --timeline-interval")
        span = t - self._last_sample_t
        self._last_sample_t = t
        self.timeline.append({"t": round(t, 6), "running": len(self.running) - len(self.pending),
                              "waiting": len(self.waiting), "kv_usage": round(self.pool.usage, 6),
                              "tokens_per_s": round(self.step_tokens_acc / span, 3) if span > 0 else 0.0,
                              "preemptions": self.preemptions})
        self.step_tokens_acc = 0

    def _schedule(self, now: float) -> SchedulerOutput:
        """One ``Scheduler.schedule``: the step's shape and who got scheduled."""
        block_size, pool, running, G = self.block_size, self.pool, self.running, self.G
        token_budget = self.max_num_batched_tokens
        threshold = self.long_prefill_token_threshold if (len(running) + len(self.waiting)) > 1 else 0
        stalled: list[Req] = []
        preempted = False
        fast = False
        if self.counted:
            # plan the token budget: decoders take one token each, prefills what is left at their turn
            bucket = self.buckets[(-G) % block_size]
            need = len(bucket)
            ok = True
            pre = self.pre
            if pre:
                pend = self.pending
                used = 0
                # where a prefill stands in RUNNING: usually among its last len(pre) entries (admitted
                # last), checked there before list.index scans the whole queue (O(running) per step)
                tail = len(running) - len(pre)
                for before_pre, p in enumerate(pre):  # pre is in running order (both append at admission)
                    idx = tail + before_pre
                    if idx < 0 or running[idx] is not p:
                        idx = running.index(p)
                    before_pend = sum(1 for q in pend if running.index(q) < idx) if pend else 0
                    left = token_budget - (idx - before_pre - before_pend) - used
                    num_new_tokens = p.num_prompt_tokens + p.num_output_tokens - p.num_computed_tokens
                    if 0 < threshold < num_new_tokens:
                        num_new_tokens = threshold
                    num_new_tokens = min(num_new_tokens, left, self.max_model_len - p.num_computed_tokens - 1)
                    if num_new_tokens <= 0 or num_new_tokens == left and idx < len(running) - 1:
                        ok = False  # the token budget runs out inside the queue: exact order needed
                        break
                    p.num_scheduled_tokens = num_new_tokens
                    used += num_new_tokens
                    need += (-(-(p.num_computed_tokens + num_new_tokens) // block_size)
                             - (-(-p.num_computed_tokens // block_size)))
            if ok and need <= pool.free:
                fast = True
                if need:
                    pool.take(need)
                token_budget -= self.n_dec
                if pre:
                    token_budget -= sum(p.num_scheduled_tokens for p in pre)
        if not fast:
            token_budget, preempted, stalled = self._schedule_exact(now, token_budget, threshold)
        if not preempted and self.waiting and len(running) < self.max_num_seqs:
            token_budget = self._schedule_waiting(now, token_budget, threshold)
        # the step's shape
        n_dec = self.n_dec
        kv_read = n_dec * (G + 1) + self.sum_off
        for r in stalled:
            kv_read -= G + r.off + 1  # counted above with their lowered off; they did not run
        n_sched_dec = n_dec - len(stalled)
        tokens = n_sched_dec
        seqs = n_sched_dec
        pairs = 0.0
        prefill_tokens = prefill_seqs = 0
        for p in self.pre:
            num_new_tokens = p.num_scheduled_tokens
            if num_new_tokens > 0:
                tokens += num_new_tokens
                seqs += 1
                prefill_tokens += num_new_tokens
                prefill_seqs += 1
                kv_read += p.num_computed_tokens + num_new_tokens
                pairs += num_new_tokens * p.num_computed_tokens + num_new_tokens * num_new_tokens / 2.0
        longest = self._max_context(stalled) if self._needs else 0
        # tuple.__new__: the named tuples without their Python-level __new__ (once per step)
        features = _new(StepFeatures, (tokens, seqs, kv_read, pairs, prefill_tokens, prefill_seqs, longest))
        return _new(SchedulerOutput, (tokens, n_sched_dec, stalled, preempted, features))

    def _max_context(self, stalled: list) -> int:
        """The longest context this step computes over (only when the step model asks: O(running))."""
        longest = 0
        G = self.G
        for r in self.running:
            if r.status == DECODE and r not in stalled:
                ctx = G + r.off + 1
            elif r.status == PREFILL and r.num_scheduled_tokens > 0:
                ctx = r.num_computed_tokens + r.num_scheduled_tokens
            else:
                continue
            if ctx > longest:
                longest = ctx
        return longest

    def _schedule_exact(self, now: float, token_budget: int, threshold: int):
        """The running loop of ``Scheduler.schedule`` request by request (preemption possible)."""
        pool, running, G = self.pool, self.running, self.G
        blocks_to_allocate, allocated = self.kv.blocks_to_allocate, self.kv.allocated
        preempted = False
        for p in self.pre:
            p.num_scheduled_tokens = 0
        i = 0
        while i < len(running) and token_budget > 0:
            r = running[i]
            if r.pending_free:
                i += 1
                continue
            if r.status == DECODE:
                num_computed_tokens = G + r.off
                num_new_tokens = 1
            else:
                num_computed_tokens = r.num_computed_tokens
                num_new_tokens = r.num_prompt_tokens + r.num_output_tokens - num_computed_tokens
                if 0 < threshold < num_new_tokens:
                    num_new_tokens = threshold
                num_new_tokens = min(num_new_tokens, token_budget, self.max_model_len - num_computed_tokens - 1)
                if num_new_tokens <= 0:
                    i += 1
                    continue
            need = blocks_to_allocate(r, num_computed_tokens, num_new_tokens)
            while need > pool.free:
                victim = running.pop()
                self._preempt(victim, now)
                preempted = True
                if victim is r:
                    break
            if r.status == WAITING or r.status == DONE:
                break  # it preempted itself: nothing after it
            if need >= 0:
                pool.take(need)
            else:  # a sliding window moved past whole blocks (remove_skipped_blocks)
                pool.release_anonymous(-need)
            allocated(r, need)
            if r.status == PREFILL:
                r.num_scheduled_tokens = num_new_tokens
            token_budget -= num_new_tokens
            i += 1
        stalled = []
        if i < len(running):
            for r in running[i:]:
                if r.status == DECODE:
                    stalled.append(r)
            for r in stalled:
                self._stall(r, now)
        return token_budget, preempted, stalled

    def _schedule_waiting(self, now: float, token_budget: int, threshold: int) -> int:
        """The WAITING loop of ``Scheduler.schedule``: admit while the token budget and KV allow."""
        running, waiting = self.running, self.waiting
        if not waiting or len(running) >= self.max_num_seqs:
            return token_budget  # (the loop below would stop at once: the common case at saturation)
        block_size, pool = self.block_size, self.pool
        max_model_len, kv, reserve_full = self.max_model_len, self.kv, self.reserve_full_prompt
        while token_budget > 0 and waiting:
            if len(running) >= self.max_num_seqs:
                break
            r = waiting[0]
            num_tokens = r.num_prompt_tokens + r.num_output_tokens
            hits = kv.lookup(r, num_tokens)
            hr, hs, hp, ev = hits
            hit_b = hr + hs + hp
            hit = hit_b * block_size
            num_new_tokens = num_tokens - hit
            if 0 < threshold < num_new_tokens:
                num_new_tokens = threshold
            if num_new_tokens > token_budget:
                num_new_tokens = token_budget
            wm = self.watermark_blocks if running else 0
            full_need, need = kv.admission(num_tokens, max_model_len, hit_b, ev, num_new_tokens)
            if (reserve_full and full_need + wm > pool.free) or need + ev + wm > pool.free:
                self.kv_waits += 1
                break  # allocate_slots returns None: the full prompt (0.19+), then this chunk, must fit
            waiting.popleft()
            running.append(r)
            kv.admit(r, hits, need)
            pool.take(need)
            r.num_computed_tokens = hit
            r.hit_tokens += hit
            self.cached_tokens += hit
            r.num_scheduled_tokens = num_new_tokens
            r.status = PREFILL
            self.pre.append(r)
            if r.t_sched is None:
                r.t_sched = now
            token_budget -= num_new_tokens
        return token_budget

    def _finish_step(self, t_start: float, t_end: float, n_sched_dec: int, stalled: list) -> None:
        """``update_from_output``: one token per request whose prompt is complete."""
        G = self.G
        # decoders that come back from a skipped step have an irregular gap
        irr = 0
        # the decoders that sample their last token now (the popped list is this step's alone: a
        # decoder added later with the same key gets a new one)
        done: list[Req] = self.finish_at.pop(G, [])
        # the heap's keys up to this step are spent: drop them as _next_finish does (a saturated run
        # never reaches it - no decode stretch - and its heap would grow with the trace: 87,000
        # keys after 100,000 requests, each push and pop paying the log of that)
        finish_heap, finish_at = self.finish_heap, self.finish_at
        while finish_heap and finish_heap[0] <= G and not finish_at.get(finish_heap[0]):
            finish_at.pop(heappop(finish_heap), None)
        self.G = G + 1
        # ITL: every decoder that decoded in the previous step too gets a gap of one step
        if self._irregular:
            for r in list(self._irregular):
                if r.status == DECODE and r not in stalled:
                    self.itl_x.append(t_end - r.t_last)
                    r.irregular = False
                    self._irregular.discard(r)
                    irr += 1
        if n_sched_dec - irr > 0:
            self.itl_w.append((t_end - t_start, n_sched_dec - irr))
        for r in stalled:
            self._irregular.add(r)
        firsts: Sequence[Req] = ()
        sampled = 0
        if self.pre:
            still: list[Req] = []
            firsts = []
            max_model_len = self.max_model_len
            for p in self.pre:
                num_new_tokens = p.num_scheduled_tokens
                if num_new_tokens <= 0:
                    still.append(p)
                    continue
                p.num_scheduled_tokens = 0
                p.num_computed_tokens += num_new_tokens
                self.prompt_computed += num_new_tokens
                if p.preempted:
                    self.recomputed += num_new_tokens
                if p.num_computed_tokens >= p.num_prompt_tokens + p.num_output_tokens:
                    p.num_output_tokens += 1
                    sampled += 1
                    if p.t_first is None:
                        p.t_first = t_end
                        self.first_order.append(p.i)
                        firsts.append(p)
                    elif p.t_last is not None:
                        self.itl_x.append(t_end - p.t_last)
                    p.irregular = False
                    p.t_last = None
                    if (p.num_output_tokens >= p.max_tokens
                            or p.num_prompt_tokens + p.num_output_tokens >= max_model_len):
                        p.status = DONE
                        done.append(p)
                    else:
                        self._add_decoder(p, p.num_computed_tokens)
                else:
                    still.append(p)
            self.pre = still
        num_done = len(done)
        self.completed += num_done
        self.last_step_end = t_end
        self.last_step_completed = num_done
        slots = self.slots
        fe = self.fe
        if fe is not None:  # the step's tokens go out through the API server (frontend.py)
            c = self._committed
            reqs = self.reqs
            if c < len(reqs) and (slots is not None or reqs[c].arrival <= t_end):
                self._commit_sends(t_end)
            if fe.waiting:
                fe.advance(t_end)
            streams = n_sched_dec + sampled
            if fe.count == 1 and not fe.waiting and not firsts and not num_done:
                # FrontEnd.outputs' common case inline (one API server, nothing queued, no stream
                # starts or ends): the batch's place
                s = fe.servers[0]
                if s.tail_start <= t_end:
                    start = t_end if t_end > s.busy else s.busy
                    s.tail_start = start
                    s.tail_end = s.busy = start + fe.chunk_s * streams
            else:
                fe.outputs(t_end, streams, firsts, done)
            self._fe_synced_at = t_end
        if not num_done:
            return
        G = self.G
        async_sched = self.async_sched
        for r in done:
            if r.status == DECODE:
                r.num_computed_tokens = G + r.off  # tokens computed (the last sampled token has no KV yet)
                r.num_output_tokens = r.num_computed_tokens + 1 - r.num_prompt_tokens
                self._drop_decoder(r)
                r.status = DONE
            r.t_end = t_end
            if slots is not None and fe is None:
                heappush(slots, t_end + self._ovh)
                self._in_flight -= 1
            if async_sched:
                r.pending_free = True
                self.pending.append(r)
            else:
                self.running.remove(r)
                self.kv.free(r, self._num_computed(r))
