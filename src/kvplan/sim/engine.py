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
   ``allocate_slots(full_sequence_must_fit=True)`` (``scheduler_reserve_full_isl``, default on:
   the whole prompt must fit, plus the watermark), else stop.
3. The step runs for ``StepTimeProfile.time(tokens, seqs, kv_read, attn_pairs)`` seconds; every
   request whose prompt is complete samples one token (``update_from_output``), and a request
   stops at ``max_tokens`` or ``max_model_len`` (``check_stop``).

Speed: a decode costs nothing per request per step. Decoding requests advance together with a
global counter ``G`` (a decoder's computed tokens are ``G + off``), so a step touches only the
requests that cross a block boundary this step (bucketed by ``(G + off) mod block_size``), the
ones that finish (a dict keyed by ``G``), the prefills, and the waiting queue's head. When the free
blocks cannot cover every boundary crossing, the step falls back to the exact request-by-request
order (that is when preemptions happen).
"""
from __future__ import annotations

import math
import heapq
from collections import deque
from typing import Optional, Sequence

from .kvpool import BlockPool, Chain

WAITING, PREFILL, DECODE, DONE, REJECTED = 0, 1, 2, 3, 4
_INF = math.inf


class Req:
    __slots__ = ("i", "arrival", "P", "O", "pid", "ptok", "status", "nc", "off", "out", "chunk",
                 "sh", "sh_h", "ext", "pv", "pv_base", "t_sched", "t_first", "t_last", "t_end",
                 "preempted", "irregular", "pending_free", "held", "hit_tokens")

    def __init__(self, i: int, arrival: float, P: int, O: int, pid, ptok: int):
        self.i = i
        self.arrival = arrival
        self.P = P
        self.O = O
        self.pid = pid
        self.ptok = ptok
        self.status = WAITING
        self.nc = 0  # computed tokens (prefill / waiting); decoders use G + off
        self.off = 0
        self.out = 0  # output tokens generated so far (materialised for non-decoders)
        self.chunk = 0  # tokens scheduled this step
        self.sh: Optional[Chain] = None  # shared chain and the blocks held in it
        self.sh_h = 0
        self.ext: Optional[Chain] = None  # the chain this request's new blocks extend
        self.pv: Optional[Chain] = None  # private chain (self-hits after a preemption)
        self.pv_base = 0
        self.t_sched = None
        self.t_first = None
        self.t_last = None  # last token time when it is not the previous step's end
        self.t_end = None
        self.preempted = 0
        self.irregular = False
        self.pending_free = False
        self.held = 0  # blocks held (hybrid accounting only)
        self.hit_tokens = 0


class Engine:
    """One simulation. ``run()`` fills the per-request fields and the step aggregates."""

    def __init__(self, *, requests: Sequence, num_gpu_blocks: int, block_size: int, max_num_seqs: int,
                 max_num_batched_tokens: int, max_model_len: int, profile, groups: Sequence[tuple] = (("full", 0, 0),),
                 enable_prefix_caching: bool = True, long_prefill_token_threshold: int = 0,
                 watermark: float = 0.0, async_scheduling: bool = True, timeline_interval_s: float = 1.0,
                 max_steps: Optional[int] = None):
        self.bs = block_size
        self.mns = max_num_seqs
        self.mnbt = max_num_batched_tokens
        self.mml = max_model_len
        self.profile = profile
        self.thr = long_prefill_token_threshold
        self.async_sched = async_scheduling
        self.interval = timeline_interval_s
        self.max_steps = max_steps
        # KV groups: (kind, window, fixed_blocks). One full-attention group is the fast path.
        self.groups = tuple(groups)
        kinds = {g[0] for g in self.groups}
        self.simple = len(self.groups) == 1 and kinds <= {"full", "mla"}
        self.n_full = sum(1 for g in self.groups if g[0] in ("full", "mla"))
        self.caching = enable_prefix_caching and self.simple
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.pool = BlockPool(num_gpu_blocks, block_size, self._ext_blocks)
        self.reqs = [Req(i, r.arrival_s, r.prompt_tokens, r.output_tokens, r.prefix_id, r.prefix_tokens)
                     for i, r in enumerate(requests)]
        self.chains: dict = {}
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
        self.cached_tokens = 0
        self.itl_w: list = []  # (duration, count) per step: gaps of requests decoding back to back
        self.itl_x: list = []  # irregular gaps (after a preemption or a skipped step)
        self.first_order: list[int] = []
        self.timeline: list[dict] = []
        self.step_tokens_acc = 0
        self.step_prompt_acc = 0
        self.next_sample = 0.0
        self.kv_peak = 0.0
        self.max_waiting = 0

    # -- lazy views ---------------------------------------------------------------------------
    def _nc(self, r: Req) -> int:
        return self.G + r.off if r.status == DECODE else r.nc

    def _ext_blocks(self, r: Req) -> int:
        """Blocks of the chain ``r`` extends that it holds so far (full blocks of computed tokens)."""
        nc = self.G + r.off if r.status == DECODE else r.nc
        full = nc // self.bs
        return full if r.ext is r.sh else full - r.pv_base

    # -- KV accounting --------------------------------------------------------------------------
    def _blocks(self, slots: int, processed: int) -> int:
        """Blocks a request holds with ``slots`` token slots, ``processed`` tokens computed
        (``SingleTypeKVCacheManager.get_num_blocks_to_allocate`` / ``remove_skipped_blocks``)."""
        bs = self.bs
        n = 0
        for kind, window, fixed in self.groups:
            if kind in ("full", "mla"):
                n += -(-slots // bs)
            elif kind == "sliding":
                skipped = max(0, processed - window + 1) // bs
                n += -(-slots // bs) - min(skipped, -(-slots // bs))
            elif kind == "chunked":
                skipped = (processed // window) * window // bs if window else 0
                n += -(-slots // bs) - min(skipped, -(-slots // bs))
            else:  # mamba / unknown: a fixed state per request
                n += fixed
        return n

    def _admission_blocks(self, tokens: int) -> int:
        """``get_num_blocks_to_allocate(apply_admission_cap=True)`` for the whole prompt."""
        bs = self.bs
        n = 0
        for kind, window, fixed in self.groups:
            need = -(-tokens // bs)
            if kind in ("sliding", "chunked") and fixed:
                need = min(need, fixed)
            elif kind not in ("full", "mla", "sliding", "chunked"):
                need = fixed
            n += need
        return n

    # -- requests in and out ----------------------------------------------------------------------
    def _release(self, r: Req, preempted: bool = False) -> None:
        """``KVCacheManager.free``: every block back to the free queue, tail first. A preempted
        request's own full blocks stay findable (its private chain: it hits them when it resumes);
        a finished request's are anonymous (nobody else has their tokens)."""
        pool = self.pool
        nc = self._nc(r)
        if not self.simple:
            pool.release_anonymous(r.held)
            r.held = 0
            return
        total = -(-nc // self.bs)
        full = nc // self.bs
        pv = r.pv if r.ext is not None and r.ext is r.pv else None
        if r.ext is not None and r.ext is r.sh:
            sh_h = min(full, total)
            pv_h = 0
        else:
            sh_h = r.sh_h
            pv_h = max(0, full - r.pv_base) if self.caching else 0
            if pv is None and pv_h and preempted:
                pv = r.pv = Chain()  # created only now: most requests are never preempted
        anon = total - sh_h - (pv_h if pv is not None else 0)
        pool.release_anonymous(anon)
        if pv is not None:
            if pv_h > 0:
                pool.release_holder(pv, pv_h, was_extender=True)
            else:
                pv.extender = None
        if not preempted:
            r.pv = None
        if r.sh is not None:
            pool.release_holder(r.sh, sh_h, was_extender=r.ext is r.sh)
        r.ext = None
        r.sh_h = 0

    def _lookup(self, r: Req, num_tokens: int) -> tuple[int, int, int]:
        """Prefix-cache hit in blocks: (shared-chain blocks, private blocks, evictable among them).
        ``get_computed_blocks``: at most ``num_tokens - 1`` tokens, full blocks only."""
        if not self.caching:
            return 0, 0, 0
        pool, bs = self.pool, self.bs
        cap = (num_tokens - 1) // bs
        hs = ev = 0
        if r.pid is not None:
            ch = self.chains.get(r.pid)
            if ch is not None:
                own = ch.last_extender is r or ch.extender is r
                lim = cap if own else min(cap, r.ptok // bs)
                hs = min(pool.cached(ch), lim)
                ev = pool.evictable(ch, hs)
        hp = 0
        if r.pv is not None and r.pv_base == hs and hs < cap:
            hp = min(r.pv.cached, cap - hs)
            ev += hp  # a private chain has no other holder: its cached blocks are all free
        return hs, hp, ev

    def _admit_blocks(self, r: Req, hs: int, hp: int) -> None:
        """Take the hit blocks out of the queue and decide which chain the new blocks extend."""
        pool = self.pool
        ch = self.chains.get(r.pid) if r.pid is not None else None
        if ch is None and r.pid is not None and self.caching:
            ch = self.chains[r.pid] = Chain()
        r.sh = ch
        if ch is not None and hs > 0:
            pool.touch(ch, hs)
        if hp > 0:
            pool.touch(r.pv, hp)  # private chain indices are relative to pv_base
            r.ext = r.pv
            r.pv.extender = r
        elif ch is not None and ch.extender is None and hs == pool.cached(ch) and self.caching:
            r.ext = ch
            ch.extender = r
            r.sh_h = 0
            r.pv = None
            return
        else:
            r.ext = None  # its own blocks: a private chain is made only if it is preempted
            r.pv = None
            r.pv_base = hs
        if ch is not None and hs > 0:
            pool.add_holder(ch, hs)
        r.sh_h = hs

    def _preempt(self, r: Req, now: float) -> None:
        """``Scheduler._preempt_request``: free, ``num_computed_tokens = 0``, head of WAITING."""
        self.preemptions += 1
        r.preempted += 1
        if r.status == DECODE:
            r.out = self.G + r.off + 1 - r.P
            self._drop_decoder(r)
            if not r.irregular:
                r.t_last = now  # its last token came at the end of the previous step
        elif r.status == PREFILL:
            self.pre.remove(r)
        self._irregular.discard(r)
        nc = self._nc(r)
        r.nc = nc
        if r.pending_free:  # finished already; its output is delivered, the request ends
            r.pending_free = False
            self.pending.remove(r)
            self._release(r)
            r.status = DONE
            return
        self._release(r, preempted=True)
        r.status = WAITING
        r.nc = 0
        r.irregular = True
        self.waiting.appendleft(r)

    def _drop_decoder(self, r: Req) -> None:
        self.buckets[r.off % self.bs].discard(r)
        lst = self.finish_at.get(self._finish_key(r))
        if lst is not None:
            try:
                lst.remove(r)
            except ValueError:
                pass
        self.n_dec -= 1
        self.sum_off -= r.off

    def _finish_key(self, r: Req) -> int:
        # the step (value of G) in which the decoder samples its last token: outputs after the
        # step = G + off + 2 - P, reaching O; or the sequence reaching max_model_len
        nc_last = min(r.P + r.O - 2, self.mml - 2)
        return nc_last - r.off

    def _add_decoder(self, r: Req, nc: int) -> None:
        r.status = DECODE
        r.off = nc - self.G
        self.buckets[r.off % self.bs].add(r)
        self._push_finish(r)
        self.n_dec += 1
        self.sum_off += r.off

    def _push_finish(self, r: Req) -> None:
        key = self._finish_key(r)
        lst = self.finish_at.get(key)
        if lst is None:
            self.finish_at[key] = [r]
            heapq.heappush(self.finish_heap, key)
        else:
            lst.append(r)

    def _stall(self, r: Req, now: float) -> None:
        """A decoder skipped this step (budget spent before its turn): it falls one step behind."""
        self._drop_decoder(r)
        if not r.irregular:
            r.t_last = now
            r.irregular = True
        r.off -= 1
        self.buckets[r.off % self.bs].add(r)
        self._push_finish(r)
        self.n_dec += 1
        self.sum_off += r.off

    # -- the step loop ---------------------------------------------------------------------------
    def run(self) -> "Engine":
        # The loop allocates no reference cycles; with a million live requests Python's cyclic
        # collector would re-scan all of them every few thousand allocations (quadratic time).
        import gc

        was = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if was:
                gc.enable()

    def _run(self) -> "Engine":
        reqs, n = self.reqs, len(self.reqs)
        mml, bs, pool = self.mml, self.bs, self.pool
        nxt = 0
        self._last_start = self._last_end = -1.0
        self.next_sample = self.interval
        rejected_reasons: dict[str, int] = {}
        self.rejected_reasons = rejected_reasons
        never_fit = self._admission_blocks
        while True:
            # arrivals the scheduler can see: with async scheduling the step starting now was
            # scheduled when the previous one started (EngineCore.step_with_batch_queue)
            vis = self._last_start if (self.async_sched and self._last_end == self.t) else self.t
            while nxt < n and reqs[nxt].arrival <= vis:
                r = reqs[nxt]
                nxt += 1
                if r.P >= mml:  # input_processor._validate_prompt_len / get_max_tokens: HTTP 400
                    r.status = REJECTED
                    self.rejected += 1
                    rejected_reasons["prompt_too_long"] = rejected_reasons.get("prompt_too_long", 0) + 1
                    continue
                # get_max_tokens: max_tokens is clamped to max_model_len - prompt, never rejected
                r.O = max(1, min(r.O, mml - r.P))
                if never_fit(min(r.P + 1, mml)) > pool.usable and self.simple:
                    r.status = REJECTED
                    self.rejected += 1
                    rejected_reasons["exceeds_kv_cache"] = rejected_reasons.get("exceeds_kv_cache", 0) + 1
                    continue
                self.waiting.append(r)
            if not self.running and not self.waiting:
                if nxt >= n:
                    break
                self.t = max(self.t, reqs[nxt].arrival)
                self._last_end = -1.0
                continue
            if self.max_steps is not None and self.steps >= self.max_steps:
                break
            if (self.simple and self.n_dec and not self.pre and not self.waiting and not self.pending
                    and not self._irregular):
                if self._decode_stretch(reqs[nxt].arrival if nxt < n else _INF):
                    continue  # time moved: take in the arrivals before the next scheduled step
            t_start = self.t
            tokens, seqs, kv_read, pairs, n_sched_dec, stalled, preempted = self._schedule(t_start)
            released = False
            if self.async_sched and self.pending:
                for r in self.pending:
                    r.pending_free = False
                    self.running.remove(r)
                    self._release(r)
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
                    continue
                if not self.running and nxt < n:
                    self.t = max(self.t, reqs[nxt].arrival)
                    self._last_end = -1.0
                    continue
                if not self.running and not self.waiting:
                    continue
                # nothing runnable now (e.g. waiting for frees): advance to the next arrival
                if nxt < n:
                    self.t = max(self.t, reqs[nxt].arrival)
                    self._last_end = -1.0
                    continue
                break  # pragma: no cover - a stuck state; the remaining requests stay unfinished
            dt = self.profile.time(tokens, seqs, kv_read, pairs)
            t_end = t_start + dt
            self.steps += 1
            self.busy_s += dt
            self._finish_step(t_start, t_end, n_sched_dec, stalled)
            self._last_start, self._last_end = t_start, t_end
            self.t = t_end
            self.step_tokens_acc += tokens
            u = pool.usage
            if u > self.kv_peak:
                self.kv_peak = u
            if len(self.waiting) > self.max_waiting:
                self.max_waiting = len(self.waiting)
            while t_end >= self.next_sample:
                self._sample(self.next_sample)
                self.next_sample += self.interval
        if not self.timeline or self.timeline[-1]["t"] < self.t:
            self._sample(self.t)
        return self

    def _next_finish(self) -> float:
        fh, fa = self.finish_heap, self.finish_at
        while fh and not fa.get(fh[0]):
            k = heapq.heappop(fh)
            fa.pop(k, None)
        return fh[0] if fh else _INF

    def _decode_stretch(self, next_arrival: float) -> int:
        """Steps where every running request decodes and nothing arrives, finishes or waits: the
        schedule is known (one token each, blocks for the boundary crossers), so run them without
        the scheduler - only the step time (the KV read grows by one token per request per step),
        the block count and the ITL record."""
        G, n, bs, pool = self.G, self.n_dec, self.bs, self.pool
        stop = self._next_finish()
        if stop - G < 2:
            return 0
        prof_time, buckets, itl = self.profile.time, self.buckets, self.itl_w
        kv = n * (G + 1) + self.sum_off
        t = self.t
        last_start, last_end = self._last_start, self._last_end
        async_sched, usable = self.async_sched, pool.usable
        max_steps = self.max_steps
        steps = 0
        free = pool.free
        owed = 0  # blocks taken by the stretch, handed to the pool in one go
        while G < stop:
            vis = last_start if (async_sched and last_end == t) else t
            if next_arrival <= vis:
                break
            b = len(buckets[(-G) % bs])
            if b > free - owed:
                break
            if max_steps is not None and self.steps + steps >= max_steps:
                break
            owed += b
            dt = prof_time(n, n, kv, 0.0)
            itl.append((dt, n))
            last_start, last_end = t, t + dt
            t += dt
            kv += n
            G += 1
            steps += 1
            self.busy_s += dt
            self.step_tokens_acc += n
            if t >= self.next_sample:
                pool.take(owed)
                free -= owed
                owed = 0
                self.G, self.t = G, t
                while t >= self.next_sample:
                    self._sample(self.next_sample)
                    self.next_sample += self.interval
        pool.take(owed)
        if steps:
            u = 1.0 - pool.free / usable if usable else 0.0
            if u > self.kv_peak:
                self.kv_peak = u
            self.G, self.t = G, t
            self.steps += steps
            self._last_start, self._last_end = last_start, last_end
        return steps

    def _sample(self, t: float) -> None:
        span = t - self._last_sample_t
        self._last_sample_t = t
        self.timeline.append({"t": round(t, 6), "running": len(self.running) - len(self.pending),
                              "waiting": len(self.waiting), "kv_usage": round(self.pool.usage, 6),
                              "tokens_per_s": round(self.step_tokens_acc / span, 3) if span > 0 else 0.0,
                              "preemptions": self.preemptions})
        self.step_tokens_acc = 0

    def _schedule(self, now: float):
        """One ``Scheduler.schedule``: returns the step's shape and who got scheduled."""
        bs, pool, running, G = self.bs, self.pool, self.running, self.G
        budget = self.mnbt
        thr = self.thr if (len(running) + len(self.waiting)) > 1 else 0
        stalled: list[Req] = []
        preempted = False
        fast = False
        if self.simple:
            # plan the budget: decoders take one token each, prefills what is left at their turn
            bucket = self.buckets[(-G) % bs]
            need = len(bucket)
            ok = True
            if self.pre:
                pend = self.pending
                used = 0
                for before_pre, p in enumerate(self.pre):  # pre is in running order (both append at admission)
                    idx = running.index(p)
                    before_pend = sum(1 for q in pend if running.index(q) < idx) if pend else 0
                    left = budget - (idx - before_pre - before_pend) - used
                    dem = p.P + p.out - p.nc
                    if 0 < thr < dem:
                        dem = thr
                    c = min(dem, left, self.mml - p.nc - 1)
                    if c <= 0 or c == left and idx < len(running) - 1:
                        ok = False  # the budget runs out inside the queue: exact order needed
                        break
                    p.chunk = c
                    used += c
                    need += -(-(p.nc + c) // bs) - (-(-p.nc // bs))
            if ok and need <= pool.free:
                fast = True
                pool.take(need)
                budget -= self.n_dec + sum(p.chunk for p in self.pre)
        if not fast:
            budget, preempted, stalled = self._schedule_exact(now, budget, thr)
        if not preempted:
            budget = self._schedule_waiting(now, budget, thr)
        # the step's shape
        n_dec = self.n_dec
        kv_read = n_dec * (G + 1) + self.sum_off
        for r in stalled:
            kv_read -= G + r.off + 1  # counted above with their lowered off; they did not run
        n_sched_dec = n_dec - len(stalled)
        tokens = n_sched_dec
        seqs = n_sched_dec
        pairs = 0.0
        for p in self.pre:
            c = p.chunk
            if c > 0:
                tokens += c
                seqs += 1
                kv_read += p.nc + c
                pairs += c * p.nc + c * c / 2.0
        return tokens, seqs, kv_read, pairs, n_sched_dec, stalled, preempted

    def _schedule_exact(self, now: float, budget: int, thr: int):
        """The running loop of ``Scheduler.schedule`` request by request (preemption possible)."""
        bs, pool, running, G = self.bs, self.pool, self.running, self.G
        simple = self.simple
        preempted = False
        for p in self.pre:
            p.chunk = 0
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            if r.pending_free:
                i += 1
                continue
            if r.status == DECODE:
                nc = G + r.off
                c = 1
            else:
                nc = r.nc
                dem = r.P + r.out - nc
                if 0 < thr < dem:
                    dem = thr
                c = min(dem, budget, self.mml - nc - 1)
                if c <= 0:
                    i += 1
                    continue
            if simple:
                need = -(-(nc + c) // bs) - (-(-nc // bs))
            else:
                need = self._blocks(nc + c, nc) - r.held
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
            if not simple:
                r.held += need
            if r.status == PREFILL:
                r.chunk = c
            budget -= c
            i += 1
        stalled = []
        if i < len(running):
            for r in running[i:]:
                if r.status == DECODE:
                    stalled.append(r)
            for r in stalled:
                self._stall(r, now)
        return budget, preempted, stalled

    def _schedule_waiting(self, now: float, budget: int, thr: int) -> int:
        """The WAITING loop of ``Scheduler.schedule``: admit while the budget and KV allow."""
        bs, pool, running, waiting = self.bs, self.pool, self.running, self.waiting
        mml = self.mml
        while budget > 0 and waiting:
            if len(running) >= self.mns:
                break
            r = waiting[0]
            num_tokens = r.P + r.out
            hs, hp, ev = self._lookup(r, num_tokens)
            hit_b = hs + hp
            hit = hit_b * bs
            num_new = num_tokens - hit
            if 0 < thr < num_new:
                num_new = thr
            if num_new > budget:
                num_new = budget
            wm = self.watermark_blocks if running else 0
            if self.simple:
                full_need = -(-min(num_tokens, mml) // bs) - hit_b + ev
                need = -(-(hit + num_new) // bs) - hit_b
            else:
                full_need = self._admission_blocks(min(num_tokens, mml))
                need = self._blocks(num_new, 0)
            if full_need + wm > pool.free or need + ev + wm > pool.free:
                break  # allocate_slots returns None: the full prompt, then this chunk, must fit
            waiting.popleft()
            running.append(r)
            if self.simple:
                self._admit_blocks(r, hs, hp)
            pool.take(need)
            if not self.simple:
                r.held = need
            r.nc = hit
            r.hit_tokens += hit
            self.cached_tokens += hit
            r.chunk = num_new
            r.status = PREFILL
            self.pre.append(r)
            if r.t_sched is None:
                r.t_sched = now
            budget -= num_new
        return budget

    def _finish_step(self, t_start: float, t_end: float, n_sched_dec: int, stalled: list) -> None:
        """``update_from_output``: one token per request whose prompt is complete."""
        G = self.G
        dt = t_end - t_start
        # decoders that come back from a skipped step have an irregular gap
        irr = 0
        finished = self.finish_at.pop(G, None)
        self.G = G + 1
        done: list[Req] = []
        if finished:
            for r in finished:
                done.append(r)
        # ITL: every decoder that decoded in the previous step too gets a gap of one step
        if self._irregular:
            for r in list(self._irregular):
                if r.status == DECODE and r not in stalled:
                    self.itl_x.append(t_end - r.t_last)
                    r.irregular = False
                    self._irregular.discard(r)
                    irr += 1
        if n_sched_dec - irr > 0:
            self.itl_w.append((dt, n_sched_dec - irr))
        for r in stalled:
            self._irregular.add(r)
        still: list[Req] = []
        for p in self.pre:
            c = p.chunk
            if c <= 0:
                still.append(p)
                continue
            p.chunk = 0
            p.nc += c
            self.prompt_computed += c
            if p.nc >= p.P + p.out:
                p.out += 1
                if p.t_first is None:
                    p.t_first = t_end
                    self.first_order.append(p.i)
                elif p.t_last is not None:
                    self.itl_x.append(t_end - p.t_last)
                p.irregular = False
                p.t_last = None
                if p.out >= p.O or p.P + p.out >= self.mml:
                    p.status = DONE
                    done.append(p)
                else:
                    if not self.simple:
                        pass
                    self._add_decoder(p, p.nc)
            else:
                still.append(p)
        self.pre = still
        for r in done:
            if r.status == DECODE:
                r.nc = self.G + r.off  # tokens computed (the last sampled token has no KV yet)
                r.out = r.nc + 1 - r.P
                self._drop_decoder(r)
                r.status = DONE
            r.t_end = t_end
            if self.async_sched:
                r.pending_free = True
                self.pending.append(r)
            else:
                self.running.remove(r)
                self._release(r)
