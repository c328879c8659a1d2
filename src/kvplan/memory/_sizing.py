"""Stage 2 of ``plan()``: the KV cache sized from a :class:`ResolvedConfig`.

vLLM's ``EngineCore._initialize_kv_caches`` order: the memory budget of every pipeline stage, the
KV blocks (the minimum over the stages' workers), the admission check of one max-length request,
the auto-fit of ``--max-model-len auto``, and the capacity ladder, every row sized by the same
rule as the plan so a row equals ``kvplan plan --max-model-len <row>``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Optional

from . import admission
from ._resolve import ResolvedConfig
from .budget import PROFILE_GROWTH_FITTED_ON, BudgetTerms, estimate_budget
from .grouping import KVLayout
from .kv_specs import SizingContext
from .result import CapacityRow, to_gib

#: smaller unmodelled terms are not worth a note
MIN_UNMODELLED_BYTES = 50 << 20

LADDER = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)


@dataclass(frozen=True)
class BlockSizing:
    """The blocks of one length (the plan's, or a capacity-ladder row's)."""

    layout: KVLayout
    ctx: SizingContext
    num_gpu_blocks: int
    blocks_per_request: int
    max_concurrency: float
    kv_cache_tokens: int
    check_memory_bytes: int  # what the admission check compares a request's need against
    bytes_per_block: int  # on the stage with the fewest blocks
    stage: int  # that stage


@dataclass(frozen=True)
class KVSizing:
    """The budget, the blocks and the admission verdict of a resolved configuration."""

    budgets: tuple[BudgetTerms, ...]  # per pipeline stage
    budget: BudgetTerms  # the stage with the most weights: the one the result reports
    available_kv_bytes: tuple[int, ...]  # per pipeline stage
    source: str  # estimate, kv_cache_memory or log
    weights_oom: bool
    blocks: BlockSizing
    max_model_len: int  # after auto-fit
    max_num_batched_tokens: int  # after auto-fit
    max_fitting_model_len: int
    needed_bytes: int  # what one max_model_len request needs by the admission rule
    capacity_table: tuple[CapacityRow, ...]
    errors: tuple[admission.StartupError, ...]  # the configuration's, then the sizing's
    notes: tuple[str, ...]  # the configuration's, then the sizing's


def size_kv(config: ResolvedConfig) -> KVSizing:
    """The budget of every stage, the blocks, the auto-fit, the admission check and the ladder;
    its errors and notes follow the configuration's, in vLLM's order."""
    sem, req, layout, stages = config.semantics, config.request, config.layout, config.stages
    gpu = config.gpu
    errors = list(config.errors)
    notes = list(config.notes)
    max_model_len, max_num_batched_tokens = config.max_model_len, config.max_num_batched_tokens
    derived_max_model_len = config.derived_max_model_len

    budgets, available = _budgets_at(config, max_num_batched_tokens)
    source = req.kv_memory_source if req.kv_cache_memory_bytes is not None else "estimate"
    budget = max(budgets, key=lambda b: b.loaded_bytes)

    if config.device == "cuda" and req.kv_cache_memory_bytes is None and sem.startup_checks_free_memory:
        free = gpu.memory_bytes - budget.preexisting_bytes
        if free < budget.requested_bytes:
            errors.append(admission.free_memory_below_requested(sem, free, gpu.memory_bytes,
                                                               config.gpu_memory_utilization, budget.requested_bytes))
    weights_oom = config.device == "cuda" and budget.loaded_bytes + budget.preexisting_bytes > gpu.memory_bytes
    if weights_oom:
        errors.append(admission.weights_do_not_fit(budget.loaded_bytes, gpu.memory_bytes, budget.preexisting_bytes,
                                                   config.tensor_parallel_size, config.pipeline_parallel_size))
    elif config.device == "cuda" and req.kv_cache_memory_bytes is not None and source != "log":
        # A given KV size is allocated as given (0.11+ skips the budget for --kv-cache-memory-bytes):
        # with everything else it must fit the GPU, or the KV allocation ends in CUDA OOM; a
        # "measured" size that cannot fit was never measured.
        worst = max(zip(budgets, available), key=lambda ba: ba[0].non_kv_bytes + ba[0].preexisting_bytes + ba[1])
        if worst[0].non_kv_bytes + worst[0].preexisting_bytes + worst[1] > gpu.memory_bytes:
            error = admission.kv_cache_does_not_fit(worst[1], worst[0].non_kv_bytes, worst[0].preexisting_bytes,
                                                    gpu.memory_bytes, source)
            if source == "measured":  # the input is impossible: nothing vLLM would do
                from ..errors import UsageError

                raise UsageError(error.message)
            errors.append(error)

    # The block count, the worst stage and the memory checked depend on the memory only, not on
    # the length: the sizing before and after an auto-fit agree on them.
    blocks = size_blocks(config, max_model_len, max_num_batched_tokens, config.in_flight_tokens, available)
    longest = max(derived_max_model_len, max_model_len)
    if sem.engine == "V0":
        max_fitting_model_len = min(longest, blocks.num_gpu_blocks * layout.block_size)
    elif blocks.check_memory_bytes > 0:
        max_fitting_model_len = admission.largest_fitting_len(
            partial(_needed_bytes, config, blocks, max_num_batched_tokens), blocks.check_memory_bytes, longest)
    else:
        max_fitting_model_len = 0
    # what fits is never more than the model allows: vLLM refuses a max_model_len above its derived
    # limit before it sizes anything (_get_and_verify_max_len)
    max_fitting_model_len = min(max_fitting_model_len, derived_max_model_len)
    if config.auto_fit:
        if max_fitting_model_len == 0:
            errors.append(admission.StartupError(
                "no_kv_memory", "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a "
                "single token. Try increasing `gpu_memory_utilization`."))
        else:
            max_model_len = min(derived_max_model_len, max_fitting_model_len)
            notes.append(f"Auto-fit max_model_len: {max_model_len} (vLLM --max-model-len auto)")
            max_num_batched_tokens = config.max_num_batched_tokens_at(max_model_len)
            # the in-flight tokens stay those of the asked length's batch
            blocks = size_blocks(config, max_model_len, max_num_batched_tokens, config.in_flight_tokens, available)
    needed_for = partial(_needed_bytes, config, blocks, max_num_batched_tokens)
    tokens_fit = partial(_tokens_fit, config, blocks, max_num_batched_tokens)

    if weights_oom:
        pass  # vLLM never gets as far as sizing the KV cache
    elif blocks.check_memory_bytes <= 0 or blocks.num_gpu_blocks <= 0:
        errors.append(admission.no_memory_for_cache_blocks(sem))
    elif not tokens_fit(max_model_len):
        suggested = min(max_fitting_model_len, max_model_len)
        errors.append(admission.max_model_len_too_large(
            sem, max_model_len, needed_for(max_model_len), blocks.check_memory_bytes, suggested, layout.block_size,
            blocks.num_gpu_blocks, config.pipeline_parallel_size))

    if config.pipeline_parallel_size > 1:
        per_stage = ", ".join(
            f"stage {i} ({len(st)} layers): {to_gib(max(a, 0)):.2f} GiB, {max(int(a), 0) // b:,} blocks"
            for i, (st, a, b) in enumerate(zip(stages, available, layout.bytes_per_block)))
        notes.append(f"Per pipeline stage, as each stage's worker measures it: {per_stage}. vLLM gives every "
                     f"stage the smallest block count (stage {blocks.stage}).")
    encoder = budgets[0].encoder if source == "estimate" else None  # the first stage's, which runs the tower
    if encoder is not None:
        notes.append(f"The profile run first runs the vision encoder on {encoder.items} image(s) of {encoder.tokens_per_item:,} "
                     f"tokens ({encoder.patches_per_item:,} patches each, the processor's largest image): "
                     f"{to_gib(encoder.peak_bytes):.2f} GiB at its peak, charged when it exceeds the language model's "
                     f"dummy forward and sampler, which run with the images and their embeddings still held "
                     f"({to_gib(encoder.held_bytes):.2f} GiB).")
    workspace = budget.allreduce_workspace_bytes if source == "estimate" else 0
    if workspace:
        notes.append(f"Charged {to_gib(workspace):.2f} GiB per GPU for FlashInfer's all-reduce + RMSNorm fusion "
                     f"workspace, which vLLM {sem.label} builds at TP {config.tensor_parallel_size} while it "
                     "profiles: three buffers, each rounded up to the driver's multicast granularity (512 MiB "
                     "assumed on NVSwitch GPUs). --enforce-eager (no compilation) leaves it out.")
    if (budget.uncharged_bytes and config.device == "cuda" and not weights_oom
            and budget.requested_bytes + budget.uncharged_bytes + budget.preexisting_bytes > gpu.memory_bytes):
        errors.append(admission.uncharged_oom(budget.uncharged_bytes, budget.requested_bytes, budget.preexisting_bytes,
                                              gpu.memory_bytes, sem.label))
    if budget.uncharged_bytes and source == "estimate":
        notes.append(f"vLLM {sem.label} (V0) does not charge {to_gib(budget.uncharged_bytes):.2f} GiB of LoRA / draft-model "
                     "weights to its KV budget (allocated after its weights are measured: vLLM issue #14450, PR #14067): "
                     "the KV cache is sized as if they were not there, so they must fit in the memory "
                     "--gpu-memory-utilization leaves free, or vLLM runs out of memory later.")
    if source == "estimate" and budget.profile_growth_bytes:
        notes.append(f"Charged {to_gib(budget.profile_growth_bytes):.2f} GiB of non-torch memory that vLLM {sem.label} "
                     f"gains while it profiles at TP {config.tensor_parallel_size} (CUDA graphs profiled inside the "
                     "window; communicator buffers at TP > 1): no source line sizes it, so it is fitted, per TP, to "
                     f"{PROFILE_GROWTH_FITTED_ON}.")
    if source == "estimate":
        for term in budget.unmodelled:
            if term.bytes >= MIN_UNMODELLED_BYTES:
                notes.append(f"±{to_gib(term.bytes):.2f} GiB not modelled: {term.what}.")
    if blocks.max_concurrency >= config.max_num_seqs and not errors:
        notes.append(f"The KV cache holds {blocks.max_concurrency:.0f} requests of {max_model_len:,} tokens, more "
                     f"than --max-num-seqs {config.max_num_seqs}: the scheduler's limit, not memory, caps concurrency.")

    table = _capacity_ladder(config, max_model_len, available, blocks, tokens_fit)
    return KVSizing(
        budgets=tuple(budgets), budget=budget, available_kv_bytes=tuple(available), source=source,
        weights_oom=weights_oom, blocks=blocks, max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens, max_fitting_model_len=int(max_fitting_model_len),
        needed_bytes=needed_for(max_model_len), capacity_table=table, errors=tuple(errors), notes=tuple(notes),
    )


def _needed_bytes(config: ResolvedConfig, blocks: BlockSizing, max_num_batched_tokens: int, length: int) -> int:
    """KV bytes the admission check says one request of ``length`` tokens needs on the stage with
    the fewest blocks."""
    ctx = SizingContext(length, max_num_batched_tokens, config.in_flight_tokens)
    return config.layout.needed_bytes(ctx, config.semantics.needed_memory_rule, config.stages[blocks.stage],
                                      blocks.stage)


def _tokens_fit(config: ResolvedConfig, blocks: BlockSizing, max_num_batched_tokens: int, length: int) -> bool:
    """Whether vLLM's admission check passes a request of ``length`` tokens (V0: the blocks hold it)."""
    if config.semantics.engine == "V0":
        return length <= blocks.num_gpu_blocks * config.layout.block_size
    return _needed_bytes(config, blocks, max_num_batched_tokens, length) <= blocks.check_memory_bytes


def _budgets_at(config: ResolvedConfig, max_num_batched_tokens: int) -> tuple[list[BudgetTerms], list[int]]:
    """The memory budget of every stage when vLLM profiles ``max_num_batched_tokens`` tokens per
    step, and the KV bytes it leaves (a measured per-stage figure replaces them)."""
    terms = [estimate_budget(config, stage, max_num_batched_tokens) for stage in config.weights]
    if config.request.kv_cache_memory_per_stage is not None:
        return terms, list(config.request.kv_cache_memory_per_stage)
    return terms, [b.available_kv_bytes for b in terms]


def size_blocks(config: ResolvedConfig, max_model_len: int, max_num_batched_tokens: int, in_flight_tokens: int,
                available: list[int]) -> BlockSizing:
    """The blocks of every stage (``--num-gpu-blocks-override`` replaces the memory), the
    smallest of them, and the capacity the version's start-up line prints."""
    sem, layout = config.semantics, config.layout
    override: Optional[int] = config.request.num_gpu_blocks_override
    ctx = SizingContext(max_model_len, max_num_batched_tokens, in_flight_tokens)
    bytes_per_block = layout.bytes_per_block
    if override is not None:
        available = [override * b for b in bytes_per_block]
    per_stage = [max(a, 0) // b for a, b in zip(available, bytes_per_block)]
    num_gpu_blocks = min(per_stage)
    worst = per_stage.index(num_gpu_blocks)
    worst_bytes_per_block = bytes_per_block[worst]
    check = available[worst] - (worst_bytes_per_block if sem.check_reserves_null_block else 0)
    blocks_per_request = layout.blocks_per_request(ctx, sem.per_group_blocks_per_request)
    max_concurrency = num_gpu_blocks / blocks_per_request if blocks_per_request else 0.0
    style = sem.capacity_log_style
    if style in ("v1-021", "v1-033"):
        tokens = int(max_concurrency * max_model_len)
    elif style == "v1-011":
        tokens = num_gpu_blocks // len(layout.groups) * layout.block_size
    else:
        tokens = num_gpu_blocks * layout.block_size
        max_concurrency = tokens / max_model_len
    return BlockSizing(layout, ctx, num_gpu_blocks, blocks_per_request, max_concurrency, tokens, check,
                       worst_bytes_per_block, worst)


def _capacity_ladder(config: ResolvedConfig, max_model_len: int, available: list[int], blocks: BlockSizing,
                     tokens_fit: Callable[[int], bool]) -> tuple[CapacityRow, ...]:
    """The powers of two up to the longest length vLLM accepts, plus the plan's and the model's
    own lengths: the capacity and whether vLLM starts at each, every other flag as asked."""
    derived = config.derived_max_model_len
    top = max(derived, max_model_len)
    lengths = sorted({x for x in LADDER if x <= top} | {max_model_len, derived})
    model_max_length = config.model.max_len_keys.get("model_max_length", 0)
    rows = []
    for length in lengths:
        batched = config.max_num_batched_tokens_at(length)
        row_available = _budgets_at(config, batched)[1] if length != max_model_len else available
        row = size_blocks(config, length, batched, config.in_flight_tokens_for(batched), row_available)
        allowed = length <= derived or length <= model_max_length
        rows.append(CapacityRow(length, round(row.max_concurrency, 4), row.kv_cache_tokens,
                                allowed and blocks.num_gpu_blocks > 0 and tokens_fit(length),
                                round(row.max_concurrency * config.data_parallel_size, 4)))
    return tuple(rows)
