"""Small formatting helpers shared by the plan renderers."""
from __future__ import annotations

from ..memory.result import PlanResult

GIB = 1 << 30


def gib(value: float) -> str:
    return f"{value:,.2f} GiB"


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{int(n):,} B"


def memory_segments(r: PlanResult) -> list[tuple[str, float]]:
    """The per-GPU memory stack, bottom to top, in GiB (what the bar shows)."""
    m = r.memory
    reserved_outside = max(m.total_gib_per_gpu - m.requested_gib, 0.0)
    kv = m.kv_cache_used_gib
    unused = max(m.requested_gib - m.non_kv_gib - kv, 0.0) if m.source == "estimate" else 0.0
    return [
        ("weights", m.weights_gib_per_gpu),
        ("non-torch", m.non_torch_gib),
        ("activation peak", m.activation_peak_gib),
        ("CUDA graphs", m.cudagraph_gib),
        ("KV cache", kv),
        ("unused budget", unused),
        ("outside budget (1 - utilization)", reserved_outside),
    ]


def headline(r: PlanResult) -> str:
    p = r.parallel
    gpus = f"{p.gpus_per_replica}× {r.flags.gpu}" if p.gpus_per_replica > 1 else r.flags.gpu
    par = f"TP {p.tensor_parallel_size}" + (f" × PP {p.pipeline_parallel_size}" if p.pipeline_parallel_size > 1 else "")
    dp = f", DP {p.data_parallel_size}" if p.data_parallel_size > 1 else ""
    return f"{r.model.id} on {gpus} ({par}{dp}) — vLLM {r.vllm_semantics} rules ({r.engine})"
