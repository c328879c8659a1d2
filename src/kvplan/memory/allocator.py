"""What PyTorch's CUDA caching allocator counts for a sequence of allocations.

vLLM measures weights as ``torch.cuda.memory_allocated`` before and after loading (its
``DeviceMemoryProfiler``: ``empty_cache``, ``reset_peak_memory_stats``, ``max_memory_allocated``;
read in 0.9.0.1, 0.10.1.1 and 0.19.0), and that statistic counts *blocks*, not the bytes a tensor
asked for. The rules, read in PyTorch's ``c10/cuda/CUDACachingAllocator.cpp`` (main branch; the
same constants and split test in the older 2.x copies found; ``expandable_segments``, which would
split every block, is off by default and vLLM 0.19.0 does not set it):

* every request is rounded up to 512 bytes; up to 1 MiB it is served from 2 MiB "small" segments,
  split exactly, so nothing more is counted;
* a larger request takes the smallest cached free block that fits, else a new segment:
  20 MiB below 10 MiB (``kLargeBuffer``), else the request rounded up to 2 MiB (``kRoundLarge``);
* the block is split only when more than 1 MiB would remain (``should_split``: ``remaining >
  kSmallSize``); otherwise the whole block is handed out and counted as allocated.

So a 31.5 MiB q/k/v weight (Qwen2.5-7B) counts 32 MiB and a 259 MiB gate/up 260 MiB, while
Llama's power-of-two shapes count exactly: that is the 0.06 GiB by which "Model loading took"
exceeds Qwen2.5-7B's parameters (14.2488 GiB logged, 14.19 GiB of parameters), and 0.08 / 0.12
GiB for Qwen2.5-72B at TP 2 / TP 4. Free blocks left by splits are reused best-fit, as the
allocator does; temporaries freed during loading are not modelled (each moves a count by at most
1 MiB).
"""
from __future__ import annotations

import bisect
import functools
from typing import Iterable

MIN_BLOCK_BYTES = 512  # kMinBlockSize
SMALL_REQUEST_BYTES = 1 << 20  # kSmallSize: the largest "small" request, and the split threshold
LARGE_BUFFER_BYTES = 20 << 20  # kLargeBuffer: the segment for 1-10 MiB requests
MIN_LARGE_ALLOC_BYTES = 10 << 20  # kMinLargeAlloc
ROUND_LARGE_BYTES = 2 << 20  # kRoundLarge


def _rounded(nbytes: int) -> int:
    return max(MIN_BLOCK_BYTES, -(-nbytes // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES)


def _segment_bytes(nbytes: int) -> int:
    if nbytes < MIN_LARGE_ALLOC_BYTES:
        return LARGE_BUFFER_BYTES
    return -(-nbytes // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES


def allocated_bytes(requests: Iterable[int]) -> int:
    """``torch.cuda.memory_allocated`` after making ``requests`` (bytes, in order, none freed) on a
    fresh allocator."""
    free_large: list[int] = []  # sizes of cached free blocks of the large pool, sorted
    total = 0
    for request in requests:
        size = _rounded(int(request))
        if size <= SMALL_REQUEST_BYTES:
            total += size
            continue
        at = bisect.bisect_left(free_large, size)
        block = free_large.pop(at) if at < len(free_large) else _segment_bytes(size)
        if block - size > SMALL_REQUEST_BYTES:
            bisect.insort(free_large, block - size)
            total += size
        else:
            total += block
    return total


def rounding_bytes(requests: Iterable[int]) -> int:
    """How much more than the requested bytes the allocator counts for ``requests``."""
    return _rounding_bytes(tuple(int(r) for r in requests))


@functools.lru_cache(maxsize=256)
def _rounding_bytes(requests: tuple[int, ...]) -> int:
    # a tune sweep plans the same weights (hundreds of tensors) once per configuration and budget
    return allocated_bytes(requests) - sum(requests)
