"""Fixes for a load that the configuration cannot carry, with their effect predicted by the
simulator (dry run): the same trace is simulated on the changed flags. The replicas a load needs
come from the capacity answer (:func:`kvplan.sim.capacity.replicas_needed`: the fewest replicas
that carry it within the SLO behind the load balancer, every replica simulated), the one
``tune --gpus auto``, ``simulate --find-saturation`` and the page give: a total
(``--data-parallel-size N``), never a multiple of the configured one."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ..ops.doctor.model import Fix
from .load import slo_value
from .whatif import gpu_memory_fraction, replan

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


def simulated_fixes(req, plan_result, trace, sim_dict: dict, slos, profile=None, opts=None,
                    tokenizer=None) -> list[Fix]:
    from ..sim import simulate

    out: list[Fix] = []
    dp = plan_result.parallel.data_parallel_size
    candidates: list[tuple[str, dict, int, str]] = []
    sizing = replicas_fix(req, plan_result, slos, opts, tokenizer, profile)
    if sizing is not None:
        out.append(sizing)
    tp2 = plan_result.parallel.tensor_parallel_size * 2
    if req.model.num_attention_heads % tp2 == 0:
        candidates.append((f"--tensor-parallel-size {tp2}", {"tensor_parallel_size": tp2}, 1, "hardware"))
    for change, flags, replicas, cost in candidates:
        r = replan(req, **flags)
        if r is None or not r.startup.ok:
            continue
        req_c = replace(req, **flags)
        tr = trace
        try:
            d = simulate(req_c, tr, plan_result=r, profile=profile).to_dict()
        except Exception as exc:  # a fix we cannot predict is not proposed
            if type(exc).__name__ in ("KeyboardInterrupt", "SystemExit"):
                raise
            continue
        text, nums = _describe(d, slos)
        gpus = r.parallel.gpus_per_replica * dp
        prefix = f"{r.parallel.gpus_per_replica} GPUs per replica"
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


def replicas_fix(req, plan_result, slos, opts, tokenizer, profile=None) -> Optional[Fix]:
    """``--data-parallel-size N``: the fewest replicas that carry the target QPS (and the load
    test's rate) within the SLO, from the log's lengths, behind the load balancer."""
    if opts is None or not opts.requests or opts.target_qps is None:
        return None
    from ..sim.capacity import Prober, as_workload, replicas_needed
    from ..traffic.trace import trace_maker

    from ..slo import parse_slo

    make = trace_maker(rate=opts.target_qps, requests=opts.requests, tokenizer=tokenizer)
    make = replace(make, max_tokens=opts.max_tokens, estimate=opts.estimate)
    if not any(s.key == "error_rate" for s in slos):
        # load_errors' own rule: length refusals up to 1 - percentile of the requests
        slos = tuple(slos) + parse_slo(f"error_rate={round(1 - opts.percentile / 100, 6)}")
    pb = Prober(replace(req, data_parallel_size=1), as_workload(make), slo=slos, profile=profile)
    per = plan_result.parallel.gpus_per_replica
    target = replicas_needed(req, None, opts.target_qps, prober=pb)
    if not target.get("replicas"):
        return None
    load = replicas_needed(req, None, opts.load_rate, prober=pb) if opts.load_factor != 1 else target
    n, m = target["replicas"], load.get("replicas")
    lb = pb.rule(2).to_dict()
    text = (f"sized: {n} replicas ({n * per} GPUs) carry the target {opts.target_qps:g} req/s within the SLO"
            + (f"; {m} ({m * per} GPUs) the load test's {opts.load_rate:g}" if m else
               f"; no fleet carries the load test's {opts.load_rate:g}") +
            f" (load balancer {lb['name']}; ceiling {target['ceiling_per_replica_rps']:.3g} req/s per replica)")
    nums = (("replicas_for_target", n), ("gpus_for_target", n * per), ("replicas_for_load", m),
            ("gpus_for_load", m * per if m else None), ("saturated", False), ("gpus", (m or n) * per))
    from ..hardware.prices import fleet_cost, load_prices

    prices = load_prices(opts.gpu_price)
    reqs = pb.workload.lengths()
    mean_out = sum(r.output_tokens for r in reqs) / len(reqs) if reqs else None
    cost = fleet_cost(prices, plan_result.flags.gpu, n * per, opts.target_qps, None, mean_out)
    if cost.get("usd_per_hour") is not None:
        text += (f"; ${cost['usd_per_hour']:,.2f}/hour, ${cost['usd_per_million_output_tokens']:,.3f} per million "
                 "output tokens at the target")
        nums += (("usd_per_hour", cost["usd_per_hour"]),
                 ("usd_per_million_output_tokens", cost["usd_per_million_output_tokens"]))
    for s in slos:
        if s.key != "error_rate":
            nums += ((f"slo_{s.key}_met", True),)
    return Fix(f"--data-parallel-size {m or n}", text, "hardware", nums, basis="simulated (kvplan.sim.capacity)")


def attach(check, fixes: list[Fix]):
    """The check with the simulated fixes in front of its own."""
    if not fixes:
        return check
    return replace(check, fixes=tuple(fixes) + tuple(check.fixes))


def needs_sim_fix(check) -> bool:
    return check.status == "fail" and (check.id == "load_queue" or check.id.startswith("slo_"))


__all__ = ["simulated_fixes", "attach", "needs_sim_fix"]
