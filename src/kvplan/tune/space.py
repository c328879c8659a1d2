"""The search space of ``kvplan tune`` and its pruning by the memory plan.

A configuration is a vLLM replica (GPU type, tensor × pipeline parallel, the scheduler and memory
flags) repeated data-parallel times to fill a GPU count. Every combination first goes through
:func:`kvplan.memory.plan`: what vLLM would refuse to start (heads not divisible by TP, no KV
memory, a ``max_model_len`` above the model's limit or above what the KV cache holds) never reaches
the simulator, and is counted by vLLM's error kind. Combinations that resolve to the same vLLM flags
(``None`` = vLLM's default equal to a listed value) are simulated once.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterator, Optional

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from ..memory import PlanRequest, PlanResult
    from ..traffic.trace import Trace

OBJECTIVES = ("goodput_per_gpu", "min_gpus")
KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")
#: Pruned without a plan: kvplan's own rule, not a vLLM start-up error.
FP8_UNSUPPORTED = "fp8_kv_unsupported_by_gpu"
BELOW_WORKLOAD = "max_model_len_below_workload"


@dataclass(frozen=True)
class TuneSpace:
    """The values to try for each flag. ``None`` in a tuple means vLLM's own default; an empty
    ``gpus`` / ``tensor_parallel`` / ``gpu`` means the base request's. ``max_model_len`` values
    below what the workload needs are dropped (counted), and ``None`` there means exactly that need:
    the largest prompt + output of the trace, or its ``coverage_pct`` percentile (e.g. 99.9 for a
    request log, whose longest few requests vLLM then rejects, as it would)."""

    max_num_seqs: tuple[Optional[int], ...] = (64, 128, 256)
    max_num_batched_tokens: tuple[Optional[int], ...] = (None,)
    max_model_len: tuple[Optional[int], ...] = (None,)
    gpu_memory_utilization: tuple[Optional[float], ...] = (0.9, 0.95)
    kv_cache_dtype: tuple[str, ...] = ("auto", "fp8")
    gpus: tuple[int, ...] = ()
    tensor_parallel: tuple[int, ...] = ()
    gpu: tuple[str, ...] = ()
    coverage_pct: Optional[float] = None

    def validate(self) -> "TuneSpace":
        def positive(name: str, flag: str, allow_none: bool = True) -> None:
            values = getattr(self, name)
            for v in values:
                if v is None and allow_none:
                    continue
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise UsageError(f"{flag}: {v!r} is not a positive integer")

        for name, flag in (("max_num_seqs", "--max-num-seqs"), ("max_num_batched_tokens", "--max-num-batched-tokens"),
                           ("max_model_len", "--max-model-len")):
            if not getattr(self, name):
                raise UsageError(f"{flag}: give at least one value")
            positive(name, flag)
        positive("gpus", "--gpus", allow_none=False)
        positive("tensor_parallel", "--tensor-parallel-size", allow_none=False)
        if not self.gpu_memory_utilization:
            raise UsageError("--gpu-memory-utilization: give at least one value")
        for u in self.gpu_memory_utilization:
            if u is not None and not (isinstance(u, (int, float)) and 0 < u <= 1):
                raise UsageError(f"--gpu-memory-utilization: {u!r} is not in (0, 1]")
        if not self.kv_cache_dtype:
            raise UsageError("--kv-cache-dtype: give at least one value")
        for d in self.kv_cache_dtype:
            if d not in KV_DTYPES:
                raise UsageError(f"--kv-cache-dtype: {d!r} is not one of {', '.join(KV_DTYPES)}")
        if self.coverage_pct is not None and not 0 < self.coverage_pct <= 100:
            raise UsageError(f"--coverage: {self.coverage_pct!r} is not a percentile in (0, 100]")
        return self

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Candidate:
    """One configuration that starts: the deployment's request (data_parallel_size = DP replicas)
    and its plan (KV blocks and batch limits per replica: what each replica's simulation uses)."""

    index: int  # position in the deduplicated list: also the deterministic tie-break
    request: "PlanRequest"
    plan: "PlanResult"

    @property
    def data_parallel_size(self) -> int:
        return self.request.data_parallel_size

    @property
    def gpus(self) -> int:
        return self.plan.parallel.gpus_per_replica * self.data_parallel_size

    def flags(self) -> dict[str, Any]:
        f = self.plan.flags
        return {"gpu": f.gpu, "gpus": self.gpus, "tensor_parallel_size": self.request.tensor_parallel_size,
                "pipeline_parallel_size": self.request.pipeline_parallel_size,
                "data_parallel_size": self.data_parallel_size, "max_num_seqs": f.max_num_seqs,
                "max_num_batched_tokens": f.max_num_batched_tokens, "max_model_len": f.max_model_len,
                "gpu_memory_utilization": f.gpu_memory_utilization, "kv_cache_dtype": f.kv_cache_dtype,
                "block_size": f.block_size}

    def label(self) -> str:
        f = self.flags()
        par = f"TP{f['tensor_parallel_size']}" + (f" PP{f['pipeline_parallel_size']}"
                                                  if f["pipeline_parallel_size"] > 1 else "")
        return (f"{f['gpu']}×{f['gpus']} {par} DP{f['data_parallel_size']} seqs={f['max_num_seqs']} "
                f"batched={f['max_num_batched_tokens']} len={f['max_model_len']} "
                f"util={f['gpu_memory_utilization']:g} kv={f['kv_cache_dtype']}")


@dataclass(frozen=True)
class Pruned:
    """Combinations that never reached the simulator, by reason (vLLM's error kind, or kvplan's)."""

    total: int
    by_reason: tuple[tuple[str, int], ...]
    examples: tuple[tuple[str, str], ...]  # (reason, one full message)
    duplicates: int  # combinations resolving to flags already in the list

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "by_reason": dict(self.by_reason), "examples": dict(self.examples),
                "duplicates": self.duplicates}


def workload_floor(trace: "Trace", coverage_pct: Optional[float]) -> int:
    """The smallest max_model_len the workload needs: prompt + output of the trace's requests, at
    the ``coverage_pct`` percentile (nearest rank, as ``kvplan lengths`` computes it) or the max."""
    from ..workload.stats import Hist

    hist = Hist()
    for r in trace.requests:
        hist.add(r.prompt_tokens + r.output_tokens)
    dist = hist.freeze()
    if not dist.count:
        raise UsageError("the trace has no requests")
    return dist.max if coverage_pct is None or coverage_pct >= 100 else dist.quantile(coverage_pct)


# The default max_model_len is the workload's need rounded up to a multiple of 1,024 tokens: a round
# number ("2K", "18K"), a multiple of every power-of-two block size, and headroom for prompts a
# little longer than the trace's (vLLM rejects any request above max_model_len). Never above the
# model's own limit, never below the need.
DEFAULT_LEN_MULTIPLE = 1024


def model_limit(base: "PlanRequest") -> float:
    """The model's own max_model_len (vLLM's derived limit), or infinity when it cannot be read."""
    from ..memory.defaults import derive_max_model_len
    from ..memory.semantics import semantics

    try:
        limit, _ = derive_max_model_len(base.model, semantics(base.vllm_version, base.engine))
    except UsageError:
        return float("inf")
    return limit


def coverage_info(trace: "Trace", coverage_pct: Optional[float], base: "PlanRequest") -> dict[str, Any]:
    """Which coverage tune used, as ``kvplan lengths`` counts it: the percentile of prompt + output
    asked, the tokens it needs, the model's limit, and (when the need is above the limit) the
    max_model_len used instead - the limit - with the share of requests it holds and how many are
    longer (vLLM rejects them, as it would)."""
    need = workload_floor(trace, coverage_pct)
    limit = model_limit(base)
    used = min(need, limit)
    totals = [r.prompt_tokens + r.output_tokens for r in trace.requests]
    longer = sum(1 for t in totals if t > used)
    return {"percentile": coverage_pct if coverage_pct is not None else 100.0, "need_tokens": need,
            "model_limit": None if limit == float("inf") else int(limit), "max_model_len_floor": int(used),
            "capped_at_model_limit": need > limit, "requests": len(totals), "longer": longer,
            "covered_pct": round(100.0 * (len(totals) - longer) / len(totals), 3) if totals else None}


def recommended_max_model_len(need: int, base: "PlanRequest") -> int:
    """The max_model_len tune tries by default (the space's ``None``): ``need`` rounded up to a
    multiple of :data:`DEFAULT_LEN_MULTIPLE`, capped at the model's derived limit when that is at
    least ``need`` (else ``need``: the plan then says why it does not start)."""
    from ..memory.defaults import derive_max_model_len
    from ..memory.semantics import semantics
    from ..workload.stats import round_up

    rounded = round_up(need, DEFAULT_LEN_MULTIPLE)
    try:
        limit, _ = derive_max_model_len(base.model, semantics(base.vllm_version, base.engine))
    except UsageError:
        return rounded
    return need if limit < need else min(rounded, limit)


def _parallel_choices(base: "PlanRequest", space: TuneSpace) -> list[tuple[int, int]]:
    """(tensor parallel, data parallel) pairs. With ``gpus``: every TP (the listed ones, else the
    powers of two) that divides GPUs / PP, DP filling the rest; without: the listed TPs (or the
    base's) at the base's DP."""
    pp = base.pipeline_parallel_size
    if not space.gpus:
        return [(tp, base.data_parallel_size) for tp in (space.tensor_parallel or (base.tensor_parallel_size,))]
    pairs = []
    for n in space.gpus:
        if n % pp:
            continue
        per_pp = n // pp
        tps = space.tensor_parallel or tuple(t for t in range(1, per_pp + 1) if t & (t - 1) == 0)
        pairs.extend((tp, per_pp // tp) for tp in tps if per_pp % tp == 0)
    return pairs


def combinations(base: "PlanRequest", space: TuneSpace, floor: int) -> Iterator[tuple[Optional["PlanRequest"], int, str]]:
    """Every (replica request, data-parallel size, reason) of the space; the request is None when the
    combination is dropped before planning, with ``reason`` saying why."""
    from ..hardware import find_gpu

    gpu_list = [find_gpu(name) for name in space.gpu] if space.gpu else [base.gpu]
    default_len = recommended_max_model_len(floor, base)
    max_model_lens = sorted({default_len if m is None else m for m in space.max_model_len})
    pairs = _parallel_choices(base, space)
    for gpu in gpu_list:
        for tp, dp in pairs:
            for kv in space.kv_cache_dtype:
                for util in space.gpu_memory_utilization:
                    same_memory = (gpu.name == base.gpu.name and tp == base.tensor_parallel_size
                                   and util == base.gpu_memory_utilization)
                    for max_model_len in max_model_lens:
                        for max_num_seqs in space.max_num_seqs:
                            for max_num_batched_tokens in space.max_num_batched_tokens:
                                if kv.startswith("fp8") and _fp8_refused(base, gpu):
                                    yield None, dp, FP8_UNSUPPORTED
                                    continue
                                if max_model_len < floor:
                                    yield None, dp, BELOW_WORKLOAD
                                    continue
                                req = replace(base, gpu=gpu, tensor_parallel_size=tp, data_parallel_size=dp,
                                              kv_cache_dtype=kv, gpu_memory_utilization=util,
                                              max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                                              max_num_batched_tokens=max_num_batched_tokens)
                                if not same_memory:
                                    # A measured KV size belongs to one GPU, TP and utilization.
                                    req = replace(req, kv_cache_memory_bytes=None, kv_cache_memory_per_stage=None,
                                                  num_gpu_blocks_override=None, kv_memory_source="kv_cache_memory")
                                yield req, dp, ""


def plan_combination(req: "PlanRequest", shared: Any = None) -> tuple[str, str, Optional["PlanResult"]]:
    """(error kind, vLLM's text, plan): kind "" when the configuration starts. Runs in a worker."""
    from ..memory import plan

    try:
        res = plan(req, what_ifs=False)
    except UsageError as exc:
        return "invalid", str(exc), None
    if not res.startup.ok:
        return res.startup.error_kind or "does_not_start", res.startup.error or "", None
    return "", "", res


def expand(base: "PlanRequest", space: TuneSpace, trace: "Trace", plan_all=None) -> tuple[list[Candidate], Pruned, int]:
    """Plan every combination; return the ones that start (deduplicated), what was pruned, and the
    workload's max_model_len floor. ``plan_all(fn, requests)`` maps :func:`plan_combination` over the
    requests (a process pool in a sweep; in this process by default)."""
    space.validate()
    floor = min(workload_floor(trace, space.coverage_pct), model_limit(base))
    reasons: dict[str, int] = {}
    examples: dict[str, str] = {}
    to_plan = []
    for req, _dp, why in combinations(base, space, floor):
        if req is None:
            reasons[why] = reasons.get(why, 0) + 1
            examples.setdefault(why, _skip_text(why, floor))
        else:
            to_plan.append(req)
    planned = plan_all(plan_combination, to_plan) if plan_all else [plan_combination(r) for r in to_plan]
    seen: set = set()
    dupes = 0
    out: list[Candidate] = []
    for req, (kind, text, res) in zip(to_plan, planned):
        if res is None:
            reasons[kind] = reasons.get(kind, 0) + 1
            examples.setdefault(kind, text or kind)
            continue
        key = (res.flags, res.parallel)
        if key in seen:
            dupes += 1
            continue
        seen.add(key)
        out.append(Candidate(len(out), req, res))
    pruned = Pruned(sum(reasons.values()), tuple(sorted(reasons.items())), tuple(sorted(examples.items())), dupes)
    return out, pruned, floor


def _fp8_refused(base, gpu) -> bool:
    """The planner's rule (VllmSemantics.fp8_kv_cache): vLLM refuses an fp8 KV cache only where V1
    is forced on a version whose V1 took fp8 KV on Hopper alone; elsewhere it starts (converting
    in the kernel below sm 8.9), and the plan says so."""
    from ..memory.semantics import semantics

    return semantics(base.vllm_version, base.engine).fp8_kv_cache(gpu.sm, base.device, base.engine is not None) \
        == "refused"


def _skip_text(why: str, floor: int) -> str:
    if why == FP8_UNSUPPORTED:
        return ("fp8 KV cache refused by this vLLM version on this GPU (V1 forced; its V1 took fp8 KV only with "
                "FlashAttention 3 on Hopper)")
    return f"below the workload's need of {floor:,} tokens (prompt + output)"


def split_round_robin(trace: "Trace", shares: int) -> list["Trace"]:
    """Request i goes to replica i mod ``shares`` (in arrival order): what a round-robin load
    balancer in front of DP replicas does; each replica sees rate / shares."""
    from dataclasses import replace as dc_replace

    if shares <= 1:
        return [trace]
    mc = getattr(trace, "max_concurrency", None)
    out = []
    for k in range(shares):
        kw = {}
        if mc is not None:  # the client's slots spread over the replicas as its requests are
            kw["max_concurrency"] = max(1, mc // shares + (1 if k < mc % shares else 0))
        out.append(dc_replace(trace, requests=trace.requests[k::shares],
                              source=f"{trace.source} (replica {k + 1}/{shares}, round-robin)", **kw))
    return out
