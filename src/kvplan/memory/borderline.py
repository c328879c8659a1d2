"""When a verdict is within the estimate's own error.

Without a measurement kvplan estimates vLLM's "Available KV cache memory". The band was set on the
9 public start-up logs ``benchmarks/plan_accuracy.py`` had then (known GPU and flags): a median
absolute error of 0.50 GiB, 2.1% of the GPU's memory. On its 86 validation runs now the median is
0.27 GiB and the 90th percentile 0.65 GiB, so the band sits between the two (README). A verdict
whose KV margin (available − what one max_model_len request needs) is smaller than that band,
either way, is **borderline**: the sign of the margin is not known. The band is the larger of the
two medians for the GPU at hand. A measured KV memory (``--kv-cache-memory``, ``--from-log``)
makes every figure exact, and it is what settles a borderline verdict.
"""
from __future__ import annotations

GIB = 1 << 30
MEDIAN_ERROR_GIB = 0.50
MEDIAN_ERROR_SHARE = 0.021
BAND_SOURCE = ("0.50 GiB or 2.1% of GPU memory, whichever is larger: between the estimate's median (0.27 GiB) "
               "and 90th-percentile (0.65 GiB) error on 86 public start-up runs (benchmarks/plan_accuracy.py)")
SETTLE = ("measure it: start vLLM once and give its start-up log (--from-log), or the KV memory it logs as "
          "'Available KV cache memory' (--kv-cache-memory); or fix it on both sides with vLLM's "
          "--kv-cache-memory-bytes")


def error_band_bytes(gpu_memory_bytes: int) -> int:
    return int(max(MEDIAN_ERROR_GIB * GIB, MEDIAN_ERROR_SHARE * gpu_memory_bytes))


def is_borderline(margin_bytes: int, gpu_memory_bytes: int) -> bool:
    return abs(margin_bytes) <= error_band_bytes(gpu_memory_bytes)
