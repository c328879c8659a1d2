"""vLLM's ``KVCacheManager`` for the simulator, one object per accounting scheme, chosen once per
run (``make_kv_manager``), following ``vllm/v1/core/kv_cache_manager.py`` and
``single_type_kv_cache_manager.py`` (0.32):

* :class:`FullAttentionKVManager` - one group that holds every token (full attention, MLA): a
  request holds ``cdiv(tokens, block_size)`` blocks, counted inline, with prefix caching over the
  pool's hash chains (:mod:`kvplan.sim.kvpool`). The step loop's counted fast paths (decoders
  advancing on one counter, decode stretches without the scheduler) apply (``counted``).
* :class:`HybridKVManager` - several groups or a bounded one (sliding window, chunked local
  attention, Mamba state): each group's KV spec counts its blocks (``blocks_held``,
  ``admission_counter``, the planner's own objects); prefix caching of the prefix every request
  shares (``root_id``: a system prompt, the chat template's head) only, and none with a Mamba group.

The scheduler asks the manager the questions ``allocate_slots`` answers: how many blocks a step's
tokens need, whether a waiting request's prompt fits, what the prefix cache hits, and it tells the
manager what was allocated and freed."""
from __future__ import annotations

from typing import Callable, Final, Optional, Sequence

from ..memory.kv_specs import FullAttentionSpec, SizingContext
from .kvpool import BlockPool, Chain


#: a lookup that hits nothing: (root, shared, private, evictable) blocks
_NO_HITS: Final = (0, 0, 0, 0)


class KVManager:
    """The interface the scheduler uses (both schemes implement it)."""

    #: one group holding every token: blocks = cdiv(tokens), the engine's counted fast paths apply
    counted: bool = False
    prefix_caching: bool = False
    pool: BlockPool
    block_size: int

    def blocks_to_allocate(self, r, num_computed_tokens: int, num_new_tokens: int) -> int:
        """Blocks a running request needs for ``num_new_tokens`` more tokens (negative: a sliding
        window moved past whole blocks, which go back to the pool)."""
        raise NotImplementedError

    def allocated(self, r, blocks: int) -> None:
        """The scheduler took (or returned) ``blocks`` for ``r``."""

    def lookup(self, r, num_tokens: int) -> tuple[int, int, int, int]:
        """Prefix-cache hit in blocks: (root, conversation, private, evictable among them)."""
        return 0, 0, 0, 0

    def admission(self, num_tokens: int, max_model_len: int, hit_blocks: int, evictable: int,
                  num_new_tokens: int) -> tuple[int, int]:
        """(blocks the whole prompt needs, blocks this step's chunk needs) for a waiting request
        (``allocate_slots(full_sequence_must_fit=True)``)."""
        raise NotImplementedError

    def admit(self, r, hits: tuple[int, int, int, int], chunk_blocks: int) -> None:
        """``r`` was admitted with these prefix-cache hits and its first chunk's blocks."""

    def free(self, r, num_computed_tokens: int, preempted: bool = False) -> None:
        """``KVCacheManager.free``: every block of ``r`` back to the free queue."""
        raise NotImplementedError

    def never_fits(self, prompt_tokens: int) -> bool:
        """A prompt the whole pool cannot hold (rejected when it arrives)."""
        return False

    def warm(self, warm_prefixes: Sequence[tuple]) -> None:
        """Prefix-cache chains computed before t = 0 (none without prefix caching)."""


def make_kv_manager(*, groups: Sequence, sizing: Optional[SizingContext], num_gpu_blocks: int, block_size: int,
                    max_model_len: int, max_num_batched_tokens: int, enable_prefix_caching: bool,
                    progress: Callable) -> KVManager:
    """The manager of the plan's KV groups (:class:`kvplan.memory.KVGroupInfo`, or bare KV specs).
    ``progress(r)``: the tokens request ``r`` has computed (decoders keep theirs lazily)."""
    specs = tuple(getattr(g, "spec", g) for g in groups)
    if any(s is None for s in specs):
        raise ValueError("every KV group needs its KV spec (KVGroupInfo.spec)")
    if not specs:  # one full-attention group: the shape of the KV does not matter here
        specs = (FullAttentionSpec(block_size, num_kv_heads=1, head_size=1, head_size_v=1, dtype_bytes=1),)
    if len(specs) == 1 and not specs[0].bounded:
        return FullAttentionKVManager(num_gpu_blocks, block_size, enable_prefix_caching, progress)
    if sizing is None:  # one batch in flight
        sizing = SizingContext(max_model_len, max_num_batched_tokens, max_num_batched_tokens)
    return HybridKVManager(num_gpu_blocks, block_size, specs, sizing, enable_prefix_caching=enable_prefix_caching)


class HybridKVManager(KVManager):
    """Per-group block counts from the KV specs; each request's blocks are one counter (``held``).

    Prefix caching (``HybridKVCacheCoordinator``, 0.11.0-0.32): a hit must be cached in every
    group; a sliding-window group's hit (``SlidingWindowManager.find_longest_cache_hit``) needs
    only the blocks of the last window, and a prefix shorter than the window is a hit whole.
    Modelled for the prefix every request shares (``root_id``): once a request with it was
    admitted (vLLM caches full blocks when it allocates them), later requests hit its full blocks
    (never the last prompt token) and hold them shared, not as their own. The shared blocks are
    taken to stay cached (some running request holds them) and are not counted in the pool. Hits
    on a conversation's own history (``prefix_id``) and a preempted request's own blocks are not
    modelled; with a Mamba group nothing is cached (vLLM 0.11 disables prefix caching there)."""

    def __init__(self, num_gpu_blocks: int, block_size: int, specs: Sequence, sizing: SizingContext, *,
                 enable_prefix_caching: bool = False):
        self.block_size = block_size
        self.specs = tuple(specs)
        self.pool = BlockPool(num_gpu_blocks, block_size, None)
        self._held_fns = tuple(s.blocks_held for s in specs)
        self._admit_fns = tuple(s.admission_counter(sizing) for s in specs)
        self.prefix_caching = enable_prefix_caching and not any(getattr(s, "kind", "") == "mamba" for s in specs)
        self._roots: set = set()  # shared prefixes computed (cached) so far

    def _shared(self, hit_tokens: int, processed: int) -> int:
        """Blocks of a shared hit of ``hit_tokens`` that the groups still hold at ``processed``."""
        if not hit_tokens:
            return 0
        n = 0
        for held in self._held_fns:
            n += held(hit_tokens, processed)
        return n

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

    def blocks_to_allocate(self, r, num_computed_tokens: int, num_new_tokens: int) -> int:
        own = self._blocks(num_computed_tokens + num_new_tokens, num_computed_tokens) - r.held
        if r.root_h:
            own -= self._shared(r.root_h * self.block_size, num_computed_tokens)
        return own

    def allocated(self, r, blocks: int) -> None:
        r.held += blocks

    def lookup(self, r, num_tokens: int) -> tuple[int, int, int, int]:
        if not self.prefix_caching or r.root_id is None or r.root_id not in self._roots:
            return 0, 0, 0, 0
        cap = (num_tokens - 1) // self.block_size
        return (r.root_blocks if r.root_blocks < cap else cap), 0, 0, 0

    def admission(self, num_tokens, max_model_len, hit_blocks, evictable, num_new_tokens):
        hit = hit_blocks * self.block_size
        shared = self._shared(hit, hit)
        return (self._admission_blocks(min(num_tokens, max_model_len)) - shared,
                self._blocks(hit + num_new_tokens, hit) - shared)

    def admit(self, r, hits, chunk_blocks: int) -> None:
        r.held = chunk_blocks
        r.root_h = hits[0]
        if self.prefix_caching and r.root_id is not None:
            self._roots.add(r.root_id)

    def free(self, r, num_computed_tokens: int, preempted: bool = False) -> None:
        self.pool.release_anonymous(r.held)
        r.held = 0
        r.root_h = 0

    def warm(self, warm_prefixes: Sequence[tuple]) -> None:
        """Prefixes computed before t = 0 (vllm bench's test request): their shared heads hit."""
        if self.prefix_caching:
            self._roots.update(prefix_id for prefix_id, tokens, _ in warm_prefixes if int(tokens) >= self.block_size)


class FullAttentionKVManager(KVManager):
    """One full-attention (or MLA) group: blocks counted as ``cdiv(tokens, block_size)``, prefix
    caching over hash chains (a shared one per ``prefix_id``, under an optional ``root_id``, and
    a request's private one, which it hits when it resumes after a preemption)."""

    counted = True

    def __init__(self, num_gpu_blocks: int, block_size: int, enable_prefix_caching: bool, progress: Callable):
        self.block_size = block_size
        self.prefix_caching = enable_prefix_caching
        self.chains: dict = {}
        self._progress = progress
        self.pool = BlockPool(num_gpu_blocks, block_size, self._ext_blocks)

    def _ext_blocks(self, r, chain: Chain) -> int:
        """Blocks of ``chain`` that its extender ``r`` holds so far (full blocks of computed tokens;
        a conversation chain counts from the end of the root, a private one from ``pv_base``)."""
        full = self._progress(r) // self.block_size
        if chain is r.root:
            return full if full < r.root_blocks else r.root_blocks
        if chain is r.sh:
            return full - r.root_blocks if full > r.root_blocks else 0
        return full - r.pv_base

    def blocks_to_allocate(self, r, num_computed_tokens: int, num_new_tokens: int) -> int:
        block_size = self.block_size
        return -(-(num_computed_tokens + num_new_tokens) // block_size) - (-(-num_computed_tokens // block_size))

    def admission(self, num_tokens, max_model_len, hit_blocks, evictable, num_new_tokens):
        block_size = self.block_size
        full_need = -(-min(num_tokens, max_model_len) // block_size) - hit_blocks + evictable
        need = -(-(hit_blocks * block_size + num_new_tokens) // block_size) - hit_blocks
        return full_need, need

    def never_fits(self, prompt_tokens: int) -> bool:
        return -(-prompt_tokens // self.block_size) > self.pool.usable

    # -- requests in and out ----------------------------------------------------------------------
    def free(self, r, num_computed_tokens: int, preempted: bool = False) -> None:
        """Every block back to the free queue, tail first. A preempted request's own full blocks
        stay findable (its private chain: it hits them when it resumes); a finished request's are
        anonymous (nobody else has their tokens)."""
        pool = self.pool
        total = -(-num_computed_tokens // self.block_size)
        if (not preempted and r.ext is None and r.pv is None and r.sh is None and r.root is None
                and not r.root_ext):
            # (the common case: a finished request of no chain; the general path below, shortened)
            pool.release_anonymous(total - r.root_h - r.sh_h)
            r.sh_h = 0
            r.root_h = 0
            return
        full = num_computed_tokens // self.block_size
        root_blocks = r.root_blocks
        root_h = (full if full < root_blocks else root_blocks) if r.root_ext else r.root_h
        pv = r.pv if r.ext is not None and r.ext is r.pv else None
        pv_h = 0
        if r.ext is not None and r.ext is r.sh:
            sh_h = full - root_blocks if full > root_blocks else 0
        else:
            sh_h = r.sh_h
            pv_h = max(0, full - r.pv_base) if self.prefix_caching else 0
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

    def lookup(self, r, num_tokens: int) -> tuple[int, int, int, int]:
        """``get_computed_blocks``: at most ``num_tokens - 1`` tokens, full blocks only, and a chain
        of hashes: nothing past the first missing block."""
        if not self.prefix_caching or (r.root_id is None and r.prefix_id is None and r.pv is None):
            return _NO_HITS  # no chain it could hit
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

    def admit(self, r, hits, chunk_blocks: int) -> None:
        """Take the hit blocks out of the queue and decide which chains the new blocks extend."""
        hr, hs, hp, _ = hits
        pool, chains = self.pool, self.chains
        if not self.prefix_caching:
            r.root = r.sh = r.ext = r.pv = None
            r.sh_h = r.root_h = r.pv_base = 0
            return
        if r.root_id is None and r.prefix_id is None and not hp:
            # no chain to hit or extend (the general path below, shortened): its blocks are its own
            r.sh = r.ext = r.pv = None
            r.pv_base = r.sh_h = 0
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

    def warm(self, warm_prefixes: Sequence[tuple]) -> None:
        """Prefix-cache chains computed before t = 0 (vllm bench's test request, an earlier run):
        their blocks sit cached at the tail of the free queue, as a finished request leaves them."""
        if not self.prefix_caching:
            return
        pool, block_size = self.pool, self.block_size
        # more than the pool holds: the oldest were evicted (LRU), keep the newest (the list's tail)
        need, keep = 0, len(warm_prefixes)
        while keep:
            blocks = max(0, int(warm_prefixes[keep - 1][1]) // block_size
                         - int(warm_prefixes[keep - 1][2]) // block_size)
            if need + blocks > pool.free:
                break
            need, keep = need + blocks, keep - 1
        for prefix_id, tokens, root_tokens in warm_prefixes[keep:]:
            blocks = int(tokens) // block_size - int(root_tokens) // block_size
            if blocks <= 0 or prefix_id in self.chains:
                continue
            blocks = min(blocks, pool.free)
            if blocks <= 0:
                break
            # carve the blocks off the anonymous front run and put them back, cached, at the tail
            front = pool.queue[0] if pool.queue else None
            if front is None or front[0] is not None or front[2] - front[1] < blocks:
                break
            front[2] -= blocks
            ch = self.chains[prefix_id] = Chain()
            run = [ch, 0, blocks]
            pool.queue.append(run)
            ch.runs.append(run)
            ch.cached = blocks
