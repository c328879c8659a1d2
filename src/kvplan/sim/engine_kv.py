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
    __slots__ = ("i", "arrival", "P", "O", "pid", "ptok", "root_id", "rb", "root", "root_h", "root_ext",
                 "status", "nc", "off", "out", "chunk",
                 "sh", "sh_h", "ext", "pv", "pv_base", "t_sched", "t_first", "t_last", "t_end",
                 "preempted", "irregular", "pending_free", "held", "hit_tokens")

    def __init__(self, i: int, arrival: float, P: int, O: int, pid, ptok: int, root_id=None, rb: int = 0):
        self.root_id = root_id  # a prefix shared across prefix_ids (a system prompt): rb full blocks
        self.rb = rb if root_id is not None else 0
        self.root: Optional[Chain] = None
        self.root_h = 0  # root blocks held (not extending it)
        self.root_ext = False  # its new blocks continue the root chain, up to rb
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


class KVAccounting:
    """Mixed into :class:`kvplan.sim.engine.Engine` (which owns ``pool``, ``bs``, ``G``,
    ``caching``, ``chains``; :meth:`_init_kv_groups` sets ``groups`` and ``simple``)."""

    # -- lazy views ---------------------------------------------------------------------------
    def _nc(self, r: Req) -> int:
        return self.G + r.off if r.status == DECODE else r.nc

    def _ext_blocks(self, r: Req, chain: Chain) -> int:
        """Blocks of ``chain`` that its extender ``r`` holds so far (full blocks of computed tokens;
        a conversation chain counts from the end of the root, a private one from ``pv_base``)."""
        nc = self.G + r.off if r.status == DECODE else r.nc
        full = nc // self.bs
        if chain is r.root:
            return full if full < r.rb else r.rb
        if chain is r.sh:
            return full - r.rb if full > r.rb else 0
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
            specs = (FullAttentionSpec(self.bs, num_kv_heads=1, head_size=1, head_size_v=1, dtype_bytes=1),)
        if sizing is None:  # one batch in flight
            sizing = SizingContext(self.mml, self.mnbt, self.mnbt)
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
        nc = self._nc(r)
        if not self.simple:
            pool.release_anonymous(r.held)
            r.held = 0
            return
        total = -(-nc // self.bs)
        full = nc // self.bs
        rb = r.rb
        root_h = (full if full < rb else rb) if r.root_ext else r.root_h
        pv = r.pv if r.ext is not None and r.ext is r.pv else None
        pv_h = 0
        if r.ext is not None and r.ext is r.sh:
            sh_h = full - rb if full > rb else 0
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
        pool, bs, rb = self.pool, self.bs, r.rb
        cap = (num_tokens - 1) // bs
        hr = hs = ev = 0
        if r.root_id is not None:
            rc = self.chains.get(r.root_id)
            if rc is not None:
                hr = min(pool.cached(rc), rb, cap)
                ev += pool.evictable(rc, hr)
        if r.pid is not None and hr == rb:
            ch = self.chains.get(r.pid)
            if ch is not None:
                # the chain's top blocks are this request's own tokens when it extended them last
                own = ch.extender is None and ch.last_extender is r
                lim = (cap if own else min(cap, r.ptok // bs)) - rb
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
            if rc.extender is None and hr < r.rb and hr == pool.cached(rc) and hp == 0:
                # it computes the rest of the root for everyone (a resume that continues into its
                # own private blocks already holds that content there)
                r.root_ext = True
                rc.extender = r
                r.root_h = 0
            else:
                r.root_ext = False
                pool.add_holder(rc, hr)
                r.root_h = hr
        ch = chains.get(r.pid) if r.pid is not None else None
        if ch is None and r.pid is not None:
            ch = chains[r.pid] = Chain()
        r.sh = ch
        if ch is not None and hs > 0:
            pool.touch(ch, hs)
        if hp > 0:
            pool.touch(r.pv, hp)  # private chain indices are relative to pv_base
            r.ext = r.pv
            r.pv.extender = r
        elif (ch is not None and ch.extender is None and hs == pool.cached(ch)
              and (hr == r.rb or r.root_ext)):
            r.ext = ch
            ch.extender = r
            r.sh_h = 0
            r.pv = None
            return
        else:
            r.ext = None  # its own blocks: a private chain is made only if it is preempted
            r.pv = None
            r.pv_base = r.rb if r.root_ext else hr + hs
        if ch is not None and hs > 0:
            pool.add_holder(ch, hs)
        r.sh_h = hs

    # -- preemption and the decoders' lazy state -------------------------------------------
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
