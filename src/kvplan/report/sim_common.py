"""Shared pieces of the ``kvplan simulate`` renderers: the rows every view shows, computed from the
result dict only (renderers never recompute metrics)."""
from __future__ import annotations

from typing import Optional

LAT_ROWS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"), ("queue", "queue"))
LAT_COLS = ("p50", "p90", "p95", "p99", "p999", "max", "mean")


def duration(x: Optional[float]) -> str:
    """A latency with its unit: milliseconds below 1 s, seconds above (saturated queues reach
    thousands of seconds and must still read at a glance)."""
    if x is None:
        return "-"
    if x < 1:
        return f"{x * 1e3:,.1f} ms"
    if x < 10:
        return f"{x:.2f} s"
    return f"{x:,.1f} s" if x < 100 else f"{x:,.0f} s"


def _row_unit(values: list[Optional[float]]) -> tuple[str, float, str]:
    """One unit per latency row (ms, or s when the row reaches 10 s), so columns stay narrow."""
    top = max((v for v in values if v is not None), default=0.0)
    unit, scale = ("s", 1.0) if top >= 10 else ("ms", 1e3)
    return unit, scale, "{:,.0f}" if top * scale >= 100 else "{:,.1f}"


def count(n: int) -> str:
    return f"{n:,}" if n < 100_000 else (f"{n / 1e3:,.0f}k" if n < 10_000_000 else f"{n / 1e6:,.1f}M")


def num(x, fmt: str = "{:,.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _gpus(c: dict) -> str:
    """``4× H100 (DP 4 replicas × TP 1)``: the deployment's GPUs first, then the split (kvplan plan's
    title says it the same way)."""
    tp, pp, dp = c["tensor_parallel_size"], c.get("pipeline_parallel_size", 1) or 1, c.get("data_parallel_size", 1) or 1
    total = tp * pp * dp
    par = f"TP {tp}" + (f" × PP {pp}" if pp > 1 else "")
    if dp > 1:
        par = f"DP {dp} replicas × {par}"
    return (f"{total}× " if total > 1 else "") + f"{c.get('gpu')} ({par})"


def headline(d: dict) -> list[tuple[str, str]]:
    c, r, t, s = d["config"], d["requests"], d["throughput"], d["saturation"]
    rows = [
        ("model", f"{c['model']} on {_gpus(c)}"),
        ("limits", f"max_model_len {c['max_model_len']:,}, max_num_seqs {c['max_num_seqs']:,}, "
                   f"max_num_batched_tokens {c['max_num_batched_tokens']:,}"),
        ("KV cache", f"{c['num_gpu_blocks']:,} blocks x {c['block_size']} tokens, peak usage "
                     f"{num(d['kv_cache'].get('peak_usage'), '{:.1%}')}"),
        ("traffic", d["trace"]["source"] + (
            "; log records skipped: " + ", ".join(f"{k} {v:,}" for k, v in d["trace"]["skipped"].items())
            if d["trace"].get("skipped") else "")),
        ("requests", f"{r['total']:,}: {r['completed']:,} completed, {r['rejected']:,} rejected"
                     + (f", {r['unfinished']:,} unfinished" if r.get("unfinished") else "")),
        ("preemptions", f"{d['preemptions']:,} ({r.get('preempted_requests', 0):,} requests)"),
        ("throughput", f"{num(t.get('requests_per_s'))} req/s, {num(t.get('output_tokens_per_s'), '{:,.0f}')} output "
                       f"tok/s, {num(t.get('total_tokens_per_s'), '{:,.0f}')} total tok/s"),
        ("saturation", ("SATURATED: " if s.get("saturated") else "") + str(s.get("reason", "-"))
         + (f"; sustains ~{s['max_sustainable_rate_estimate']:.2f} req/s"
            if s.get("max_sustainable_rate_estimate") else "")),
        ("engine", f"{d['engine']['steps']:,} steps, mean {duration(d['engine'].get('mean_step_s'))}, "
                   f"max waiting {d['engine'].get('max_waiting', 0):,}"),
        ("step time", d["profile"].get("source", "")),
        ("clock", clock_line(d["profile"])),
    ]
    fleet = d.get("fleet")
    if fleet:
        lb = fleet["load_balancer"]
        per = fleet.get("per_replica") or []
        busiest = max(per, key=lambda r: r.get("ttft_p99_s") or 0.0, default=None)
        rows.insert(1, ("replicas", f"{fleet['replicas']} x TP{c['tensor_parallel_size']}"
                        + (f" PP{c['pipeline_parallel_size']}" if c.get("pipeline_parallel_size", 1) > 1 else "")
                        + f" = {fleet['replicas'] * c['tensor_parallel_size'] * c.get('pipeline_parallel_size', 1)} "
                        f"GPUs, load balancer {lb['name']} ({lb['text']})"))
        if busiest is not None:
            rows.insert(2, ("per replica", f"{min(r['requests'] for r in per):,}-{max(r['requests'] for r in per):,} "
                            f"requests; slowest TTFT p99 {duration(busiest.get('ttft_p99_s'))} (replica "
                            f"{busiest['replica']})"))
    search = d.get("saturation_search")
    if search:
        cap = search.get("max_rate")
        line = f"{num(cap)} req/s"
        if cap is not None and search.get("noise") is not None:
            line += (f" ± {search['noise']:.0%} ({num(search.get('per_gpu'), '{:.3f}')} per GPU; ceiling "
                     f"{num(search.get('ceiling_rps'))} req/s at overload)")
        rows.append(("capacity", f"{line}: {search.get('reason')}"))
    size = d.get("sizing")
    if size:
        if size.get("replicas"):
            rows.append(("replicas needed", f"{size['replicas']} x {size['gpus_per_replica']} GPUs = {size['gpus']} GPUs "
                                            f"for {size['target_rate']:.3g} req/s ({size.get('reason')})"))
        else:
            rows.append(("replicas needed", str(size.get("reason"))))
    return rows


def _errors(row: dict) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {row[k] * 100:.0f}%" for k in ("output_throughput", "ttft", "tpot")
                     if row.get(k) is not None)


def clock_line(profile: dict) -> str:
    """How far to trust the step times: the model, its kernel data and its measured error."""
    clock = profile.get("clock")
    if not clock:
        if profile.get("fit"):
            return f"calibrated profile ({profile.get('source', '')}): fitted to a measured run of this setup"
        return "roofline prior with assumed efficiencies: error unmeasured (calibrate on a real run)"
    v = clock.get("validation") or {}
    tables = (f"{clock.get('kernel_tables')} kernel tables (vLLM {clock.get('kernels_vllm_version')})"
              + ("" if clock.get("kernel_tables_exact", True) else " transferred to this GPU"))
    if v.get("measured"):
        trust = f"median |error| on {v.get('cases', '?')} published runs of this GPU: {_errors(v)}"
        whole = v.get("complete") or {}
        if whole.get("cases") and whole["cases"] < (v.get("cases") or 0):
            # the runs whose user view is the whole setup: the clock alone, without a pod layout or a
            # warm cache the command line does not say (benchmarks/gpu_fidelity.py, USER VIEW COMPLETENESS)
            trust += f" ({whole['cases']} of them state their whole setup: {_errors(whole)})"
        for src, row in (v.get("validation") or {}).items():
            if row.get("tpot") is not None:
                trust += f"; validation ({src}, {row.get('cases')} runs): TPOT {row['tpot'] * 100:.0f}%"
    else:
        trust = v.get("note") or "error on this GPU unmeasured"
    return f"per-operator model over {tables}; {trust}"


def latency_rows(d: dict) -> list[list[str]]:
    """``[label (unit), p50, …, mean, n]`` per metric; the unit is the row's own (ms or s)."""
    out = []
    for key, label in LAT_ROWS:
        v = d["latency_s"].get(key) or {}
        vals = [v.get(c) for c in LAT_COLS]
        unit, scale, fmt = _row_unit(vals)
        out.append([f"{label} ({unit})"] + ["-" if x is None else fmt.format(x * scale) for x in vals]
                   + [count(v.get("count", 0))])
    return out


#: the verdict's one word per state (``SimResult.state``), for the title of every renderer
VERDICT_WORDS = {"no_slo": "", "met": "SLO met", "missed": "SLO MISSED",
                 "not_judged": "SLO NOT JUDGED (trace too short)"}


def verdict_word(d: dict) -> str:
    v = d["verdict"]
    if any(c["name"] == "completed_requests" for c in v["checks"]):
        return "NO REQUEST COMPLETED"
    return VERDICT_WORDS[v.get("state") or ("no_slo" if not v["checks"] else "met" if v["passed"] else "missed")]


def check_rows(d: dict) -> list[list[str]]:
    rows = []
    for c in d["verdict"]["checks"]:
        val = c["value"]
        name = c["name"]
        status = "ok" if c["passed"] else "MISSED"
        if name in ("error_rate", "goodput_ratio"):
            shown, lim = num(val, "{:.2%}"), num(c["limit"], "{:.2%}")
        elif name == "completed_requests":
            shown, lim = f"{val:,}", f"at least {c['limit']:,}"
        elif name == "not_saturated":
            shown, lim = "saturated", "a bounded backlog"
        elif name == "saturation_judged":
            shown, lim, status = "still filling", "a judged backlog", "NOT JUDGED"
        else:
            shown, lim = duration(val), duration(c["limit"])
        rows.append([name, shown, lim, status])
    return rows


def capacity_rows(d: dict) -> list[list[str]]:
    return [[f"{r['max_model_len']:,}", num(r.get("max_concurrency")), "yes" if r["fits"] else "no",
             num(r.get("max_sustainable_qps"))] for r in d.get("capacity_boundary") or ()]
