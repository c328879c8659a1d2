"""Markdown rendering of ``kvplan preflight`` (a release note, a PR comment, a CI summary).
Reads ``PreflightResult.to_dict()`` only."""
from __future__ import annotations

from ._markdown import cell, code, fence
from .preflight_html import VERDICT_TEXT, _val


def render_markdown(d: dict) -> str:
    plan = d.get("plan") or {}
    verdict = VERDICT_TEXT.get(d["verdict"], d["verdict"])
    counts = ", ".join(f"{n} {k}" for k, n in (d.get("counts") or {}).items() if n)
    out = [f"# kvplan preflight: **{verdict}**", "", cell(plan.get("headline", "")), "",
           f"{counts}; exit code {d.get('exit_code')}" + (" (--strict)" if d.get("strict") else ""), ""]
    if d.get("dry_run"):
        out += ["> **Dry run**: no server was started or measured; load checks marked *(simulated)* come from "
                "kvplan's simulator.", ""]
    out += [f"- {cell(n)}" for n in d.get("notes") or []]
    out += ["", "| check | status | measured | threshold |", "|---|---|---:|---|"]
    for c in d["checks"]:
        sim = " *(simulated)*" if c.get("simulated") else ""
        status = c["status"].upper() if c["status"] in ("fail", "warn") else c["status"]
        out.append(f"| `{c['id']}`{sim} | {status} | {cell(_val(c.get('measured')))} | {cell(_val(c.get('threshold')))} |")
    out.append("")
    for c in d["checks"]:
        if c["status"] not in ("fail", "warn"):
            continue
        out += [f"## `{c['id']}`: {c['status'].upper()}", "", cell(c.get("title", "")), ""]
        out += [f"- {cell(e)}" for e in c.get("evidence") or []]
        if c.get("fixes"):
            out += ["", "| fix | cost | predicted effect |", "|---|---|---|"]
            out += [f"| `{code(f['change'])}` | {cell(f.get('cost', ''))}"
                    f"{(': ' + cell(f['price'])) if f.get('price') else ''} | {cell(f['effect'])} |" for f in c["fixes"]]
        out.append("")
    if plan.get("serve_command") and plan.get("serve_command_starts", True):
        out += ["## Serve command", "", "```bash", fence(plan["serve_command"]), "```", ""]
    elif plan.get("serve_command"):
        out += ["## Serve command", "", "None: vLLM refuses this configuration (see the plan check, and "
                "`kvplan plan` for one that starts).", ""]
    if d.get("files"):
        out += ["## Files", ""] + [f"- {k}: `{code(v)}`" for k, v in d["files"].items()] + [""]
    return "\n".join(out).rstrip() + "\n"
