"""Markdown rendering of ``kvplan doctor`` (for incident notes and PRs)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ._markdown import cell, code, fence

if TYPE_CHECKING:  # the result type only: report sits below ops (tests/test_layering.py)
    from ..ops.doctor.model import DoctorReport


def _num(v) -> str:
    return "" if v is None else f"{v:g}"


def render_markdown(r: DoctorReport) -> str:
    out = ["# kvplan doctor", "", f"{len(r.files)} file(s), {r.lines_read:,} lines, {len(r.runs)} run(s), "
           f"{len(r.findings)} finding(s).", ""]
    out += [f"- {cell(name)}: no vLLM log lines found" for name in r.no_vllm_lines] + ([""] if r.no_vllm_lines else [])
    if r.runs:
        out += ["| run | vLLM | model | max_model_len | KV GiB | KV tokens | concurrency |", "|---|---|---|---:|---:|---:|---:|"]
        for run in r.runs:
            out.append(f"| {cell(run.file)}:{run.first_line}-{run.last_line} | {cell(run.vllm_version or '?')} | "
                       f"{cell(run.model or '?')} | {run.max_model_len or ''} | "
                       f"{'' if run.available_kv_gib is None else run.available_kv_gib} | {run.kv_cache_tokens or ''} | "
                       f"{run.max_concurrency or ''} |")
        out.append("")
        out += [f"- fixes for {cell(run.file)}:{run.first_line}: {cell(run.fix_basis)}" for run in r.runs if run.fix_basis]
        out.append("")
    if r.history:
        out += ["| deployment | models | range | requests | preemptions | peak KV | notes |",
                "|---|---|---|---:|---:|---:|---|"]
        for h in r.history:
            t = h.get("totals", {})
            kv = t.get("kv_cache_usage_max")
            out.append(f"| {cell(h['job'])}/{cell(h['instance'])} | {cell(', '.join(h['model_names']))} | "
                       f"{h['start']} – {h['end']} | {_num(t.get('requests'))} | {_num(t.get('preemptions'))} | "
                       f"{'' if kv is None else f'{kv:.1%}'} | {cell('; '.join(h.get('notes', [])))} |")
        out.append("")
    for f in r.findings:
        out += [f"## `{f.id}` ({f.severity})", "", cell(f.title), ""]
        nums = {k: v for k, v in f.to_dict()["numbers"].items() if v is not None}
        if nums:
            out += ["Numbers: " + ", ".join(f"{k} = {cell(v)}" for k, v in nums.items()), ""]
        out += ["Evidence:", "", "```text"] + [fence(f"{e.where}: {e.text.strip()[:300]}")
                                               for e in f.evidence] + ["```", ""]
        if f.fixes:
            out += ["| # | change | cost | predicted effect | basis |", "|---:|---|---|---|---|"]
            out += [f"| {n} | `{code(x.change)}` | {x.cost}{(': ' + cell(x.price)) if x.price else ''} | "
                    f"{cell(x.effect)}{(' (assumes ' + cell(x.premise) + ')') if x.premise else ''} | {cell(x.basis)} |"
                    for n, x in enumerate(f.fixes, 1)]
            out.append("")
        out += [f"- collect next: {cell(c)}" for c in f.collect_next]
    out += [f"- collect next: {cell(c)}" for c in r.collect_next]
    return "\n".join(out).rstrip() + "\n"
