"""The planner behind doctor's fixes: one run's flags and measured KV memory, re-planned per fix.

A fix's predicted effect comes from :func:`kvplan.memory.plan` run the way ``plan --from-log``
runs it (kvplan.memory.compare): the engine args the log printed, the KV memory vLLM measured
(``kv_cache_memory_bytes`` / ``kv_cache_memory_per_stage``), then the one flag the fix changes.
Extra GPU memory (a higher ``--gpu-memory-utilization``) goes to the KV cache byte for byte, as in
vLLM's budget (requested − weights − activations − graphs).

The planner is trusted only when its baseline reproduces what the log printed (the admission
error's "X GiB KV cache is needed", the block/token/concurrency line). Otherwise the fix falls
back to scaling the log's own figures and says why in its ``basis``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from ...errors import UsageError
from ...hardware import GIB, custom_gpu
from ...memory import PlanRequest, PlanResult, plan
from ...memory.compare import compare_with_log, kv_bytes_from_blocks
from ...memory.semantics import nearest_supported_version
from ...memory.startup_log import StartupLog
from ...models import ModelSpec, catalog, load_model

BASIS_PLAN = "plan"
BASIS_RULE = "vLLM rule"  # no memory prediction: the effect follows from what the flag does
#: V0 logs rarely print the version; V0's block arithmetic is the same in every release that had it.
V0_DEFAULT_VERSION = "0.10"
_NEEDED = re.compile(r"\((?P<gib>[0-9.]+) GiB KV cache is needed")


def log_basis(reason: str) -> str:
    return f"log arithmetic ({reason})"


@dataclass(frozen=True)
class LogPlanner:
    """The log's configuration, ready to re-plan with one change."""

    request: PlanRequest
    baseline: PlanResult
    kv_bytes: int  # measured KV memory per GPU (smallest worker); may be negative (over-committed)
    total_bytes: Optional[int]  # one GPU's memory, when the log names it
    label: str  # "meta-llama/Llama-3.1-8B-Instruct, vLLM 0.6.4 rules (V0)" for the effect texts
    #: the log measured no KV memory (vLLM failed before it did): every plan, the baseline
    #: included, estimates it for the GPU (--gpu, or the size the log names), as `kvplan plan` does
    estimated: bool = False

    def replan(self, extra_bytes: int = 0, **changes: Any) -> PlanResult:
        """The plan with ``changes`` to the flags and ``extra_bytes`` more KV memory per GPU
        (an estimated planner re-estimates the memory for the changed flags instead). A
        ``max_model_len`` of None keeps the log's length (it never means the model's own limit)."""
        if "max_model_len" in changes and changes["max_model_len"] is None:
            del changes["max_model_len"]
        req = replace(self.request, **changes)
        if self.estimated:
            return plan(req, what_ifs=False, fit_search=True)
        if req.kv_cache_memory_per_stage is not None:
            req = replace(req, kv_cache_memory_per_stage=tuple(max(0, b + extra_bytes)
                                                                 for b in req.kv_cache_memory_per_stage))
        req = replace(req, kv_cache_memory_bytes=max(0, self.kv_bytes + extra_bytes))
        return plan(req, what_ifs=False)

    def bytes_for(self, fraction: float) -> Optional[int]:
        """GPU memory of ``fraction`` of one GPU (a change of gpu_memory_utilization)."""
        return int(round(fraction * self.total_bytes)) if self.total_bytes else None

    def weights_freed(self, **changes: Any) -> int:
        """Bytes per GPU the weights shrink by under ``changes`` (TP, a quantized checkpoint)."""
        return int((self.baseline.memory.weights_gib_per_gpu - self.replan(**changes).memory.weights_gib_per_gpu) * GIB)


def resolve_model(log: StartupLog, model: Optional[str]) -> tuple[Optional[ModelSpec], str]:
    """The model: ``--model`` (id, alias, config.json or folder) or the log's model name looked up
    in the built-in catalog (never the network: a log's name may be a private path)."""
    if model:
        return load_model(model), ""
    name = log.model or log.args.get("model")
    if not isinstance(name, str) or not name.strip():
        return None, "the log names no model; pass --model"
    for key in (name, Path(name.rstrip("/")).name):
        entry = catalog.find(key)
        if entry is not None:
            return load_model(entry.id), ""
    return None, f"model {name!r} not in catalog; pass --model"


def _int(v: Any) -> Optional[int]:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def make_planner(log: StartupLog, args: dict[str, Any], *, model: Optional[str] = None,
                 vllm_version: Optional[str] = None, engine: Optional[str] = None,
                 max_model_len: Optional[int] = None, device: Optional[str] = None, gpu: Optional[str] = None,
                 gpu_total_bytes: Optional[int] = None) -> tuple[Optional[LogPlanner], str]:
    """``(planner, "")``, or ``(None, why the log's own figures must do)``. ``gpu`` (a catalog
    name, doctor's --gpu) and ``gpu_total_bytes`` (a size the log names elsewhere, e.g. in a CUDA
    OOM line) give the GPU; without a measured KV memory the planner estimates it for that GPU."""
    spec, why = resolve_model(log, model)
    if spec is None:
        return None, why
    device = device or ("cpu" if (log.kv_pool or "").upper() == "CPU" else "cuda")
    total = int(log.total_gpu_memory_gib * GIB) if log.total_gpu_memory_gib else gpu_total_bytes
    if gpu:
        from ...hardware import find_gpu

        the_gpu = find_gpu(gpu)
        total = total or the_gpu.memory_bytes
        if total != the_gpu.memory_bytes:
            the_gpu = replace(the_gpu, memory_bytes=total)
    else:
        # Without the GPU's size the plan still holds: every KV figure comes from the measured memory.
        the_gpu = custom_gpu(total, "GPU from log") if total else custom_gpu(80 * GIB, "GPU (size not in log)")
    explicit = _int(args.get("kv_cache_memory_bytes"))
    estimated = False
    if explicit is not None:
        kv_bytes = explicit  # vLLM used exactly this (the printed GiB is rounded)
    elif log.available_kv_gib:
        kv_bytes = int(round(min(log.available_kv_gib) * GIB))
    elif log.num_gpu_blocks or log.kv_cache_tokens or log.max_concurrency:
        kv_bytes = 0  # vLLM counted its blocks but printed no GiB: the bytes follow from the count, below
    elif total and device == "cuda":
        kv_bytes, estimated = 0, True  # vLLM stopped before measuring: estimate it, as `kvplan plan` does
    else:
        return None, ("the log has no measured KV memory ('Available KV cache memory' line) and names no GPU size; "
                      "pass --gpu")
    gpu = the_gpu
    version = vllm_version or nearest_supported_version(log.vllm_version)[0]
    engine = engine or log.engine
    if version is None and engine == "V0":
        version = V0_DEFAULT_VERSION
    mml = max_model_len or log.max_model_len or _int(args.get("max_model_len"))
    util = args.get("gpu_memory_utilization", log.gpu_memory_utilization)
    req = PlanRequest(
        model=spec, gpu=gpu, device=device,
        tensor_parallel_size=_int(args.get("tensor_parallel_size")) or 1,
        pipeline_parallel_size=_int(args.get("pipeline_parallel_size")) or 1,
        data_parallel_size=_int(args.get("data_parallel_size")) or 1,
        dtype=str(args.get("dtype") or "auto"),
        quantization=args.get("quantization") if isinstance(args.get("quantization"), str) else None,
        kv_cache_dtype=str(args.get("kv_cache_dtype") or "auto"),
        gpu_memory_utilization=float(util) if isinstance(util, (int, float)) and 0 < util <= 1 else None,
        max_model_len=mml, max_num_seqs=_int(args.get("max_num_seqs")),
        max_num_batched_tokens=_int(args.get("max_num_batched_tokens")), block_size=_int(args.get("block_size")),
        enforce_eager=bool(args.get("enforce_eager", False)), vllm_version=version, engine=engine,
        kv_cache_memory_bytes=None if estimated else max(kv_bytes, 0), kv_memory_source="log",
        flashinfer_sampler=log.flashinfer_sampler)  # the sampler the engine said it runs, for the estimate
    if estimated:
        try:
            base = plan(req, what_ifs=False, fit_search=True)
        except (UsageError, ValueError) as exc:
            return None, f"the planner rejects the log's flags: {exc}"
        label = (f"{spec.name} on {gpu.name}, vLLM {base.vllm_semantics} rules ({base.engine}), KV memory estimated "
                 "(the log has no measurement: vLLM stopped before it)")
        return LogPlanner(req, base, int(base.memory.available_kv_cache_bytes), total, label, estimated=True), ""
    if explicit is None and not log.available_kv_gib:
        # The count is vLLM's measurement: never re-estimate what the log measured (0.7-0.8's V1
        # engine prints "# GPU blocks" / "GPU KV cache size" only).
        try:
            probe = plan(replace(req, kv_cache_memory_bytes=None), what_ifs=False)
        except (UsageError, ValueError) as exc:
            return None, f"the planner rejects the log's flags: {exc}"
        kv_bytes = kv_bytes_from_blocks(log, probe, req) or 0
        if not kv_bytes:
            return None, (f"no block count reproduces the log's KV line ({log.kv_cache_tokens or log.num_gpu_blocks} "
                          f"{'tokens' if log.kv_cache_tokens else 'blocks'}); check --model and the flags")
        req = replace(req, kv_cache_memory_bytes=kv_bytes)
    per_stage = log.available_kv_per_stage(req.tensor_parallel_size, req.pipeline_parallel_size)
    if per_stage is not None:
        req = replace(req, kv_cache_memory_per_stage=per_stage)
    try:
        base = plan(req, what_ifs=False)
    except (UsageError, ValueError) as exc:  # a flag value the planner cannot follow
        return None, f"the planner rejects the log's flags: {exc}"
    mismatch = _disagreement(base, req, log)
    label = f"{spec.name}, vLLM {base.vllm_semantics} rules ({base.engine})"
    if mismatch:
        return None, f"plan for {label} does not reproduce the log: {mismatch}"
    if log.num_gpu_blocks is None and (log.kv_cache_tokens or log.max_concurrency) and per_stage is None and kv_bytes > 0:
        # The log's own block count (recovered from tokens/concurrency) is exact; the printed GiB
        # is rounded to 10 MiB. Re-plans start from exactly the blocks vLLM had.
        implied = compare_with_log(base, req, log).measured.get("num_gpu_blocks_implied")
        if implied:
            kv_bytes = implied * base.kv.bytes_per_block
    elif log.num_gpu_blocks is not None and per_stage is None and kv_bytes > 0:
        kv_bytes = log.num_gpu_blocks * base.kv.bytes_per_block
    if kv_bytes != req.kv_cache_memory_bytes and kv_bytes > 0:
        req = replace(req, kv_cache_memory_bytes=kv_bytes)
        base = plan(req, what_ifs=False)
    return LogPlanner(req, base, kv_bytes, total, label), ""


def _disagreement(base: PlanResult, req: PlanRequest, log: StartupLog) -> str:
    """What the log printed that this plan does not reproduce ('' when it agrees)."""
    if log.needed_kv_gib is not None:
        m = _NEEDED.search(base.startup.error or "")
        got = float(m.group("gib")) if m else None
        if got is None or abs(got - log.needed_kv_gib) > 0.0051:
            return (f"vLLM needed {log.needed_kv_gib} GiB for one max_model_len request, the plan "
                    f"{got if got is not None else 'no error'}; pass --vllm-version (and --model) matching the log")
    if log.num_gpu_blocks is not None or log.kv_cache_tokens is not None or log.max_concurrency is not None:
        if req.kv_cache_memory_bytes is not None and req.kv_cache_memory_bytes <= 0:
            return ""
        measured = compare_with_log(base, req, log).measured
        if measured.get("num_gpu_blocks_implied") is None:
            return (f"no block count reproduces the log's KV line ({log.kv_cache_tokens or log.num_gpu_blocks} "
                    f"{'tokens' if log.kv_cache_tokens else 'blocks'}); check --model and the flags")
        if measured.get("blocks_within_rounding") is False:
            return (f"the log's {measured['num_gpu_blocks_implied']} blocks are outside the plan's "
                    f"{measured.get('num_gpu_blocks_range')} for the printed KV memory")
    return ""
