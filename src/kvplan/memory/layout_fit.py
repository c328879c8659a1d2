"""The smallest tensor × pipeline parallel layout that starts a model at the asked context.

Every FAILS verdict says how many GPUs it would take. The rule, stated in the
output: first the GPUs the user asked for, split another way (TP 3 on 64 heads fails, TP 1 × PP 3
on the same 3 GPUs starts: a smaller layout would also give up KV memory); then the smallest
layout: TP first, then PP, as vLLM's distributed-serving guide advises (TP inside a node, PP
across nodes). TP is a divisor of the attention heads that vLLM accepts
(``verify_with_parallel_config``: heads % TP == 0; the KV heads must split evenly or be
replicated evenly: kv_heads % TP == 0 or TP % kv_heads == 0) and at most one node
(``--gpus-per-node``). The answer is the smallest such TP that starts at PP 1; when none does,
the smallest PP (up to the number of layers) at which one does, with the smallest TP there.
Every other flag stays as asked, the asked ``max_model_len`` included. A measured
KV memory (``--kv-cache-memory``, a log) belongs to the asked layout only, so other layouts are
planned from the estimate, and the answer says so.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Optional

from ..models import params as mparams
from .result import LayoutFit

if TYPE_CHECKING:  # the plan's result, read by the text below
    from .result import PlanResult

#: errors that no number of GPUs changes (a length above the model's limit, a block size)
NOT_A_GPU_COUNT_PROBLEM = {
    "max_model_len_above_derived": "the length is above the model's own limit: no number of GPUs changes that",
    "block_size": "the block size is refused whatever the layout",
    "scheduler_config": "the scheduler's limits (max_num_batched_tokens, max_num_seqs, max_model_len) are refused "
                        "whatever the layout",
    "free_memory": "other processes hold the GPU's memory: more GPUs of the same kind do not free it",
    "lora_config": "vLLM refuses the LoRA flags themselves: no number of GPUs changes that",
    "speculative_config": "vLLM refuses the --speculative-config itself: no number of GPUs changes that",
    "swap_space": "the swap space is checked against the host's memory, not the GPUs'",
}
MAX_GPUS = 512
RULE = ("the asked number of GPUs first, split as TP × PP with the largest TP that starts; else TP first, then PP: "
        "the smallest TP that starts at PP 1 (TP divides the attention heads, splits or evenly replicates the KV "
        "heads, and fits in one node); if none, the smallest PP (≤ layers) with the smallest TP there; every other "
        "flag as asked")


def allowed_tensor_parallel_sizes(num_heads: int, num_kv_heads: int, gpus_per_node: int) -> list[int]:
    out = []
    for tp in range(1, min(num_heads, gpus_per_node) + 1):
        if num_heads % tp:
            continue
        if num_kv_heads and num_kv_heads % tp and tp % num_kv_heads:
            continue
        out.append(tp)
    return out


def smallest_fitting_layout(req, result_kind: Optional[str], plan_fn: Callable) -> Optional[LayoutFit]:
    """The smallest layout that starts ``req`` (a PlanRequest) at its max_model_len, or a
    LayoutFit with ``found=False`` saying why there is none. ``plan_fn(req)`` plans without
    what-ifs or this search (the planner passes itself)."""
    spec = req.model
    asked = (req.tensor_parallel_size, req.pipeline_parallel_size)
    if result_kind in NOT_A_GPU_COUNT_PROBLEM:
        return LayoutFit(False, None, None, None, None, None, req.max_model_len, "", (), "", RULE,
                         NOT_A_GPU_COUNT_PROBLEM[result_kind], "estimate")
    measured = req.kv_cache_memory_bytes is not None or req.kv_cache_memory_per_stage is not None
    base = replace(req, kv_cache_memory_bytes=None, kv_cache_memory_per_stage=None, num_gpu_blocks_override=None,
                   kv_memory_source="kv_cache_memory", measured=None, notes=())
    tps = allowed_tensor_parallel_sizes(spec.num_attention_heads, spec.num_kv_heads, req.gpus_per_node)
    max_pp = max(spec.num_layers, 1)
    # Cheap lower bound: the weights alone, spread evenly, must fit in one GPU's memory each.
    dtype_bytes = 4 if req.dtype in ("float32", "float") else 2
    try:
        total_weights = sum(s.bytes_per_rank for s in mparams.weights_per_rank(spec, 1, 1, dtype_bytes, spec.quantization))
    except Exception:  # noqa: BLE001 - the bound is an optimisation only
        total_weights = 0
    cache: dict = {}

    def starts(tp: int, pp: int):
        """The plan of (tp, pp) when it starts, else None."""
        if (tp, pp) not in cache:
            gpus = tp * pp
            if (tp, pp) == asked and not measured:
                cache[(tp, pp)] = None  # the asked layout is the one that fails
            elif total_weights and total_weights / gpus > req.gpu.memory_bytes:
                cache[(tp, pp)] = None  # the weights alone cannot fit
            else:
                r = plan_fn(replace(base, tensor_parallel_size=tp, pipeline_parallel_size=pp))
                cache[(tp, pp)] = r if r.startup.ok else None
        return cache[(tp, pp)]

    if not tps:
        return LayoutFit(False, None, None, None, None, None, req.max_model_len, "", (), "", RULE,
                         "no tensor parallel size divides the attention heads within one node", "estimate")

    def found(tp: int, pp: int, r) -> LayoutFit:
        gpus = tp * pp
        nodes = -(-gpus // req.gpus_per_node)
        return LayoutFit(True, tp, pp, gpus, gpus * req.data_parallel_size, nodes * req.data_parallel_size,
                         r.flags.max_model_len, r.serve_command, r.serve_argv, r.serve_config_yaml, RULE, "",
                         "estimate" if measured or r.memory.source == "estimate" else r.memory.source)

    # the GPUs the user has, split another way: the largest TP first (TP inside a node)
    asked_gpus = asked[0] * asked[1]
    for tp in sorted((t for t in tps if asked_gpus % t == 0), reverse=True):
        pp = asked_gpus // tp
        if pp <= max_pp and (tp, pp) != asked and starts(tp, pp) is not None:
            return found(tp, pp, starts(tp, pp))
    # More GPUs per stage or more stages only add KV memory per GPU, so the search is monotone: the
    # smallest PP at which the largest TP starts (doubling, then bisection), then the smallest TP there.
    widest = tps[-1]
    pp_hi = 1
    while pp_hi <= max_pp and not _starts_any(starts, tps, pp_hi, widest):
        pp_hi = pp_hi * 2 if pp_hi * 2 <= max_pp or pp_hi == max_pp else max_pp
        if pp_hi * widest > MAX_GPUS:
            pp_hi = max_pp + 1
    if pp_hi <= max_pp:
        lo = pp_hi // 2 + 1 if pp_hi > 1 else 1
        hi = pp_hi
        while lo < hi:
            mid = (lo + hi) // 2
            if _starts_any(starts, tps, mid, widest):
                hi = mid
            else:
                lo = mid + 1
        pp = hi
        for tp in tps:
            r = starts(tp, pp)
            if r is not None:
                return found(tp, pp, r)
    return LayoutFit(False, None, None, None, None, None, req.max_model_len, "", (), "", RULE,
                     f"no layout of up to {MAX_GPUS} {req.gpu.name} GPUs starts at this max_model_len", "estimate")


def _starts_any(starts: Callable, tps: list[int], pp: int, widest: int) -> bool:
    """Whether the widest TP starts at this PP (or, when the widest is the asked, failing layout,
    the next one)."""
    if starts(widest, pp) is not None:
        return True
    return len(tps) > 1 and starts(tps[-2], pp) is not None and widest * pp != 0


def layout_fit_text(r: "PlanResult") -> Optional[str]:
    """On a FAILS verdict: the layout that starts at the asked length (on the same GPUs, else the smallest)."""
    f = r.startup.fits_with
    if r.startup.ok or f is None:
        return None
    if not f.found:
        return f"More GPUs: {f.reason}."
    node = r.parallel.gpus_per_node
    layout = f"TP {f.tensor_parallel_size} × PP {f.pipeline_parallel_size}"
    dp = f" per replica, {f.total_gpus} in all" if r.parallel.data_parallel_size > 1 else ""
    basis = " (KV memory estimated for that layout)" if f.kv_memory_source == "estimate" and r.memory.source != "estimate" else ""
    same = f.gpus_per_replica == r.parallel.gpus_per_replica
    head = "On the same GPUs, the layout that starts" if same else "Smallest layout that starts"
    return (f"{head} at max_model_len {f.max_model_len:,}: {layout} = {f.gpus_per_replica} "
            f"{r.flags.gpu} GPU{'s' if f.gpus_per_replica != 1 else ''}{dp} ({f.nodes} node{'s' if f.nodes != 1 else ''} "
            f"of {node}){basis}. Rule: {f.rule}.")
