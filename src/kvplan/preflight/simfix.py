"""Fixes for a load that the configuration cannot carry, with their effect predicted by the
simulator (dry run): the same trace is simulated on the changed flags. More replicas
(``--data-parallel-size``) are simulated as one replica carrying its share of the arrivals (the
trace's arrival times stretched by the replica count), as kvplan tune does."""
from __future__ import annotations

import math
from dataclasses import replace

from ..ops.doctor.model import Fix
from .load import slo_value
from .whatif import gpu_memory_fraction, replan

HEADROOM = 0.8  # replicas are sized so each runs at <= 80% of the rate one replica sustains


def _describe(d: dict, slos) -> tuple[str, list]:
    lat = d.get("latency_s") or {}
    sat = (d.get("saturation") or {}).get("saturated")
    ttft, e2e = (lat.get("ttft") or {}).get("p99"), (lat.get("e2e") or {}).get("p99")
    text = (f"TTFT p99 {ttft:.2f} s, E2E p99 {e2e:.2f} s" if ttft is not None and e2e is not None else "no latency")
    text += ", saturated" if sat else ", keeps up"
    nums: list = [("ttft_p99_s", ttft), ("e2e_p99_s", e2e), ("saturated", bool(sat))]
    if slos:
        from .load import from_sim

        run = from_sim(d, "", None)
        met = []
        for s in slos:
            v = slo_value(run, s.key)
            ok = s.met(v)
            met.append(f"{s.key} {'met' if ok else 'MISSED'}")
            nums.append((f"slo_{s.key}_met", ok))
        text += "; " + ", ".join(met)
    return text, nums


def simulated_fixes(req, plan_result, trace, sim_dict: dict, slos, profile=None) -> list[Fix]:
    from ..sim import simulate

    out: list[Fix] = []
    sat = sim_dict.get("saturation") or {}
    offered, sustainable = sat.get("offered_rate"), sat.get("max_sustainable_rate_estimate")
    dp = plan_result.parallel.data_parallel_size
    candidates: list[tuple[str, dict, int, str]] = []
    if offered and sustainable and sustainable > 0:
        k = max(2, math.ceil(offered / (HEADROOM * sustainable)))
        candidates.append((f"--data-parallel-size {dp * k}", {}, k, "hardware"))
    tp2 = plan_result.parallel.tensor_parallel_size * 2
    if req.model.num_attention_heads % tp2 == 0:
        candidates.append((f"--tensor-parallel-size {tp2}", {"tensor_parallel_size": tp2}, 1, "hardware"))
    for change, flags, replicas, cost in candidates:
        r = replan(req, **flags)
        if r is None or not r.startup.ok:
            continue
        req_c = replace(req, **flags)
        tr = trace if replicas == 1 else replace(
            trace, requests=tuple(replace(x, arrival_s=x.arrival_s * replicas) for x in trace.requests),
            source=f"{trace.source}; one of {replicas} replicas")
        try:
            d = simulate(req_c, tr, plan_result=r, profile=profile).to_dict()
        except Exception as exc:  # a fix we cannot predict is not proposed
            if type(exc).__name__ in ("KeyboardInterrupt", "SystemExit"):
                raise
            continue
        text, nums = _describe(d, slos)
        gpus = r.parallel.gpus_per_replica * dp * replicas
        prefix = (f"{replicas * dp} replicas, {offered / replicas:.2f} req/s each" if replicas > 1 else
                  f"{r.parallel.gpus_per_replica} GPUs per replica")
        mem = f"; GPU memory {gpu_memory_fraction(r):.1%}" if r.flags.device == "cuda" else ""
        out.append(Fix(change, f"simulated: {prefix} ({gpus} GPUs in all): {text}{mem}", cost,
                       tuple(nums) + (("gpus", gpus),), basis="simulated (kvplan.sim on the same trace)"))
    # the fix that meets every SLO and keeps up first, then the rest in the order tried
    def good(f: Fix) -> bool:
        n = dict(f.numbers)
        return not n.get("saturated") and all(v for k, v in n.items() if k.startswith("slo_"))

    def met(f: Fix) -> int:
        return sum(1 for k, v in f.numbers if k.startswith("slo_") and v)

    return sorted(out, key=lambda f: (not good(f), bool(dict(f.numbers).get("saturated")), -met(f),
                                      dict(f.numbers).get("gpus", 0)))


def attach(check, fixes: list[Fix]):
    """The check with the simulated fixes in front of its own."""
    if not fixes:
        return check
    return replace(check, fixes=tuple(fixes) + tuple(check.fixes))


def needs_sim_fix(check) -> bool:
    return check.status == "fail" and (check.id == "load_queue" or check.id.startswith("slo_"))


__all__ = ["simulated_fixes", "attach", "needs_sim_fix"]
