"""When one simulation provably stands for another: ``max_num_seqs`` and KV memory that never bound.

Below saturation most of a sweep's configurations differ only in limits the traffic never reaches:
more KV blocks (``gpu_memory_utilization``) or more sequences (``max_num_seqs``) than the run ever
used. vLLM's V1 scheduler (``Scheduler.schedule``) consults them only when it admits a waiting
request (``len(running) < max_num_seqs``, ``allocate_slots`` finding the blocks) and when a running
request grows (``allocate_slots``, else preemption). So a run S stands for a configuration T that
differs from S only in those two limits when, in S:

- no preemption happened, no request was rejected for not fitting the KV cache, and no waiting
  request was ever held back for want of KV blocks (``kv_waits == 0``: the KV cache never decided
  anything);
- if a request ever stayed waiting after a step (``max_waiting > 0``: held back by ``max_num_seqs``
  or the token budget, the only other limits the loop consults), T has S's ``max_num_seqs``
  exactly (the token budget is equal within a family); otherwise T allows at least S's;
- T's usable blocks cover the most S ever held plus the
  most one step can ask for (decodes crossing a block boundary, ``max_num_batched_tokens`` of
  prefill, and one whole prompt for ``full_sequence_must_fit`` admission), so no allocation of the
  same schedule can fail in T;
- the trace shares no prefixes (with prefix caching, more free blocks keep more cached prefixes
  alive, which changes hits) and the KV layout is one full-attention group (hybrid layouts have
  per-group rules).

Everything else that the simulation reads (GPU, TP/PP/DP, KV dtype, dtype, token budget,
max_model_len, block size, weights and KV bytes, hence the step-time profile) must be equal: the
configurations share a :func:`family_key`. T's row then reports S's run with T's own flags, plan
and ``vllm serve`` command, and names S (``reused_from``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from .share import ShareOutcome
    from .space import Candidate


def family_key(c: "Candidate", profiled: bool) -> Optional[tuple]:
    """Equal for configurations whose simulations differ only in max_num_seqs and KV blocks; None
    when the rule does not apply (a hybrid KV layout)."""
    kv, f, m = c.plan.kv, c.plan.flags, c.plan.memory
    if len(kv.groups) != 1 or kv.groups[0].spec.bounded:  # one group holding every token: the fast path
        return None
    r = c.request
    return (f.gpu, r.tensor_parallel_size, r.pipeline_parallel_size, r.data_parallel_size, f.kv_cache_dtype,
            f.dtype, f.quantization, f.max_num_batched_tokens, f.max_model_len, kv.block_size, f.enforce_eager,
            tuple(m.weights_bytes_per_stage), m.weights_gib_per_gpu, kv.bytes_per_token_per_gpu, profiled)


def trace_shares_prefixes(trace) -> bool:
    return any(r.prefix_id is not None or r.prefix_tokens for r in trace.requests)


def step_demand_blocks(c: "Candidate", max_prompt: int) -> int:
    """The most KV blocks one step of ``c`` can allocate on top of what is held: a block per
    scheduled sequence crossing a boundary (≤ max_num_seqs, twice to count prefill tails), the
    prefill tokens of the budget, and one whole prompt checked at admission."""
    f, block_size = c.plan.flags, c.plan.kv.block_size
    return 2 * f.max_num_seqs + -(-f.max_num_batched_tokens // block_size) + -(-max_prompt // block_size) + 2


def can_stand_for(source: "Candidate", runs: Sequence["ShareOutcome"], target: "Candidate", max_prompt: int,
                  judge_saturation: bool = True) -> bool:
    """True when the runs of ``source`` are, step for step, what ``target`` would do, and (with
    ``judge_saturation``) their saturation verdict is too: a verdict that weighed the completion
    ceiling does not carry over, the ceiling's burst fills max_num_seqs and the KV cache."""
    source_seqs, target_seqs = source.plan.flags.max_num_seqs, target.plan.flags.max_num_seqs
    if target_seqs < source_seqs:
        return False
    usable = target.plan.kv.usable_blocks
    for run in runs:
        if run.preemptions or run.kv_rejections or run.kv_waits:
            return False
        if run.max_waiting and target_seqs != source_seqs:
            return False  # max_num_seqs may have held requests back: more sequences would admit them
        if judge_saturation and run.ceiling_measured:
            return False
        if run.kv_peak_blocks + step_demand_blocks(target, max_prompt) > usable:
            return False
    return True
