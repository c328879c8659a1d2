"""The KV block pool as vLLM V1's ``BlockPool`` runs it, counted rather than enumerated.

vLLM keeps one free queue of blocks (``FreeKVCacheBlockQueue``): a freed request's blocks are
appended in reverse order (``KVCacheManager.free`` → ``block_pool.free_blocks(reversed(...))``),
new blocks are taken from the front (``get_new_blocks`` → ``popleft_n``), and a free block that
still carries a prefix hash stays a cache hit until it is taken (LRU eviction,
``_maybe_evict_cached_block``). A hit on a free cached block takes it out of the queue (``touch``).

The simulator never needs block ids, only *which prefix of which hash chain* is still cached.
Every request's blocks belong to a :class:`Chain` (a shared one per ``prefix_id`` - system prompt,
conversation history - or the request's private one, which is what a preempted request hits when
it resumes), so the free queue is a deque of *runs* ``[chain, lo, hi)``: a freed range of one
chain. Because blocks go back tail first and leave from the front, a chain's cached blocks are
always its first ``cached`` blocks, blocks in ``[held_max, cached)`` are exactly its free ones,
and every operation costs O(runs touched), not O(blocks).
"""
from __future__ import annotations

from collections import deque
from typing import Any, Optional


class Chain:
    """One hash chain (blocks 0, 1, ... of a token prefix). ``holders`` counts running requests by
    how many leading blocks they hold; the ``extender`` (at most one running request) is the one
    whose newly computed blocks continue the chain - its hold is read lazily from its progress."""

    __slots__ = ("cached", "holders", "held_max", "runs", "extender", "last_extender")

    def __init__(self) -> None:
        self.cached = 0  # leading blocks still in the cache (held or free), extender excluded
        self.holders: dict[int, int] = {}
        self.held_max = 0  # blocks [0, held_max) are held by some non-extender holder
        self.runs: list[list] = []  # this chain's free runs, oldest (highest range) first
        self.extender: Any = None
        self.last_extender: Any = None


class BlockPool:
    """Free-block accounting with prefix-cache runs. ``free`` includes cached free blocks, as
    ``BlockPool.get_num_free_blocks`` does; ``usage`` is ``get_usage`` (the null block excluded)."""

    __slots__ = ("num_blocks", "usable", "free", "queue", "block_size", "ext_blocks")

    def __init__(self, num_blocks: int, block_size: int, ext_blocks) -> None:
        self.num_blocks = num_blocks
        self.usable = max(num_blocks - 1, 0)  # the null block is never handed out
        self.free = self.usable
        self.block_size = block_size
        # the queue starts as one anonymous run of every usable block
        self.queue: deque = deque([[None, 0, self.usable]]) if self.usable else deque()
        self.ext_blocks = ext_blocks  # (request, chain) -> its blocks of that chain so far (the lazy hold)

    @property
    def usage(self) -> float:
        return 1.0 - self.free / self.usable if self.usable else 0.0

    # -- the chain's view -------------------------------------------------------------------
    def cached(self, chain: Chain) -> int:
        ext = chain.extender
        return self.ext_blocks(ext, chain) if ext is not None else chain.cached

    def held_top(self, chain: Chain) -> int:
        ext = chain.extender
        return max(chain.held_max, self.ext_blocks(ext, chain)) if ext is not None else chain.held_max

    def evictable(self, chain: Chain, h: int) -> int:
        """Hit blocks in [0, h) that sit in the free queue (``_get_num_evictable_blocks``)."""
        top = self.held_top(chain)
        return h - top if h > top else 0

    # -- allocation ---------------------------------------------------------------------------
    def take(self, n: int) -> None:
        """``get_new_blocks(n)``: pop from the front, evicting the cached blocks it reaches."""
        if n <= 0:
            return
        if n > self.free:
            raise AssertionError(f"taking {n} blocks with {self.free} free")
        self.free -= n
        q = self.queue
        while n:
            run = q[0]
            size = run[2] - run[1]
            if size <= 0:
                q.popleft()
                continue
            t = n if n < size else size
            run[2] -= t
            n -= t
            ch = run[0]
            if ch is not None:
                ch.cached = run[2]  # the front run of a chain holds its top blocks
            if run[2] <= run[1]:
                q.popleft()
                if ch is not None:
                    try:
                        ch.runs.remove(run)
                    except ValueError:  # pragma: no cover - defensive
                        pass

    def touch(self, chain: Chain, h: int) -> None:
        """A new holder hits blocks [0, h): the free ones among them leave the queue."""
        top = self.held_top(chain)
        if h <= top:
            return
        touched = 0
        runs = chain.runs
        while runs:
            run = runs[-1]  # newest run = lowest range
            if run[1] >= h:
                break
            upto = run[2] if run[2] < h else h
            touched += upto - run[1]
            run[1] = upto
            if run[1] >= run[2]:
                runs.pop()
            else:
                break
        self.free -= touched

    def add_holder(self, chain: Chain, h: int) -> None:
        if h <= 0:
            return
        chain.holders[h] = chain.holders.get(h, 0) + 1
        if h > chain.held_max:
            chain.held_max = h

    def release_holder(self, chain: Chain, h: int, was_extender: bool) -> int:
        """Drop one hold of [0, h); blocks nobody else holds go back to the queue (tail first).
        Returns the number of blocks freed."""
        if was_extender:
            chain.last_extender = chain.extender  # its blocks past the shared part are its own tokens
            chain.extender = None
            chain.cached = max(chain.cached, h)
        elif h > 0:
            c = chain.holders.get(h, 0) - 1
            if c > 0:
                chain.holders[h] = c
            else:
                chain.holders.pop(h, None)
        if h <= 0:
            return 0
        new_max = max(chain.holders) if chain.holders else 0
        if chain.extender is not None:
            new_max = max(new_max, self.ext_blocks(chain.extender, chain))
        chain.held_max = max(chain.holders) if chain.holders else 0
        if h <= new_max:
            return 0
        run = [chain, new_max, h]
        self.queue.append(run)
        chain.runs.append(run)
        self.free += h - new_max
        return h - new_max

    def release_anonymous(self, n: int) -> None:
        if n > 0:
            self.queue.append([None, 0, n])
            self.free += n

    def check(self) -> Optional[str]:
        """Consistency of the counters (tests only): the queue's live runs sum to ``free``."""
        live = sum(max(0, r[2] - r[1]) for r in self.queue)
        if live != self.free:
            return f"queue holds {live} blocks but free = {self.free}"
        if not 0 <= self.free <= self.usable:
            return f"free = {self.free} outside [0, {self.usable}]"
        return None
