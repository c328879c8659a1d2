"""What one preflight run is asked to do, besides the plan itself (a :class:`PlanRequest`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError, file_not_found

DEFAULT_DURATION_S = 300.0  # the "5 minutes at 150% of the target QPS"
DEFAULT_LOAD_FACTOR = 1.5
# The measured peak a live server may reach in `kvplan profile` (NVML). The plan's own memory rule is
# plan_memory's "peak known and within vLLM's budget" (checks_static.check_plan_memory), not a share.
GPU_MEMORY_LIMIT = 0.90


@dataclass(frozen=True)
class PreflightOptions:
    requests: Optional[str] = None  # request log (any format kvplan lengths reads)
    target_qps: Optional[float] = None
    load_factor: float = DEFAULT_LOAD_FACTOR
    slo: tuple = ()  # kvplan.slo.Slo
    duration_s: float = DEFAULT_DURATION_S
    url: Optional[str] = None
    log: Optional[str] = None  # with --url: the server's log (its start-up lines, for profile and the plan)
    launch: bool = False
    vllm_bin: str = "vllm"
    vllm_args: tuple[str, ...] = ()
    vllm_env: tuple[tuple[str, str], ...] = ()
    startup_timeout_s: float = 900.0
    baseline: Optional[str] = None
    dry_run: bool = False
    output_dir: Optional[Path] = None
    max_tokens: Optional[int] = None  # the output budget the clients send (else the requests' own)
    history_turns: Optional[int] = None  # the history cap the application applies, if any
    history_tokens: Optional[int] = None
    percentile: float = 99.0
    estimate: Optional[bool] = None  # kvplan.workload.analysis.estimator_for: None = the one rule
    strict: bool = False
    gpu_price: Optional[str] = None  # --gpu-price (kvplan.hardware.prices)
    # bench knobs a test may tighten (never needed on the command line)
    bench_timeout_s: float = 120.0
    profile_timeout_s: float = 600.0
    extra: dict = field(default_factory=dict)

    @property
    def load_rate(self) -> Optional[float]:
        return None if self.target_qps is None else self.target_qps * self.load_factor

    @property
    def mode(self) -> str:
        return "dry-run" if self.dry_run else ("launch" if self.launch else "url")

    def validate(self) -> "PreflightOptions":
        if self.url and self.launch:
            raise UsageError("give --url or --launch, not both")
        if self.log is not None and not self.url:
            raise UsageError("--log is the log of the server given by --url (with --launch kvplan writes its own)")
        if self.log is not None and not Path(self.log).is_file():
            raise file_not_found(self.log)
        if not self.dry_run and not self.url and not self.launch:
            raise UsageError("give --url URL (a running server), --launch (kvplan starts vllm serve), or --dry-run")
        if self.target_qps is not None and not self.target_qps > 0:
            raise UsageError(f"--target-qps must be positive, got {self.target_qps}")
        if not self.load_factor > 0:
            raise UsageError(f"--load-factor must be positive, got {self.load_factor}")
        if not self.duration_s > 0:
            raise UsageError("--duration must be positive")
        if not self.bench_timeout_s > 0:
            raise UsageError("--request-timeout must be positive")
        for name, v in (("--max-tokens", self.max_tokens), ("--history-turns", self.history_turns),
                        ("--history-tokens", self.history_tokens)):
            if v is not None and v < 1:
                raise UsageError(f"{name} must be at least 1, got {v}")
        if not 50 <= self.percentile < 100:
            raise UsageError(f"--percentile must be in [50, 100), got {self.percentile}")
        if self.baseline is not None and not Path(self.baseline).is_file():
            raise file_not_found(self.baseline)
        if self.requests is not None and self.requests != "-" and not any(c in self.requests for c in "*?[") \
                and not Path(self.requests).exists():
            raise file_not_found(self.requests)
        return self

    def public(self) -> dict[str, Any]:
        return {"requests": self.requests, "target_qps": self.target_qps, "load_factor": self.load_factor,
                "load_rate": self.load_rate, "slo": {s.key: s.limit for s in self.slo}, "duration_s": self.duration_s,
                "url": self.url, "log": self.log, "launch": self.launch, "vllm_bin": self.vllm_bin if self.launch else None,
                "vllm_args": list(self.vllm_args), "baseline": self.baseline, "dry_run": self.dry_run,
                "output_dir": str(self.output_dir) if self.output_dir else None, "max_tokens": self.max_tokens,
                "history_turns": self.history_turns, "history_tokens": self.history_tokens,
                "percentile": self.percentile, "strict": self.strict,
                "gpu_price": self.gpu_price}
