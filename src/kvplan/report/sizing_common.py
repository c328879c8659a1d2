"""``kvplan tune --gpus auto`` (the sizing answer): rows and wording shared by the table, Markdown
and the page."""
from __future__ import annotations

from typing import Any, Optional


def money(x: Optional[float], fmt: str = "${:,.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def ms(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:,.0f} ms" if x < 1 else f"{x:,.2f} s"


def headline(d: dict) -> str:
    lb = d.get("load_balancer") or {}
    return (f"{d['target_rate']:g} req/s; objective {d['objective']}; load balancer {lb.get('name', '?')} "
            f"({lb.get('text', '')}); fleets up to {d['max_gpus']} GPUs")


def verdict(d: dict) -> str:
    w = d.get("winner")
    if not w:
        return f"No fleet of up to {d['max_gpus']} GPUs carries {d['target_rate']:g} req/s within the SLO."
    cost = w.get("cost") or {}
    price = f", {money(cost.get('usd_per_hour'))}/hour" if cost.get("usd_per_hour") is not None else ""
    return (f"Best: {w['gpus']} x {w['gpu']} ({w['replicas']} replicas of {_par(w)}){price}; "
            f"capacity {_cap(w)}")


def _par(s: dict) -> str:
    f = s["flags"]
    return f"TP{f['tensor_parallel_size']}" + (f" PP{f['pipeline_parallel_size']}" if f["pipeline_parallel_size"] > 1 else "")


def _cap(s: dict) -> str:
    c = s.get("capacity") or {}
    if c.get("max_rate") is None:
        return "-"
    return f"{c['max_rate']:.3g} req/s ± {c['noise']:.0%}" + ("" if c.get("judged", True) else " (lower bound)")


def rows(d: dict, which: str = "per_gpu_type") -> list[list[str]]:
    """[GPU type, GPUs, replicas x parallel, flags, capacity, per GPU, TTFT p99 at target, $/h, $/M tok]"""
    out = []
    for s in d.get(which) or ():
        f = s["flags"]
        cost = s.get("cost") or {}
        at = s.get("at_target") or {}
        cap = s.get("capacity") or {}
        out.append([s["gpu"], str(s["gpus"]) if s.get("gpus") else "-",
                    f"{s['replicas']} x {_par(s)}" if s.get("replicas") else f"- ({_par(s)})",
                    f"seqs={f['max_num_seqs']} kv={f['kv_cache_dtype']} util={f['gpu_memory_utilization']:g}",
                    _cap(s), "-" if cap.get("per_gpu") is None else f"{cap['per_gpu']:.3g}",
                    ms(at.get("ttft_p99")), money(cost.get("usd_per_hour")),
                    money(cost.get("usd_per_million_output_tokens"), "${:,.3f}"),
                    "" if s.get("gpus") else s.get("reason", "")])
    return out


HEADERS = ("GPU type", "GPUs", "replicas", "flags", "capacity at SLO", "req/s/GPU", "TTFT p99", "$/hour",
           "$/M out tok", "why not")


def to_dict(result: Any) -> dict:
    return result.to_dict() if hasattr(result, "to_dict") else dict(result)
