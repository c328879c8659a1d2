"""The contract of ``kvplan doctor``: frozen dataclasses, serialised by ``to_dict()``.

Finding ids are stable (scripts match on them); the documented list is :data:`FINDING_IDS`
(docs/ops.md repeats it). A new id may be added; an existing one is never renamed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

FINDING_IDS: dict[str, str] = {
    "kv_cache_too_small_for_max_model_len": "vLLM refused to start: one max_model_len request does not fit in the KV cache",
    "no_memory_for_cache_blocks": "nothing left for the KV cache after weights and activations (0 or negative KV memory)",
    "insufficient_free_memory": "free GPU memory at start-up below gpu_memory_utilization (another process on the GPU)",
    "cuda_oom_runtime": "CUDA out of memory while serving or profiling (sampling, prefill)",
    "cuda_oom_cudagraph": "CUDA out of memory while capturing CUDA graphs",
    "preemption": "requests preempted for lack of KV-cache space",
    "request_too_long": "requests rejected because prompt + max_tokens exceed max_model_len",
    "tp_not_divisible": "the model's heads (or another dimension) are not divisible by the tensor-parallel size",
    "config_refused": "vLLM's own config checks refused a flag before start-up (scheduler limits, block size)",
    "slow_start": "a slow start-up (weights download/load, torch.compile, CUDA graph capture)",
    "lora_config": "vLLM refused the LoRA flags (max_cpu_loras, max_lora_rank, vocabulary, CPU offload)",
    "lora_adapter_rank": "an adapter's rank is above --max-lora-rank",
    "speculative_config": "vLLM refused the --speculative-config (method, num_speculative_tokens)",
    "swap_space": "--swap-space too large for the host's memory",
    "spec_decode_acceptance": "the draft acceptance rate of speculative decoding, from vLLM's periodic metrics lines",
    # from a Prometheus server's history (kvplan doctor --prometheus); evidence are time ranges
    "kv_cache_full_with_waiting": "KV cache near full while requests waited (the log's stats lines, or history)",
    "requests_queued": "requests waited in vLLM's queue for 20 s or more (stats lines): arrivals above what it completes",
    "latency_tail": "E2E or TTFT P99 above the threshold (history)",
    "gpu_memory_outside_budget": "GPU memory in use above vLLM's budget (gpu_memory_utilization x total), growing (history)",
    "server_restart": "the vLLM server restarted (process start time changed or counters reset) (history)",
}

#: cost order of fixes: a flag that costs nothing first, then a deployment change (no runtime cost),
#: then accuracy, then throughput; more hardware last.
#: cost categories, cheapest first; "capacity": the fix gives up KV cache (tokens, concurrency)
COSTS = ("free", "capacity", "operational", "accuracy", "throughput", "hardware")


@dataclass(frozen=True)
class Evidence:
    file: str  # a log file, or "prometheus URL job/instance" for history evidence
    line: int  # 1-based; 0 for history evidence (a time range instead)
    text: str
    start: Optional[str] = None  # history evidence: the range (ISO 8601, UTC)
    end: Optional[str] = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else f"{self.file} {self.start} – {self.end}"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file, "line": self.line, "text": self.text}
        if self.start is not None:
            d.update(start=self.start, end=self.end)
        return d


@dataclass(frozen=True)
class Fix:
    """One concrete change (a flag, or an action when no flag helps) and what it predicts."""

    change: str
    effect: str
    cost: str = "free"
    numbers: tuple[tuple[str, Any], ...] = ()
    #: where the predicted effect comes from: "plan" (kvplan.memory.plan re-run with the log's flags
    #: and measured KV memory), "log arithmetic (<why no plan>)" (the log's own figures scaled), or
    #: "vLLM rule" (no memory prediction: what the flag does by vLLM's rules)
    basis: str = "vLLM rule"
    #: what the cost is, in the plan's own numbers (e.g. "−31,000 KV tokens (−6% of the cache)")
    price: str = ""
    #: what the fix assumes that the log does not show ("" when the log supports it); such fixes
    #: rank after the supported ones (planned_fixes.ranked)
    premise: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.change, "effect": self.effect, "cost": self.cost, "numbers": dict(self.numbers),
                "basis": self.basis, "price": self.price, "premise": self.premise}


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str  # error | warning | info
    title: str
    evidence: tuple[Evidence, ...]
    numbers: tuple[tuple[str, Any], ...] = ()
    fixes: tuple[Fix, ...] = ()
    collect_next: tuple[str, ...] = ()  # what to gather when the log alone cannot settle it

    def __post_init__(self) -> None:
        if self.id not in FINDING_IDS:
            raise ValueError(f"undocumented finding id {self.id!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "title": self.title,
                "evidence": [e.to_dict() for e in self.evidence], "numbers": dict(self.numbers),
                "fixes": [f.to_dict() for f in self.fixes], "collect_next": list(self.collect_next)}


@dataclass(frozen=True)
class RunSummary:
    """What one server run in a log says about itself."""

    file: str
    first_line: int
    last_line: int
    vllm_version: Optional[str] = None
    engine: Optional[str] = None
    model: Optional[str] = None
    args: tuple[tuple[str, Any], ...] = ()
    max_model_len: Optional[int] = None
    available_kv_gib: Optional[float] = None
    kv_cache_tokens: Optional[int] = None
    num_gpu_blocks: Optional[int] = None
    max_concurrency: Optional[float] = None
    model_loading_gib: Optional[float] = None
    peak_kv_usage: Optional[float] = None  # from the periodic stats lines, 0–1
    peak_running: Optional[int] = None
    peak_waiting: Optional[int] = None
    stats_lines: int = 0
    warnings: int = 0
    errors: int = 0
    #: what the fixes of this run are predicted with: "plan: <model>, vLLM <x> rules (<engine>)", or
    #: the log-arithmetic basis with the reason the planner could not be used
    fix_basis: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["args"] = {k: _jsonable(v) for k, v in self.args}
        return d


def _jsonable(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)


@dataclass(frozen=True)
class DoctorReport:
    files: tuple[str, ...]
    runs: tuple[RunSummary, ...]
    findings: tuple[Finding, ...]
    collect_next: tuple[str, ...] = ()
    lines_read: int = 0
    #: kvplan doctor --prometheus: one summary per deployment read (instance, range, totals, notes)
    history: tuple[dict, ...] = ()
    #: files in which no line is vLLM's (empty, binary, another program's log): the CLI says so
    #: and exits 2 rather than calling them healthy
    no_vllm_lines: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"files": list(self.files), "lines_read": self.lines_read, "healthy": self.healthy,
                "runs": [r.to_dict() for r in self.runs], "findings": [f.to_dict() for f in self.findings],
                "collect_next": list(self.collect_next), "finding_ids": FINDING_IDS,
                "no_vllm_lines": list(self.no_vllm_lines),
                **({"history": list(self.history)} if self.history else {})}
