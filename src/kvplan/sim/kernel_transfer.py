"""How fast a GPU without a kernel table runs against the table it borrows, from its published
kernel measurements (``kvplan/hardware/kernel_transfer.json``, rebuilt by
``scripts/build_kernel_transfer.py``).

A GPU with no AIConfigurator table (the MI300X) is timed with another GPU's measured efficiencies
at its own catalog peaks (:func:`kvplan.sim.kernels.nearest_measured`). Those efficiencies say how
close vLLM's kernels come to the *reference* GPU's peaks; another vendor's libraries and chips come
closer or not. Where public kernel-level measurements of the GPU exist, each one is compared with
what the reference table predicts for the same kernel at the GPU's peaks, and the medians become
shares of the borrowed rates:

* ``compute[dtype]``: compute-bound GEMMs (the measured time against the table's, per dtype);
* ``gemm_memory``: memory-bound GEMMs (decode's skinny GEMMs, m ≤ 32);
* ``stream``: every other byte the clock moves (KV reads, elementwise), as the GPU's stream
  bandwidth's share of its peak over the reference GPU's, measured by the same harness;
* ``allreduce_large``: all-reduces of ``ALLREDUCE_LARGE_BYTES`` and more (bandwidth-bound, NCCL or
  RCCL in vLLM), the GPU's bus bandwidth over the reference GPU's in the same harness; below
  ``ALLREDUCE_CUSTOM_BYTES`` vLLM runs its own custom all-reduce, unmeasured here, at the reference
  table's speed, and the share ramps in between (log of the size).

Nothing here is fitted to an end-to-end run: the shares are kernel measurements, and the
development and validation runs on the GPU score them.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

TRANSFER_FILE = Path(__file__).resolve().parents[1] / "hardware" / "kernel_transfer.json"
#: a GEMM with at most this many rows reads its weights once and waits on memory (decode)
SKINNY_ROWS = 32
#: all-reduce sizes: vLLM's custom all-reduce below (its default max_size, 8 MiB, with headroom for
#: the platforms that go further), the collective library's bandwidth-bound regime above
ALLREDUCE_CUSTOM_BYTES = 2 * 2**20
ALLREDUCE_LARGE_BYTES = 16 * 2**20


@dataclass(frozen=True)
class Transfer:
    """One GPU's shares of the rates its reference table's efficiencies give at its peaks."""

    gpu: str
    reference: str
    compute: tuple[tuple[str, float], ...]  # (GEMM dtype, share), bfloat16 first
    gemm_memory: float
    stream: float
    allreduce_large: float
    sources: tuple[str, ...]

    def compute_share(self, dtype: str) -> float:
        shares = dict(self.compute)
        return shares.get("fp8" if dtype.startswith("fp8") else dtype, shares.get("bfloat16", 1.0))

    def describe(self) -> str:
        compute = ", ".join(f"{dt} GEMMs {share:.2f}" for dt, share in self.compute)
        return (f"{self.reference}'s efficiencies at {self.gpu}'s peaks, scaled to {self.gpu}'s published kernel "
                f"measurements ({compute}, memory-bound GEMMs {self.gemm_memory:.2f}, stream {self.stream:.2f}, "
                f"all-reduces of 16 MiB and more {self.allreduce_large:.2f} of the borrowed rate; "
                "kvplan/hardware/kernel_transfer.json)")

    def allreduce_factor(self, nbytes: float) -> float:
        """How much longer an all-reduce of ``nbytes`` takes than the reference table says: 1 in
        the custom all-reduce's range, 1 / allreduce_large from ALLREDUCE_LARGE_BYTES, log-linear
        between (no step in the clock at a threshold nobody measured)."""
        if nbytes <= ALLREDUCE_CUSTOM_BYTES:
            return 1.0
        w = min(1.0, math.log(nbytes / ALLREDUCE_CUSTOM_BYTES) / math.log(ALLREDUCE_LARGE_BYTES / ALLREDUCE_CUSTOM_BYTES))
        return self.allreduce_large ** -w


@lru_cache(maxsize=1)
def _rows() -> dict:
    return json.loads(TRANSFER_FILE.read_text(encoding="utf-8"))["gpus"]


@lru_cache(maxsize=None)
def transfer_for(gpu_name: str) -> Optional[Transfer]:
    """The GPU's shares, or None where it has a table of its own or no published measurements."""
    row = _rows().get(gpu_name)
    if row is None:
        return None
    d = row["derived"]
    compute = tuple(sorted(d["compute"].items(), key=lambda kv: kv[0] != "bfloat16"))
    return Transfer(gpu_name, row["reference_table"], compute, d["gemm_memory"], d["stream"], d["allreduce_large"],
                    tuple(s["url"] for s in row["sources"].values()))


def derive(row: dict, gpu, reference_gpu) -> dict:
    """The shares of one row of the file from its measurements (the build script's rule, also
    what the tests recompute): medians of measured-over-predicted rates."""
    from . import kernels as K

    table = K.load_table(row["reference_table"])
    at_peaks = K.gemm_table_for(table, gpu)
    compute: dict[str, list[float]] = {}
    memory: list[float] = []
    for g in row["gemm"]:
        m, n, k, dtype = g["m"], g["n"], g["k"], g["dtype"]
        measured_s = g["seconds"] if "seconds" in g else 2.0 * m * n * k / (g["tflops"] * 1e12)
        share = at_peaks.time(m, n, k, dtype) / measured_s
        (memory if m <= SKINNY_ROWS else compute.setdefault(dtype, [])).append(share)
    stream = row["stream_tb_s"]
    gpu_share = statistics.mean(stream["gpu"]) * 1e3 / gpu.bandwidth_gbs
    ref_share = statistics.mean(stream["reference"]) * 1e3 / reference_gpu.bandwidth_gbs
    ar = row["allreduce_busbw_gb_s"]
    large = [g / r for size, g, r in zip(ar["message_bytes"], ar["gpu"], ar["reference"]) if size >= ALLREDUCE_LARGE_BYTES]
    return {"compute": {dt: round(statistics.median(v), 3) for dt, v in sorted(compute.items())},
            "gemm_memory": round(statistics.median(memory), 3),
            "stream": round(gpu_share / ref_share, 3),
            "allreduce_large": round(statistics.median(large), 3),
            "points": {"compute": {dt: len(v) for dt, v in sorted(compute.items())}, "gemm_memory": len(memory),
                       "allreduce_large": len(large)}}
