"""Per-request state for the step loop (:mod:`kvplan.sim.engine`): the request record, preemption
(``Scheduler._preempt_request``, 0.32), the lazy state of decoding requests (computed tokens =
``G + off``) and their fast path, the decode stretch (steps run without the scheduler). The KV
blocks are the KV manager's (:mod:`kvplan.sim.kvmanager`)."""
from __future__ import annotations

from heapq import heappop, heappush  # (names, not the module's attributes: one lookup fewer)
import math
from collections import deque
from typing import Any, Final, Optional, TYPE_CHECKING

from .._native import mypyc_attr
from .kvpool import BlockPool, Chain

if TYPE_CHECKING:
    from .frontend import FrontEnd
    from .kvmanager import KVManager
    from .recorder import StepRecorder

_INF: Final = math.inf

# (Final: the native build inlines them; a module global is a dict lookup per use)
WAITING: Final = 0
PREFILL: Final = 1
DECODE: Final = 2
DONE: Final = 3
REJECTED: Final = 4


class Req:
    __slots__ = ("i", "arrival", "num_prompt_tokens", "max_tokens", "prefix_id", "prefix_tokens",
                 "root_id", "root_blocks", "root", "root_h", "root_ext",
                 "status", "num_computed_tokens", "off", "num_output_tokens", "num_scheduled_tokens",
                 "sh", "sh_h", "ext", "pv", "pv_base", "t_sched", "t_first", "t_last", "t_end",
                 "preempted", "irregular", "pending_free", "held", "hit_tokens", "handoff", "d_first", "d_end")

    i: int
    arrival: Any
    handoff: Any
    d_first: Any
    d_end: Any
    num_prompt_tokens: int
    max_tokens: int
    prefix_id: Any
    prefix_tokens: int
    status: int
    num_computed_tokens: int
    off: int
    num_output_tokens: int
    num_scheduled_tokens: int
    sh: Optional[Chain]
    sh_h: int
    ext: Optional[Chain]
    pv: Optional[Chain]
    pv_base: int
    t_sched: Any
    t_first: Any
    t_last: Any
    t_end: Any
    preempted: int
    irregular: bool
    pending_free: bool
    held: int
    hit_tokens: int
    root_id: Any
    root_blocks: int
    root: Optional[Chain]
    root_h: int
    root_ext: bool

    def __init__(self, i: int, arrival: float, num_prompt_tokens: int, max_tokens: int, prefix_id,
                 prefix_tokens: int, root_id=None, root_blocks: int = 0):
        self.root_id = root_id  # a prefix shared across prefix_ids (a system prompt): root_blocks full blocks
        self.root_blocks = root_blocks if root_id is not None else 0
        self.root: Optional[Chain] = None
        self.root_h = 0  # root blocks held (not extending it)
        self.root_ext = False  # its new blocks continue the root chain, up to root_blocks
        self.i = i
        self.arrival = arrival  # when the client sent it (what TTFT and E2E count from)
        self.handoff = arrival  # when the engine can see it (after the API server, kvplan.sim.frontend)
        self.d_first = self.d_end = None  # when its first / last token reached the client (front end)
        self.num_prompt_tokens = num_prompt_tokens
        self.max_tokens = max_tokens  # clamped to max_model_len - num_prompt_tokens at arrival
        self.prefix_id = prefix_id
        self.prefix_tokens = prefix_tokens
        self.status = WAITING
        self.num_computed_tokens = 0  # computed tokens (prefill / waiting); decoders use G + off
        self.off = 0
        self.num_output_tokens = 0  # output tokens generated so far (materialised for non-decoders)
        self.num_scheduled_tokens = 0  # tokens scheduled this step
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


@mypyc_attr(allow_interpreted_subclasses=True)  # (Engine's bases: see Engine)
class EngineState:
    """The step loop's state, declared once for the classes that share it."""
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    profile: Any
    long_prefill_token_threshold: int
    reserve_full_prompt: bool
    async_sched: bool
    interval: float
    max_samples: int
    max_steps: Optional[int]
    kv: KVManager
    counted: bool
    caching: bool
    watermark_blocks: int
    pool: BlockPool
    reqs: list[Req]
    running: list[Req]
    waiting: deque
    G: int
    buckets: list[set[Req]]
    finish_at: dict[int, list[Req]]
    finish_heap: list[int]
    n_dec: int
    sum_off: int
    pre: list[Req]
    pending: list[Req]
    _last_sample_t: float
    _irregular: set[Req]
    t: float
    steps: int
    busy_s: float
    preemptions: int
    rejected: int
    prompt_computed: int
    recomputed: int
    cached_tokens: int
    itl_w: list
    itl_x: list
    first_order: list[int]
    timeline: list[dict]
    step_tokens_acc: int
    step_prompt_acc: int
    kv_peak: float
    max_waiting: int
    kv_waits: int
    slots: Optional[list[float]]
    _due: Any
    _ovh: float
    peak_in_flight: int
    _in_flight: int
    _nxt: int
    _last_start: float
    _last_end: float
    next_sample: float
    rejected_reasons: dict[str, int]
    completed: int
    last_step_end: float
    last_step_completed: int
    recorder: StepRecorder
    _record_countdown: int
    fe: Optional[FrontEnd]
    _committed: int
    _handoff_seen: bool
    _fe_synced_at: Any
    _needs: tuple

    def _sample(self, t: float) -> None:
        raise NotImplementedError

    def _commit_sends(self, until: float) -> None:
        raise NotImplementedError


@mypyc_attr(allow_interpreted_subclasses=True)  # (Engine's bases: see Engine)
class DecodeBookkeeping(EngineState):
    """Mixed into :class:`kvplan.sim.engine.Engine` (which owns ``kv``, ``G``, ``buckets``,
    ``finish_at``, ``pre``, ``running``, ``waiting``): the lazy state of decoding requests (computed
    tokens = ``G + off``), preemption, and skipped steps."""

    def _num_computed(self, r: Req) -> int:
        return self.G + r.off if r.status == DECODE else r.num_computed_tokens

    # -- preemption and the decoders' lazy state -------------------------------------------
    def _preempt(self, r: Req, now: float) -> None:
        """``Scheduler._preempt_request``: free, ``num_computed_tokens = 0``, head of WAITING."""
        self.preemptions += 1
        r.preempted += 1
        if r.status == DECODE:
            r.num_output_tokens = self.G + r.off + 1 - r.num_prompt_tokens
            self._drop_decoder(r)
            if not r.irregular:
                r.t_last = now  # its last token came at the end of the previous step
        elif r.status == PREFILL:
            self.pre.remove(r)
        self._irregular.discard(r)
        num_computed_tokens = self._num_computed(r)
        r.num_computed_tokens = num_computed_tokens
        if r.pending_free:  # finished already; its output is delivered, the request ends
            r.pending_free = False
            self.pending.remove(r)
            self.kv.free(r, num_computed_tokens)
            r.status = DONE
            return
        self.kv.free(r, num_computed_tokens, preempted=True)
        r.status = WAITING
        r.num_computed_tokens = 0
        r.irregular = True
        self.waiting.appendleft(r)

    def _drop_decoder(self, r: Req) -> None:
        self.buckets[r.off % self.block_size].discard(r)
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
        # step = G + off + 2 - num_prompt_tokens, reaching max_tokens; or the sequence reaching
        # max_model_len
        last_num_computed = min(r.num_prompt_tokens + r.max_tokens - 2, self.max_model_len - 2)
        return last_num_computed - r.off

    def _add_decoder(self, r: Req, num_computed_tokens: int) -> None:
        r.status = DECODE
        r.off = num_computed_tokens - self.G
        self.buckets[r.off % self.block_size].add(r)
        self._push_finish(r)
        self.n_dec += 1
        self.sum_off += r.off

    def _push_finish(self, r: Req) -> None:
        key = self._finish_key(r)
        lst = self.finish_at.get(key)
        if lst is None:
            self.finish_at[key] = [r]
            heappush(self.finish_heap, key)
        else:
            lst.append(r)

    def _stall(self, r: Req, now: float) -> None:
        """A decoder skipped this step (budget spent before its turn): it falls one step behind."""
        self._drop_decoder(r)
        if not r.irregular:
            r.t_last = now
            r.irregular = True
        r.off -= 1
        self.buckets[r.off % self.block_size].add(r)
        self._push_finish(r)
        self.n_dec += 1
        self.sum_off += r.off

    def _next_finish(self) -> float:
        fh, fa = self.finish_heap, self.finish_at
        while fh and not fa.get(fh[0]):
            k = heappop(fh)
            fa.pop(k, None)
        return fh[0] if fh else _INF

    def _decode_stretch(self, next_arrival: float) -> int:
        """Steps where every running request decodes and nothing arrives, finishes or waits: the
        schedule is known (one token each, blocks for the boundary crossers), so run them without
        the scheduler - only the step time (the KV read grows by one token per request per step),
        the block count and the ITL record."""
        G, n, block_size, pool = self.G, self.n_dec, self.block_size, self.pool
        stop = self._next_finish()
        if stop - G < 2:
            return 0
        prof_time, buckets, itl = self.profile.time, self.buckets, self.itl_w
        # the step time's parts that do not change within the stretch (StepModel.decode_parts: the
        # same floats as prof_time(n, n, kv, 0.0)); None: call the step model every step. Read from
        # the instance itself: a wrapper that delegates attributes (serve_flag_costs) times steps
        # its own way
        decode_parts = getattr(self.profile, "__dict__", {}).get("decode_parts")
        parts = decode_parts(n) if decode_parts is not None else None
        if parts is not None:
            gpu_base, kv_s, window, window_kv, cpu, overlap = parts
            window_cap = n * window
        fe = self.fe
        # FrontEnd.outputs' common case inline (one API server, nothing queued): the batch's place
        fe_one = fe.servers[0] if fe is not None and fe.count == 1 else None
        chunk_cost = fe.chunk_s * n if fe is not None else 0.0
        # an open loop's next client send: it enters the front end when the stretch passes it
        reqs = self.reqs
        next_send = (reqs[self._committed].arrival if fe is not None and self.slots is None
                     and self._committed < len(reqs) else _INF)
        kv = n * (G + 1) + self.sum_off
        t = self.t
        last_start, last_end = self._last_start, self._last_end
        async_sched, usable = self.async_sched, pool.usable
        max_steps = self.max_steps
        steps_left = _INF if max_steps is None else max_steps - self.steps
        steps = 0
        free = pool.free
        owed = 0  # blocks taken by the stretch, handed to the pool in one go
        # the step aggregates, kept here and written back (same additions in the same order)
        busy_s, tokens_acc, next_sample = self.busy_s, self.step_tokens_acc, self.next_sample
        while G < stop:
            vis = last_start if (async_sched and last_end == t) else t
            if next_arrival <= vis:
                break
            b = len(buckets[(-G) % block_size])
            if b > free - owed:
                break
            if steps >= steps_left:
                break
            owed += b
            if parts is None:
                dt = prof_time(n, n, kv, 0.0)
            else:
                gpu = gpu_base + kv_s * kv
                if window:
                    gpu += window_kv * (kv if kv < window_cap else window_cap)
                if overlap:
                    dt = gpu if gpu > cpu else cpu
                else:
                    dt = gpu + cpu
            if not steps:
                first_dt, first_kv = dt, kv
            itl.append((dt, n))
            last_start, last_end = t, t + dt
            t += dt
            kv += n
            G += 1
            steps += 1
            busy_s += dt
            tokens_acc += n
            if t >= next_sample:
                pool.take(owed)
                free -= owed
                owed = 0
                self.G, self.t = G, t
                self.step_tokens_acc = tokens_acc
                while t >= self.next_sample:
                    self._sample(self.next_sample)
                    self.next_sample += self.interval
                tokens_acc, next_sample = self.step_tokens_acc, self.next_sample
            if fe is not None:  # the API server's loop runs to the step's end, then takes its outputs
                if next_send <= t:  # sends during this step queue ahead of its output batch
                    first_new = self._committed
                    self._commit_sends(t)
                    next_send = reqs[self._committed].arrival if self._committed < len(reqs) else _INF
                    fe.advance(t)
                    fe.outputs(t, n, (), ())
                    if self._handoff_seen:
                        break
                    # the requests just sent reach the engine at their hand-off (or when the API
                    # server's queue runs next): the stretch stops before it
                    upcoming = min(fe.next_start(), reqs[first_new].handoff)
                    if upcoming < next_arrival:
                        next_arrival = upcoming
                    continue
                if fe_one is not None and not fe.waiting:
                    if fe_one.tail_start <= t:
                        start = t if t > fe_one.busy else fe_one.busy
                        fe_one.tail_start = start
                        fe_one.tail_end = fe_one.busy = start + chunk_cost
                    continue
                if fe.waiting:
                    fe.advance(t)
                fe.outputs(t, n, (), ())
                if self._handoff_seen:  # it handed a request on: the scheduler takes it in
                    break
        self.busy_s, self.step_tokens_acc = busy_s, tokens_acc
        pool.take(owed)
        if steps:
            # the stretch's steps differ only by their KV read: sampled as its first step, weighted
            countdown = self._record_countdown - 1
            if countdown:
                self._record_countdown = countdown
            else:
                self._record_countdown = self.recorder.add(first_dt, n, n, first_kv, 0.0, 0, 0, 0, steps)
            u = 1.0 - pool.free / usable if usable else 0.0
            if u > self.kv_peak:
                self.kv_peak = u
            self.G, self.t = G, t
            self.steps += steps
            self._last_start, self._last_end = last_start, last_end
        return steps
