"""Markdown rendering of ``kvplan tune`` (for PRs and capacity notes)."""
from __future__ import annotations

from ..tune.search import TuneResult
from ._markdown import cell, code, fence
from .tune_common import config_cell, headline, pruned_text, seconds, slo_cell, verdict


def render_markdown(r: TuneResult, top: int = 10) -> str:
    if _is_sizing(r):
        return _sizing_markdown(r.to_dict())
    out = ["# kvplan tune", "", cell(headline(r)), "", f"**{cell(verdict(r))}**", ""]
    w = r.winner
    if w is not None:
        out += ["```bash", fence(w.serve_command), "```", ""]
    out += [cell(pruned_text(r)), ""]
    if r.rows:
        out += _table(r, top)
    if r.pruned.examples:
        out += ["", "## Pruned by the memory plan", ""]
        out += [f"- `{code(k)}` ({dict(r.pruned.by_reason).get(k, 0)}): {cell(v)}" for k, v in r.pruned.examples]
    if r.notes:
        out += ["", *[f"- {cell(n)}" for n in r.notes]]
    from .sim_common import clock_line

    for gpu, clock in r.clock.items():
        line = clock_line({"clock": clock} if clock.get("kernel_tables") else
                          {"source": clock.get("source", ""), "fit": clock.get("model") == "calibrated profile"})
        out.append(f"- clock on {cell(gpu)}: {cell(line)}")
    return "\n".join(out).rstrip() + "\n"


def _table(r: TuneResult, top: int) -> list[str]:
    lat = r.pareto_latency
    out = ["| # | configuration | seqs | batched | len | util | KV | good req/s/GPU | out tok/s/GPU | "
           "TTFT p99 | TPOT p99 | E2E p99 | preempt | SLO | Pareto |",
           "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for row in r.rows[:top]:
        f = row.flags
        out.append(f"| {row.rank} | {cell(config_cell(row))} | {f['max_num_seqs']} | {f['max_num_batched_tokens']} | "
                   f"{f['max_model_len']} | {f['gpu_memory_utilization']:g} | {cell(f['kv_cache_dtype'])} | "
                   f"{row.goodput_per_gpu:.3g} | {row.throughput['output_tokens_per_s_per_gpu']:,.0f} | "
                   f"{seconds(row.metric('ttft_p99'))} | {seconds(row.metric('tpot_p99'))} | "
                   f"{seconds(row.metric('e2e_p99'))} | {row.preemptions} | {cell(slo_cell(row))} | "
                   f"{'yes' if row.pareto else ''} |")
    if len(r.rows) > top:
        out.append(f"\n{len(r.rows) - top} more configuration(s) in the JSON output.")
    out += ["", f"## Pareto front (output tokens/s per GPU against {lat})", ""]
    by_rank = {row.rank: row for row in r.rows}
    for rank in r.pareto:
        row = by_rank[rank]
        out.append(f"- #{rank} {cell(row.label)}: {row.throughput['output_tokens_per_s_per_gpu']:,.0f} tok/s/GPU, "
                   f"{lat} {seconds(row.metric(lat))}")
    return out


def _sizing_markdown(d: dict) -> str:
    from . import sizing_common as sc

    out = ["# kvplan tune: how many GPUs", "", cell(sc.headline(d)), "", f"**{cell(sc.verdict(d))}**", "",
           "| " + " | ".join(sc.HEADERS) + " |", "|" + "---|" * len(sc.HEADERS)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in sc.rows(d)]
    out += ["", *[f"- {cell(n)}" for n in d.get("notes") or ()]]
    return "\n".join(out).rstrip() + "\n"


def _is_sizing(r) -> bool:
    from ..tune.sizing import Sizing

    return isinstance(r, Sizing)
