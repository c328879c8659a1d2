"""Terminal rendering of ``kvplan doctor`` (plain text: readable in CI logs and over ssh)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the result type only: report sits below ops (tests/test_layering.py)
    from ..ops.doctor.model import DoctorReport


def _nums(d: dict) -> str:
    return ", ".join(f"{k}={v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{k}={v}"
                     for k, v in d.items() if v is not None)


def render_text(r: DoctorReport) -> str:
    source = (f"{', '.join(r.files)}, {len(r.history)} deployment(s)" if r.history else
              f"{len(r.files)} file(s), {r.lines_read:,} lines, {len(r.runs)} run(s)")
    verdict = ("ERRORS" if not r.healthy else "warnings, no errors" if any(f.severity == "warning" for f in r.findings)
               else "no errors")
    out = [f"kvplan doctor: {source}, {len(r.findings)} finding(s) — {verdict}"]
    out += [f"  {name}: no vLLM log lines found" for name in r.no_vllm_lines]
    for run in r.runs:
        bits = [f"vLLM {run.vllm_version}" if run.vllm_version else "vLLM version ?", run.engine or "",
                run.model or "", f"max_model_len {run.max_model_len:,}" if run.max_model_len else "",
                f"KV {run.available_kv_gib} GiB" if run.available_kv_gib is not None else "",
                f"{run.kv_cache_tokens:,} KV tokens" if run.kv_cache_tokens else "",
                f"{run.max_concurrency}x" if run.max_concurrency else "",
                f"peak KV {run.peak_kv_usage * 100:.1f}%" if run.peak_kv_usage is not None else "",
                f"peak waiting {run.peak_waiting}" if run.peak_waiting is not None else ""]
        out.append(f"  run {run.file}:{run.first_line}-{run.last_line}: " + ", ".join(b for b in bits if b))
        if run.fix_basis:
            out.append(f"    fixes predicted by: {run.fix_basis}")
    for h in r.history:
        out.append(f"  prometheus {h['job']}/{h['instance']} ({', '.join(h['model_names']) or 'no model_name'}) "
                   f"{h['start']} – {h['end']}: " + _nums(h.get("totals", {})))
        for note in h.get("notes", []):
            out.append(f"    note: {note}")
    for f in r.findings:
        out += ["", f"[{f.severity.upper()}] {f.id}: {f.title}"]
        if f.numbers:
            out.append("  numbers: " + _nums(f.to_dict()["numbers"]))
        for e in f.evidence:
            out.append(f"  {e.where}: {e.text.strip()[:300]}")
        for n, fix in enumerate(f.fixes, 1):
            cost = fix.cost + (f": {fix.price}" if fix.price else "")
            out.append(f"  fix {n} ({cost}; {fix.basis}): {fix.change} → {fix.effect}"
                       + (f" (assumes {fix.premise})" if fix.premise else ""))
        for c in f.collect_next:
            out.append(f"  collect next: {c}")
    for c in r.collect_next:
        out += ["", f"collect next: {c}"]
    return "\n".join(out) + "\n"
