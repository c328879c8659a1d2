"""Per-request bookkeeping for the step loop (:mod:`kvplan.sim.engine`): blocks held per KV
group, release to the free queue, prefix-cache lookup and admission, preemption, and the lazy
state of decoding requests (computed tokens = ``G + off``), following
``vllm/v1/core/kv_cache_manager.py`` and ``single_type_kv_cache_manager.py`` (0.32). The pool and
its hash chains are :mod:`kvplan.sim.kvpool`."""
from __future__ import annotations

import heapq
from typing import Optional, Sequence

from ..memory.kv_specs import FullAttentionSpec, SizingContext
from .kvpool import Chain

WAITING, PREFILL, DECODE, DONE, REJECTED = 0, 1, 2, 3, 4


class Req:
    __slots__ = ("i", "arrival", "num_prompt_tokens", "max_tokens", "prefix_id", "prefix_tokens",
                 "root_id", "root_blocks", "root", "root_h", "root_ext",
                 "status", "num_computed_tokens", "off", "num_output_tokens", "num_scheduled_tokens",
                 "sh", "sh_h", "ext", "pv", "pv_base", "t_sched", "t_first", "t_last", "t_end",
                 "preempted", "irregular", "pending_free", "held", "hit_tokens")

    def __init__(self, i: int, arrival: float, num_prompt_tokens: int, max_tokens: int, prefix_id,
                 prefix_tokens: int, root_id=None, root_blocks: int = 0):
        self.root_id = root_id  # a prefix shared across prefix_ids (a system prompt): root_blocks full blocks
        self.root_blocks = root_blocks if root_id is not None else 0
        self.root: Optional[Chain] = None
        self.root_h = 0  # root blocks held (not extending it)
        self.root_ext = False  # its new blocks continue the root chain, up to root_blocks
        self.i = i
        self.arrival = arrival
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


class KVAccounting:
    """Mixed into :class:`kvplan.sim.engine.Engine` (which owns ``pool``, ``block_size``, ``G``,
    ``caching``, ``chains``; :meth:`_init_kv_groups` sets ``groups`` and ``simple``)."""

    # -- lazy views ---------------------------------------------------------------------------
    def _num_computed(self, r: Req) -> int:
        return self.G + r.off if r.status == DECODE else r.num_computed_tokens

    def _ext_blocks(self, r: Req, chain: Chain) -> int:
        """Blocks of ``chain`` that its extender ``r`` holds so far (full blocks of computed tokens;
        a conversation chain counts from the end of the root, a private one from ``pv_base``)."""
        num_computed_tokens = self.G + r.off if r.status == DECODE else r.num_computed_tokens
        full = num_computed_tokens // self.block_size
        if chain is r.root:
            return full if full < r.root_blocks else r.root_blocks
        if chain is r.sh:
            return full - r.root_blocks if full > r.root_blocks else 0
        return full - r.pv_base

    # -- KV accounting --------------------------------------------------------------------------
    def _init_kv_groups(self, groups: Sequence, sizing: Optional[SizingContext]) -> None:
        """The plan's KV groups (:class:`kvplan.memory.KVGroupInfo`, or bare KV specs): each
        group's spec counts its blocks (``spec_manager_map``: one manager per group). Their
        methods are bound here, once, for the step loop."""
        specs = tuple(getattr(g, "spec", g) for g in groups)
        if any(s is None for s in specs):
            raise ValueError("every KV group needs its KV spec (KVGroupInfo.spec)")
        if not specs:  # one full-attention group: the shape of the KV does not matter here
            specs = (FullAttentionSpec(self.block_size, num_kv_heads=1, head_size=1, head_size_v=1, dtype_bytes=1),)
        if sizing is None:  # one batch in flight
            sizing = SizingContext(self.max_model_len, self.max_num_batched_tokens, self.max_num_batched_tokens)
        self.groups = specs
        # One group that holds every token (full attention, MLA) is the fast path: the step loop
        # counts its blocks inline (cdiv of the tokens) and shares prefix-cache chains.
        self.simple = len(specs) == 1 and not specs[0].bounded
        self._held_fns = tuple(s.blocks_held for s in specs)
        self._admit_fns = tuple(s.admission_counter(sizing) for s in specs)

    def _blocks(self, slots: int, processed: int) -> int:
        """Blocks a request holds with ``slots`` token slots, ``processed`` tokens computed
        (``SingleTypeKVCacheManager.get_num_blocks_to_allocate`` / ``remove_skipped_blocks``)."""
        n = 0
        for held in self._held_fns:
            n += held(slots, processed)
        return n

    def _admission_blocks(self, tokens: int) -> int:
        """``get_num_blocks_to_allocate(apply_admission_cap=True)`` for the whole prompt."""
        n = 0
        for admit in self._admit_fns:
            n += admit(tokens)
        return n

    # -- requests in and out ----------------------------------------------------------------------
    def _release(self, r: Req, preempted: bool = False) -> None:
        """``KVCacheManager.free``: every block back to the free queue, tail first. A preempted
        request's own full blocks stay findable (its private chain: it hits them when it resumes);
        a finished request's are anonymous (nobody else has their tokens)."""
        pool = self.pool
        num_computed_tokens = self._num_computed(r)
        if not self.simple:
            pool.release_anonymous(r.held)
            r.held = 0
            return
        total = -(-num_computed_tokens // self.block_size)
        full = num_computed_tokens // self.block_size
        root_blocks = r.root_blocks
        root_h = (full if full < root_blocks else root_blocks) if r.root_ext else r.root_h
        pv = r.pv if r.ext is not None and r.ext is r.pv else None
        pv_h = 0
        if r.ext is not None and r.ext is r.sh:
            sh_h = full - root_blocks if full > root_blocks else 0
        else:
            sh_h = r.sh_h
            pv_h = max(0, full - r.pv_base) if self.caching else 0
            if pv is None and pv_h and preempted:
                pv = r.pv = Chain()  # created only now: most requests are never preempted
        anon = total - root_h - sh_h - (pv_h if pv is not None else 0)
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
        if r.root is not None:
            pool.release_holder(r.root, root_h, was_extender=r.root_ext)
        r.ext = None
        r.sh_h = 0
        r.root_h = 0
        r.root_ext = False

    def _lookup(self, r: Req, num_tokens: int) -> tuple[int, int, int, int]:
        """Prefix-cache hit in blocks: (root blocks, conversation blocks, private blocks, evictable
        among them). ``get_computed_blocks``: at most ``num_tokens - 1`` tokens, full blocks only,
        and a chain of hashes: nothing past the first missing block."""
        if not self.caching:
            return 0, 0, 0, 0
        pool, block_size, root_blocks = self.pool, self.block_size, r.root_blocks
        cap = (num_tokens - 1) // block_size
        hr = hs = ev = 0
        if r.root_id is not None:
            rc = self.chains.get(r.root_id)
            if rc is not None:
                hr = min(pool.cached(rc), root_blocks, cap)
                ev += pool.evictable(rc, hr)
        if r.prefix_id is not None and hr == root_blocks:
            ch = self.chains.get(r.prefix_id)
            if ch is not None:
                # the chain's top blocks are this request's own tokens when it extended them last
                own = ch.extender is None and ch.last_extender is r
                lim = (cap if own else min(cap, r.prefix_tokens // block_size)) - root_blocks
                hs = max(0, min(pool.cached(ch), lim))
                ev += pool.evictable(ch, hs)
        hp = 0
        base = hr + hs
        if r.pv is not None and r.pv_base == base and base < cap:
            hp = min(r.pv.cached, cap - base)
            ev += hp  # a private chain has no other holder: its cached blocks are all free
        return hr, hs, hp, ev

    def _admit_blocks(self, r: Req, hr: int, hs: int, hp: int) -> None:
        """Take the hit blocks out of the queue and decide which chains the new blocks extend."""
        pool, chains = self.pool, self.chains
        if not self.caching:
            r.root = r.sh = r.ext = r.pv = None
            r.sh_h = r.root_h = r.pv_base = 0
            return
        if r.root_id is not None:
            rc = chains.get(r.root_id)
            if rc is None:
                rc = chains[r.root_id] = Chain()
            r.root = rc
            if hr > 0:
                pool.touch(rc, hr)
            if rc.extender is None and hr < r.root_blocks and hr == pool.cached(rc) and hp == 0:
                # it computes the rest of the root for everyone (a resume that continues into its
                # own private blocks already holds that content there)
                r.root_ext = True
                rc.extender = r
                r.root_h = 0
            else:
                r.root_ext = False
                pool.add_holder(rc, hr)
                r.root_h = hr
        ch = chains.get(r.prefix_id) if r.prefix_id is not None else None
        if ch is None and r.prefix_id is not None:
            ch = chains[r.prefix_id] = Chain()
        r.sh = ch
        if ch is not None and hs > 0:
            pool.touch(ch, hs)
        if hp > 0:
            pool.touch(r.pv, hp)  # private chain indices are relative to pv_base
            r.ext = r.pv
            r.pv.extender = r
        elif (ch is not None and ch.extender is None and hs == pool.cached(ch)
              and (hr == r.root_blocks or r.root_ext)):
            r.ext = ch
            ch.extender = r
            r.sh_h = 0
            r.pv = None
            return
        else:
            r.ext = None  # its own blocks: a private chain is made only if it is preempted
            r.pv = None
            r.pv_base = r.root_blocks if r.root_ext else hr + hs
        if ch is not None and hs > 0:
            pool.add_holder(ch, hs)
        r.sh_h = hs

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
            self._release(r)
            r.status = DONE
            return
        self._release(r, preempted=True)
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
