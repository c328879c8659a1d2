"""Per-request state for the step loop (:mod:`kvplan.sim.engine`): the request record, preemption
(``Scheduler._preempt_request``, 0.32) and the lazy state of decoding requests (computed tokens =
``G + off``). The KV blocks are the KV manager's (:mod:`kvplan.sim.kvmanager`)."""
from __future__ import annotations

import heapq
from typing import Optional

from .kvpool import Chain

WAITING, PREFILL, DECODE, DONE, REJECTED = 0, 1, 2, 3, 4


class Req:
    __slots__ = ("i", "arrival", "num_prompt_tokens", "max_tokens", "prefix_id", "prefix_tokens",
                 "root_id", "root_blocks", "root", "root_h", "root_ext",
                 "status", "num_computed_tokens", "off", "num_output_tokens", "num_scheduled_tokens",
                 "sh", "sh_h", "ext", "pv", "pv_base", "t_sched", "t_first", "t_last", "t_end",
                 "preempted", "irregular", "pending_free", "held", "hit_tokens", "handoff", "d_first", "d_end")

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


class DecodeBookkeeping:
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
        self.buckets[r.off % self.block_size].add(r)
        self._push_finish(r)
        self.n_dec += 1
        self.sum_off += r.off
