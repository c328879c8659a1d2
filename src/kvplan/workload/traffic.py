"""How a plan meets the real traffic: ``kvplan plan --requests FILE``.

vLLM's capacity line divides the KV blocks by the blocks one ``max_model_len`` request could
take: the worst case. Real requests are shorter. :func:`traffic_fit` divides the same blocks by
the *mean* blocks per request over the observed length mix, each request counted at its final
length (prompt + output: the most it holds, just before it finishes), group by group as vLLM
allocates them (each group's KV spec counts: full-attention and MLA groups grow with the length,
sliding-window and chunked groups hold only the blocks their window still reads, recurrent
(Mamba) state is one block whatever the length).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from .stats import Dist, Hist

@dataclass(frozen=True)
class TrafficFit:
    recommended_max_model_len: Optional[int]
    plan_max_model_len: int
    max_model_len_ok: bool  # the plan's max_model_len holds the recommended one
    rejected_share: float  # at the plan's max_model_len
    clamped_share: float
    truncated_share: float
    block_size: int
    num_gpu_blocks: int
    mean_blocks_per_request: float  # over the observed mix, at final length
    p99_blocks_per_request: int
    worst_blocks_per_request: int  # one max_model_len request (vLLM's capacity line)
    requests_fit_at_mix: float  # num_gpu_blocks / mean blocks
    requests_fit_at_p99: float
    requests_fit_worst_case: float  # vLLM's "Maximum concurrency"
    max_num_seqs: int
    needed_concurrency: Optional[int]  # peak in-flight requests measured from the log
    needed_concurrency_p99: Optional[int]
    needed_concurrency_source: Optional[str]
    fits: Optional[bool]  # capacity at the mix ≥ the needed peak (None when not measured)
    block_waste_share: float  # at the plan's block size
    block_waste_gib_full_cache: float  # per GPU
    counted_by: dict
    records_used: int
    records_skipped: dict
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _group_block_fns(plan):
    """One function per KV group: tokens → blocks a request holds in that group once all its
    tokens are computed (the group's spec: ``KVCacheSpec.blocks_held``)."""
    return tuple((lambda n, held=g.spec.blocks_held: held(n, n)) for g in plan.kv.groups)


def blocks_for(plan, tokens: int) -> int:
    return sum(fn(tokens) for fn in _group_block_fns(plan))


def traffic_fit(plan, lengths) -> TrafficFit:
    """A PlanResult and a LengthsResult → a :class:`TrafficFit`."""
    notes: list[str] = []
    hist = Hist()
    for v, n in lengths.final_length_counts:
        hist.add(v, n)
    final: Dist = hist.freeze()
    L = plan.flags.max_model_len
    fns = _group_block_fns(plan)
    blocks = lambda n: sum(fn(min(n, L)) for fn in fns)  # noqa: E731 - a request never holds more than L
    worst = plan.kv.blocks_per_request or blocks(L)
    mean_blocks = final.mean_of(blocks) if final.count else 0.0
    p99_blocks = blocks(final.quantile(99)) if final.count else 0
    nb = plan.kv.num_gpu_blocks
    fit_mix = nb / mean_blocks if mean_blocks else 0.0
    fit_p99 = nb / p99_blocks if p99_blocks else 0.0
    fit_worst = nb / worst if worst else 0.0
    cov = next((c for c in _coverage_at(lengths, L)), None)
    rec = lengths.recommendation.max_model_len
    ok = rec is None or L >= rec
    if not ok:
        notes.append(f"max_model_len {L:,} is below the recommended {rec:,} for this traffic.")
    arr = lengths.arrivals
    need = need99 = src = None
    if arr is not None and arr.concurrency_peak is not None:
        need, need99, src = arr.concurrency_peak, arr.concurrency_p99, "log (start + duration of each request)"
    elif arr is not None:
        notes.append("The log has timestamps but no durations: the concurrency it needs cannot be measured "
                     "(give --duration-field to kvplan lengths).")
    fits = None if need is None else (fit_mix >= need and plan.flags.max_num_seqs >= need)
    if need is not None and plan.flags.max_num_seqs < need:
        notes.append(f"--max-num-seqs {plan.flags.max_num_seqs} is below the {need} requests in flight at peak.")
    B = plan.kv.block_size
    alloc = final.mean_of(lambda v: -(-v // B) * B) if final.count else 0.0
    waste = (alloc - final.mean) / alloc if alloc else 0.0
    if any(g.spec.bounded for g in plan.kv.groups):
        notes.append("Hybrid KV layout: sliding-window/recurrent groups hold a bounded number of blocks per request; "
                      "blocks per request are summed over groups as vLLM allocates them.")
    if lengths.estimated:
        notes.append("Some request lengths are estimates (characters per token): so is this fit.")
    return TrafficFit(
        recommended_max_model_len=rec, plan_max_model_len=L, max_model_len_ok=ok,
        rejected_share=cov.rejected_share if cov else 0.0, clamped_share=cov.clamped_share if cov else 0.0,
        truncated_share=cov.truncated_share if cov else 0.0, block_size=B, num_gpu_blocks=nb,
        mean_blocks_per_request=round(mean_blocks, 3), p99_blocks_per_request=p99_blocks,
        worst_blocks_per_request=worst, requests_fit_at_mix=round(fit_mix, 2), requests_fit_at_p99=round(fit_p99, 2),
        requests_fit_worst_case=round(fit_worst, 2), max_num_seqs=plan.flags.max_num_seqs,
        needed_concurrency=need, needed_concurrency_p99=need99, needed_concurrency_source=src, fits=fits,
        block_waste_share=round(waste, 6),
        block_waste_gib_full_cache=round(waste * nb * plan.kv.bytes_per_block / (1 << 30), 4),
        counted_by=dict(lengths.counted_by), records_used=lengths.records.used,
        records_skipped=dict(lengths.records.skipped), notes=tuple(notes))


def _coverage_at(lengths, L: int):
    """The coverage row at exactly L, recomputed from the result's exact counts when absent."""
    for row in lengths.coverage:
        if row.max_model_len == L:
            yield row
            return
    from .finalize import coverage_at  # the exact counts need the histograms: recompute

    yield coverage_at(lengths, L)
