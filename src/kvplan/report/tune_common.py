"""Formatting shared by the ``kvplan tune`` renderers (table, Markdown): one wording, one rounding."""
from __future__ import annotations

import math
from typing import Optional

from ..tune.search import TuneResult, TuneRow


def seconds(x: Optional[float]) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x * 1e3:,.0f} ms" if x < 1 else f"{x:,.2f} s"


def slo_cell(row: TuneRow) -> str:
    if not row.checks:
        return "no SLO"
    if row.meets_slo:
        return "meets"
    failed = [c for c in row.checks if not c.passed]
    if any(c.name == "not_saturated" for c in failed):
        return "saturated"
    others = [c for c in failed if c.name != "saturation_judged"]
    if not others:
        return "unjudged (trace too short)"
    worst = max(others, key=lambda c: c.ratio)
    if worst.value is None:
        return f"{worst.name}: no data"
    return f"{worst.name} ×{worst.ratio:.2f}" if not math.isinf(worst.ratio) else f"{worst.name} missed"


def config_cell(row: TuneRow) -> str:
    f = row.flags
    par = f"TP{f['tensor_parallel_size']}" + (f" PP{f['pipeline_parallel_size']}" if f["pipeline_parallel_size"] > 1 else "")
    return f"{f['gpu']} ×{row.gpus} {par} DP{f['data_parallel_size']}"


def headline(r: TuneResult) -> str:
    slo = "SLO " + ", ".join(f"{k}={_limit(k, v)}" for k, v in r.slos) if r.slos else "no SLO given"
    return (f"{r.base.get('model', '?')}: {r.trace['requests']:,} requests ({r.trace['source']}); {slo}; "
            f"objective {r.objective}")


def _limit(key: str, v: float) -> str:
    if key in ("error_rate", "goodput_ratio"):
        return f"{v:g}"
    return seconds(v)


def pruned_text(r: TuneResult) -> str:
    p = r.pruned
    parts = ", ".join(f"{k} {n}" for k, n in p.by_reason) or "none"
    dup = f"; {p.duplicates} duplicate(s) of listed flags simulated once" if p.duplicates else ""
    skip = f"; {r.skipped} with more GPUs skipped (cannot beat the winner)" if r.skipped else ""
    reuse = f", {r.reused} ranked on an identical run (limits never reached)" if r.reused else ""
    return (f"{r.combinations} combination(s): {p.total} pruned before simulation ({parts}){dup}; "
            f"{r.simulated} simulated{reuse}{skip}")


def verdict(r: TuneResult) -> str:
    w = r.winner
    if w is not None:
        return (f"Best: {config_cell(w)}, {w.goodput_per_gpu:.3g} good req/s per GPU, "
                f"{r.pareto_latency} {seconds(w.metric(r.pareto_latency))}")
    c = r.closest
    if c is None:
        return "No configuration could be simulated (all pruned)."
    return f"No configuration meets the SLOs. Closest: {config_cell(c)} ({c.label}): {slo_cell(c)}"


def title(r: TuneResult) -> str:
    if r.winner is not None:
        return "OK"
    return "NO CONFIGURATION STARTS" if not r.rows else "NO CONFIGURATION MEETS THE SLO"


def merge_alike(rows, printed) -> list[tuple]:
    """Rows that print alike in every column of ``printed`` (cell functions) merged into the first:
    ``[(first, [the others], "what differs")]`` in rank order."""
    groups: dict[tuple, list] = {}
    order = []
    for row in rows:
        key = tuple(str(fn(row)) for fn in printed)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(row)
    out = []
    for key in order:
        first, *alike = groups[key]
        differs = []
        for flag in sorted(first.flags):
            values = []
            for x in [first, *alike]:
                if x.flags[flag] not in values:
                    values.append(x.flags[flag])
            if len(values) > 1:
                differs.append(f"{flag} " + "/".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values))
        out.append((first, alike, "; ".join(differs) or "nothing printed"))
    return out
