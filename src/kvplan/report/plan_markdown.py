"""Markdown rendering of a plan (for PRs, wikis and runbooks)."""
from __future__ import annotations

from ..memory.result import PlanResult
from ._common import (
    borderline_text,
    headline,
    human_bytes,
    layout_fit_text,
    memory_segments,
    serve_flag_lines,
    run_block,
    what_if_caption,
)


def render_markdown(r: PlanResult, traffic=None) -> str:
    """The plan; ``traffic`` (a ``TrafficFit`` from ``--requests``) appends its section."""
    text = _plan_markdown(r)
    if traffic is not None:
        from .lengths_traffic import render_traffic_markdown

        text += render_traffic_markdown(traffic)
    return text


def _plan_markdown(r: PlanResult) -> str:
    out: list[str] = [f"# kvplan: {headline(r)}", ""]
    border = borderline_text(r)
    tag = " (borderline)" if border else ""
    if r.startup.ok:
        out.append(f"**Verdict: vLLM starts{tag}.**")
    else:
        out += [f"**Verdict: vLLM fails at start-up{tag}** with:", "", "```", r.startup.error or "", "```"]
        if r.startup.suggested_max_model_len:
            out.append(f"Suggested `--max-model-len {r.startup.suggested_max_model_len}`.")
        fit = layout_fit_text(r)
        if fit:
            out += ["", fit]
    if border:
        out += ["", f"> {border}"]
    out += ["", "## KV cache", "", "```"] + list(r.kv.log_lines) + ["```", ""]
    k = r.kv
    out += ["| figure | value |", "|---|---|",
            f"| KV bytes per token per GPU | {k.bytes_per_token_per_gpu:,} B |",
            f"| KV bytes per token, whole model | {k.bytes_per_token_total:,} B |",
            f"| block size | {k.block_size} tokens |",
            f"| bytes per block (one GPU) | {k.bytes_per_block:,} B |",
            f"| GPU blocks | {k.num_gpu_blocks:,} ({k.usable_blocks:,} usable) |",
            f"| KV cache tokens | {k.kv_cache_tokens:,} |",
            f"| max concurrency at {k.max_concurrency_for_tokens:,} tokens | {k.max_concurrency:.2f}x |", ""]
    out += ["## Memory per GPU", "", "| part | GiB |", "|---|---:|"]
    out += [f"| {name} | {value:.2f} |" for name, value in memory_segments(r)]
    out += [f"| **total** | **{r.memory.total_gib_per_gpu:.2f}** |", "",
            f"Available KV cache memory: {r.memory.available_kv_cache_gib:.2f} GiB ({r.memory.source}).", ""]
    out += [f"- {line}" for line in serve_flag_lines(r)] + ([""] if serve_flag_lines(r) else [])
    if r.naive:
        n = r.naive
        out += ["## The blog formula", "",
                f"`{n.formula}` claims {human_bytes(n.claimed_bytes)} for one {k.max_concurrency_for_tokens:,}-token "
                f"request; vLLM really uses {human_bytes(n.exact_bytes)} ({n.ratio}x less).", ""]
        out += [f"- {w}" for w in n.why] + [""]
    out += ["## Capacity", "", "| max_model_len | max concurrency | KV tokens | starts |", "|---:|---:|---:|:---:|"]
    for row in r.capacity_table:
        out.append(f"| {row.max_model_len:,} | {row.max_concurrency:.2f}x | {row.kv_cache_tokens:,} | "
                   f"{'yes' if row.fits else 'no'} |")
    if r.what_if:
        out += ["", f"## {what_if_caption(r)[0].upper()}{what_if_caption(r)[1:]}", "", "| change | starts | KV GiB/GPU | KV tokens | concurrency |", "|---|:---:|---:|---:|---:|"]
        for w in r.what_if:
            out.append(f"| `{w.change}` | {'yes' if w.ok else 'no'} | {w.available_kv_cache_gib:.2f} | "
                       f"{w.kv_cache_tokens:,} | {w.max_concurrency:.2f}x |")
    run = run_block(r)
    if run:
        title, command, yaml = run
        out += ["", f"## {title[0].upper()}{title[1:]}", "", "```bash", command, "```", "", "```yaml", yaml.rstrip(), "```"]
    else:
        out += ["", "## No serve command", "", "This configuration fails and no other layout kvplan tried starts it."]
    if r.multi_node and r.serve_command_starts:
        mn = r.multi_node
        out += ["", f"**Multi-node:** {mn.note}", "", "```bash", "# head node", " ".join(mn.head_command),
                "# each worker node", " ".join(mn.worker_command), "# then, on the head", " ".join(mn.serve_command), "```"]
    for w in r.startup.warnings:
        out.append(f"\n> warning: {w}")
    for note in r.notes:
        out.append(f"\n> note: {note}")
    return "\n".join(out) + "\n"
