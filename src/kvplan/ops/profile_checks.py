"""The measured-versus-planned rows of ``kvplan profile`` (kvplan.ops.profile measures; this module judges).

Every row names where its measured figure comes from and what the plan says; a row that cannot be
judged (no plan, no GPU, a request too fast to catch, a hybrid model) is ``skipped`` with the
reason, never passed silently.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from .profile import ProfileStep

MAX_BURST = 64  # requests in the burst at most: a profile is a probe, not a load test
GPU_MEMORY_LIMIT = 0.90  # the peak allowed without a plan to compare with (see peak_limit)


@dataclass(frozen=True)
class ProfileCheck:
    """One measured-versus-planned row. ``status``: pass, fail or skipped (with the reason)."""

    id: str
    title: str
    status: str
    measured: Any
    planned: Any
    tolerance: str
    evidence: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "status": self.status, "measured": self.measured,
                "planned": self.planned, "tolerance": self.tolerance, "evidence": self.evidence}


@dataclass(frozen=True)
class ServerFacts:
    """What the live server reports about itself (/v1/models, /metrics, /version)."""

    model: str
    max_model_len: int
    block_size: int
    num_gpu_blocks: int
    kv_cache_tokens: Optional[int]
    max_concurrency: Optional[float]
    cache_labels: dict
    vllm_version: Optional[str]


def _check(id_: str, title: str, measured, planned, tolerance: str, evidence: str, ok: Optional[bool],
           skipped: str = "") -> ProfileCheck:
    status = "skipped" if ok is None else ("pass" if ok else "fail")
    return ProfileCheck(id_, title, status, measured, planned, tolerance, skipped if ok is None else evidence)


def peak_limit(plan_result, gpu_total: Optional[int]) -> float:
    """The measured peak a server may reach: what its plan pre-allocates (vLLM fills its budget by
    design: 0.92 of the GPU plus the CUDA context) plus the estimate's error band; without a plan,
    GPU_MEMORY_LIMIT. The same rule as preflight's plan_memory."""
    if plan_result is None or not gpu_total or plan_result.flags.device != "cuda":
        return GPU_MEMORY_LIMIT
    from ..memory.borderline import error_band_bytes

    m = plan_result.memory
    planned = (m.non_kv_gib + m.kv_cache_used_gib + m.preexisting_gib) / m.total_gib_per_gpu if m.total_gib_per_gpu else 0
    return min(1.0, round(planned + error_band_bytes(gpu_total) / gpu_total, 4))


def build_checks(srv: ServerFacts, plan_result, log, steps: dict[str, "ProfileStep"], burst_planned: int,
            gpu_total: Optional[int], gpu_limit: Optional[float]) -> list[ProfileCheck]:
    """``gpu_limit``: the peak GPU memory allowed as a share of the GPU (None: :func:`peak_limit`)."""
    out: list[ProfileCheck] = []
    if gpu_limit is None:
        gpu_limit = peak_limit(plan_result, gpu_total)
    no_plan = "no plan given (pass the plan flags, e.g. --model … --kv-cache-memory …): nothing to compare with"
    planned_blocks = plan_result.kv.num_gpu_blocks if plan_result else None
    src = "vllm:cache_config_info num_gpu_blocks" if srv.cache_labels.get("num_gpu_blocks") else "start-up log"
    out.append(_check("kv_blocks", "KV-cache blocks", srv.num_gpu_blocks, planned_blocks, "exact",
                      f"{src} = {srv.num_gpu_blocks:,} blocks of {srv.block_size} tokens; plan: "
                      f"{planned_blocks if planned_blocks is None else f'{planned_blocks:,}'}",
                      None if plan_result is None else srv.num_gpu_blocks == planned_blocks
                      and srv.block_size == plan_result.kv.block_size, no_plan))
    measured_tokens = log.kv_cache_tokens if log is not None and log.kv_cache_tokens else srv.kv_cache_tokens
    token_src = "start-up log capacity line" if log is not None and log.kv_cache_tokens else \
        "vllm:cache_config_info kv_cache_size_tokens"
    planned_tokens = plan_result.kv.kv_cache_tokens if plan_result else None
    if plan_result is None or measured_tokens is None:
        out.append(_check("kv_tokens", "KV-cache tokens", measured_tokens, planned_tokens, "exact", "", None,
                          no_plan if plan_result is None else "neither the log nor /metrics gives the KV token count"))
    else:
        conc = log.max_concurrency if log is not None and log.max_concurrency is not None else srv.max_concurrency
        out.append(_check("kv_tokens", "KV-cache tokens", measured_tokens, planned_tokens, "exact",
                          f"{token_src}: {measured_tokens:,} tokens, max concurrency {conc}x; plan: "
                          f"{planned_tokens:,} tokens, {plan_result.kv.max_concurrency:.2f}x",
                          measured_tokens == planned_tokens))
    burst = steps.get("burst")
    if burst is not None:
        reached = burst.peak_running
        # Fewer running than sent while all completed is either the server holding requests back
        # (max_num_seqs, KV: a step ran with requests waiting and prefilled none of them, see
        # ProfileStep.held_back) or scrapes that missed the peak: a busy host answers /metrics late,
        # vLLM's gauges move once per step, and a burst larger than the token budget waits a step or
        # two while it is prefilled. Only the first is a failure; the second measured nothing.
        missed = (reached is not None and reached < burst.requests and not burst.held_back
                  and burst.completed > 0 and not burst.errors)
        ok = None if reached is None or missed else (reached >= burst.requests and not burst.errors)
        out.append(_check("concurrency", "concurrency reached in the burst", reached, burst.requests, "all running",
                          f"{burst.requests} requests sent at once ({burst_planned} planned: max_num_seqs and the KV "
                          f"cache for {burst.prompt_tokens}+{burst.max_tokens}-token requests, capped at {MAX_BURST}); "
                          f"peak running {reached}, peak waiting {burst.peak_waiting}, {burst.completed} completed"
                          + (f"; held back: {burst.held_back}" if burst.held_back and reached < burst.requests else "")
                          + (f"; errors: {'; '.join(burst.errors)}" if burst.errors else ""),
                          ok, (f"no scrape caught the burst at its peak (peak running {reached}, peak waiting "
                               f"{burst.peak_waiting}, never a step that left requests waiting without prefilling; "
                               f"{burst.attempts} attempt(s), {burst.scrapes} scrape(s)): too fast to catch") if missed
                          else "no scrape of vllm:num_requests_running during the burst"))
    hybrid = len(plan_result.kv.groups) if plan_result is not None and len(plan_result.kv.groups) > 1 else 0
    for name in ("short", "long", "burst"):
        step = steps.get(name)
        if step is None:
            continue
        per = step.expected_kv_blocks_per_request
        expected = per * step.requests
        tokens = f"{step.prompt_tokens}+{step.max_tokens}"
        title = {"short": "KV blocks held by a short request", "long": "KV blocks held by a long request",
                 "burst": "KV blocks held by the burst"}[name]
        if hybrid and not (step.errors and step.measured_kv_blocks is None):
            # a request holds blocks in every group: ceil(tokens / block_size) is not its rule, caught or not
            measured = "" if step.measured_kv_blocks is None else f"; measured {step.measured_kv_blocks} block(s)"
            out.append(_check(f"kv_per_request_{name}", title, step.measured_kv_blocks, expected, "exact", "", None,
                              f"hybrid model ({hybrid} KV-cache groups): a request holds blocks in every group"
                              + measured))
            continue
        if step.measured_kv_blocks is None:
            if step.errors:
                out.append(_check(f"kv_per_request_{name}", title, None, expected, "exact",
                                  f"errors: {'; '.join(step.errors)}", False))
            else:
                out.append(_check(f"kv_per_request_{name}", title, None, expected, "exact", "", None,
                                  f"no scrape fell while the step's requests were all running ({step.attempts} "
                                  f"attempt(s), {step.scrapes} scrape(s)): too fast to catch"))
            continue
        out.append(_check(
            f"kv_per_request_{name}", title, step.measured_kv_blocks, expected, "exact (whole blocks)",
            f"usage {step.peak_kv_usage:.6f} (baseline {step.baseline_kv_usage or 0:.6f}) × {srv.num_gpu_blocks - 1:,} "
            f"usable blocks = {step.measured_kv_blocks} block(s) for {step.requests} × {tokens} tokens; "
            f"ceil(tokens / {srv.block_size}) = {per} per request; reserving max_model_len ({srv.max_model_len:,}) would "
            f"take {step.max_model_len_blocks} per request",
            step.measured_kv_blocks == expected and not step.errors))
    peaks = [s.peak_gpu_memory_bytes for s in steps.values() if s.peak_gpu_memory_bytes is not None]
    if gpu_total and peaks:
        share = max(peaks) / gpu_total
        out.append(_check("peak_gpu_memory", "peak GPU memory", round(share, 4), gpu_limit, f"≤ {gpu_limit:.0%}",
                          f"NVML: peak {max(peaks) / (1 << 30):.2f} GiB of {gpu_total / (1 << 30):.2f} GiB "
                          f"({share:.1%}); vLLM reserves gpu_memory_utilization of the GPU at start-up",
                          share <= gpu_limit))
    else:
        out.append(_check("peak_gpu_memory", "peak GPU memory", "n/a", gpu_limit, f"≤ {gpu_limit:.0%}", "", None,
                          "n/a: no GPU visible to NVML on this host (CPU backend, remote server, or nvidia-ml-py "
                          "not installed: pip install 'kvplan[nvml]')"))
    return out


def planned_figures(plan_result) -> Optional[dict]:
    if plan_result is None:
        return None
    k, f = plan_result.kv, plan_result.flags
    return {"device": f.device, "block_size": k.block_size, "num_gpu_blocks": k.num_gpu_blocks,
            "usable_blocks": k.usable_blocks, "kv_cache_tokens": k.kv_cache_tokens,
            "max_concurrency": k.max_concurrency, "max_model_len": f.max_model_len, "max_num_seqs": f.max_num_seqs,
            "gpu_memory_utilization": f.gpu_memory_utilization, "log_lines": list(k.log_lines),
            "startup_ok": plan_result.startup.ok}
