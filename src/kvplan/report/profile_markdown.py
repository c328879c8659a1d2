"""Markdown rendering of ``kvplan profile`` (for a PR, an incident note or a release checklist)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ._markdown import cell, code

if TYPE_CHECKING:  # the result type only: report sits below ops (tests/test_layering.py)
    from ..ops.profile import ProfileResult


def _value(value: object) -> object:
    """A figure as the tables show it: None as -, thousands separated, 4 significant digits."""
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        value = f"{value:,}"
    elif isinstance(value, float):
        value = f"{value:,.4g}"
    return value


def _cell(value: object) -> str:
    return cell(_value(value))


def _code(value: object) -> str:
    return code(_value(value))


def render_markdown(r: ProfileResult) -> str:
    s = r.server
    out = ["# kvplan profile", "",
           f"Server {_cell(r.base_url)}, model `{_code(r.model)}`, vLLM {_cell(r.vllm_version or '?')}: "
           f"**{'matches the plan' if r.ok else 'does not match the plan'}**.", "",
           f"{s['num_gpu_blocks']:,} KV blocks of {s['block_size']} tokens ({s['usable_blocks']:,} usable), "
           f"max_model_len {s['max_model_len']:,}.", ""]
    if r.startup.get("kv_line"):
        out += [f"Start-up log: `{_code(r.startup['kv_line'])}`", ""]
    out += ["| check | status | measured | planned | tolerance | evidence |", "|---|---|---:|---:|---|---|"]
    out += [f"| {_cell(c.title)} | {c.status} | {_cell(c.measured)} | {_cell(c.planned)} | {_cell(c.tolerance)} | "
            f"{_cell(c.evidence)} |" for c in r.checks]
    out += ["", "| step | requests | tokens (prompt+max) | KV usage peak | blocks measured | blocks/request | "
                "max_model_len blocks | running | waiting |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for st in r.steps:
        usage = "-" if st.peak_kv_usage is None else f"{st.peak_kv_usage:.4%}"
        out.append(f"| {st.name} | {st.requests} | {st.prompt_tokens:,}+{st.max_tokens} | {usage} | "
                   f"{_cell(st.measured_kv_blocks)} | {st.expected_kv_blocks_per_request} | {st.max_model_len_blocks} | "
                   f"{_cell(st.peak_running)} | {_cell(st.peak_waiting)} |")
    out.append("")
    if r.gpu.get("notice"):
        out.append(f"- GPU: {_cell(r.gpu['notice'])}")
    out += [f"- note: {_cell(n)}" for n in r.notes]
    return "\n".join(out).rstrip() + "\n"
