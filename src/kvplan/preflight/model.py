"""The contract of ``kvplan preflight``: one frozen :class:`PreflightResult` that the table,
Markdown, JSON and HTML renderers all read.

Check ids are stable (CI scripts match on them); :data:`CHECK_IDS` is the documented list
(docs/preflight.md repeats it) and the order the checks appear in. A new id may be added; an
existing one is never renamed. Per-SLO checks are ``slo_<key>`` (e.g. ``slo_ttft_p99``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..ops.doctor.model import Fix

SCHEMA_VERSION = 1
STATUSES = ("pass", "warn", "fail", "skipped")

#: id -> what it checks, in report order (the issue's order: lengths, plan, profile, load,
#: baseline, multi-turn, alerts).
CHECK_IDS: dict[str, str] = {
    "lengths_max_model_len": "max_model_len holds the recommended length of the real traffic (P99 prompt + output budget)",
    "lengths_max_tokens": "the max_tokens the clients send covers the observed completions",
    "plan_starts": "vLLM starts with these flags (kvplan plan's admission check, vLLM's own error text)",
    "plan_memory": "peak GPU memory is known and within vLLM's budget, with the estimate's error band left "
                   "outside it (vLLM pre-allocates its KV cache up to --gpu-memory-utilization by design)",
    "plan_concurrency": "requests in flight at the load-test rate (Little's law) fit in max_num_seqs and the KV cache",
    "profile_matches_plan": "the live server's KV blocks, tokens and concurrency match the plan (kvplan profile)",
    "load_run_complete": "the load test ran to the end and its numbers describe the server (not client-bound)",
    "load_errors": "no failed requests at target QPS x 1.5",
    "load_oom": "no out-of-memory error while serving",
    "load_preemptions": "no request preempted for lack of KV-cache space",
    "load_kv_usage": "KV-cache usage stays below the alert threshold (90%)",
    "load_queue": "requests waiting stay at or below the alert threshold (10) and the server keeps up with the rate",
    "slo_*": "one check per --slo key (e.g. slo_ttft_p99): the measured or simulated value within its limit",
    "baseline_regression": "no latency regression against --baseline (kvplan bench compare, distribution-free CIs)",
    "history_cap": "multi-turn conversations: history capped so every turn's prompt + max_tokens fits max_model_len",
    "alerts_written": "Prometheus rules and Grafana dashboard written to --output-dir (promtool-checked when available)",
}

VERDICTS = ("GO", "GO_WITH_RISKS", "NO-GO")


def documented(check_id: str) -> bool:
    return check_id in CHECK_IDS or (check_id.startswith("slo_") and len(check_id) > 4)


@dataclass(frozen=True)
class CheckResult:
    """One row of the checklist. ``measured`` / ``threshold`` are what a reader compares;
    ``evidence`` says where the numbers come from; ``fixes`` (first = recommended) come from
    kvplan's own what-ifs, lengths recommendations or the doctor's fixes, never invented."""

    id: str
    status: str
    title: str
    measured: Any = None
    threshold: Any = None
    evidence: tuple[str, ...] = ()
    fixes: tuple[Fix, ...] = ()
    simulated: bool = False

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id}: status {self.status!r} not in {STATUSES}")
        if not documented(self.id):
            raise ValueError(f"undocumented check id {self.id!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "title": self.title, "measured": self.measured,
                "threshold": self.threshold, "evidence": list(self.evidence),
                "fix": self.fixes[0].to_dict() if self.fixes else None,
                "fixes": [f.to_dict() for f in self.fixes], "simulated": self.simulated}


def verdict_of(checks: tuple[CheckResult, ...] | list[CheckResult]) -> str:
    """NO-GO when any check fails, GO_WITH_RISKS when any warns, else GO. Skipped checks do not
    count (they are listed, with their reason, so a reader sees what was not verified)."""
    statuses = {c.status for c in checks}
    if "fail" in statuses:
        return "NO-GO"
    if "warn" in statuses:
        return "GO_WITH_RISKS"
    return "GO"


def exit_code_for(verdict: str, strict: bool = False) -> int:
    """0 GO; 1 NO-GO; GO_WITH_RISKS 0, or 1 with --strict (CI that wants no risk at all)."""
    if verdict == "NO-GO":
        return 1
    if verdict == "GO_WITH_RISKS":
        return 1 if strict else 0
    return 0


@dataclass(frozen=True)
class PreflightResult:
    """Everything one preflight found. ``sections`` holds the plain-JSON inputs the renderers plot
    (lengths histograms, per-turn growth, the load timeline), so no renderer recomputes them."""

    verdict: str
    checks: tuple[CheckResult, ...]
    dry_run: bool
    mode: str  # dry-run | url | launch
    inputs: dict
    plan: dict  # headline figures of the plan
    sections: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)  # name -> path written
    notes: tuple[str, ...] = ()
    strict: bool = False

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.verdict, self.strict)

    def check(self, check_id: str) -> Optional[CheckResult]:
        return next((c for c in self.checks if c.id == check_id), None)

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in STATUSES}

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "kind": "kvplan.preflight", "verdict": self.verdict,
                "exit_code": self.exit_code, "strict": self.strict, "dry_run": self.dry_run, "mode": self.mode,
                "counts": self.counts(), "checks": [c.to_dict() for c in self.checks], "inputs": self.inputs,
                "plan": self.plan, "sections": self.sections, "files": self.files, "notes": list(self.notes),
                "check_ids": CHECK_IDS}
