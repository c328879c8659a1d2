"""The budget terms of the serve flags that move memory beyond the model and its KV cache: LoRA
(:mod:`kvplan.memory.lora`), speculative decoding (:mod:`kvplan.memory.spec_decode`) and CPU offload
(:mod:`kvplan.memory.offload`), for one GPU, as :func:`kvplan.memory.budget.estimate_budget` charges them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .lora import lora_activation_bytes, lora_memory
from .spec_decode import rejection_sampler_bytes_per_logit

if TYPE_CHECKING:
    from ..models.params import StageWeights
    from ._resolve import ResolvedConfig


@dataclass(frozen=True)
class ServeFlagTerms:
    """What LoRA, speculative decoding and CPU offload change in one GPU's budget (all 0 without them)."""

    lora_bytes: int = 0
    draft_weights_bytes: int = 0
    offloaded_bytes: int = 0
    drafter_forward_bytes: int = 0  # the drafter's dummy run, with the target's hidden states it is handed
    forward_extra_bytes: int = 0  # LoRA's shrink buffer; V0's copy of an offloaded layer
    rejection_bytes_per_logit: int = 0  # the dummy rejection sampler, per request row and vocabulary entry
    drafter_layers: int = 0
    decode_query_len: int = 1
    cudagraph_cases: int = 1
    #: of lora_bytes + draft_weights_bytes, what the version's budget does not charge (V0: allocated
    #: after the load measurement, VllmSemantics.v0_profile_skips_late_allocations)
    uncharged_bytes: int = 0


def serve_flag_terms(config: ResolvedConfig, stage: StageWeights, max_num_batched_tokens: int, rows: int,
                     sampler_bytes: int, sort_bytes: int) -> ServeFlagTerms:
    """LoRA (memory/lora.py), the drafter (memory/spec_decode.py) and CPU offload (memory/offload.py)
    on one GPU of ``stage``: the drafter lives with the last stage. ``rows`` and ``sampler_bytes``: the
    profile's sampler (budget.profile_logit_rows); ``sort_bytes``: the native top-k/top-p sort's bytes per
    float32 logit at those rows (budget.native_sort_bytes_per_logit)."""
    sem, spec, dtype_bytes = config.semantics, config.model, config.dtype_bytes
    last_stage = stage.stage == config.pipeline_parallel_size - 1
    tokens = max_num_batched_tokens
    lora_bytes = forward_extra = 0
    cases = 1
    if config.lora is not None:
        lora = lora_memory(spec, config.lora, sem, config.tensor_parallel_size, stage.layers, stage.stage == 0,
                           last_stage, dtype_bytes)
        lora_bytes = lora.gpu_bytes
        forward_extra += lora_activation_bytes(spec, config.lora, tokens)
        cases = sem.lora_cudagraph_cases
    offloaded = config.offloaded[stage.stage] if config.offloaded else None
    if offloaded is not None and not sem.cpu_offload_uva:
        forward_extra += offloaded.largest_layer_bytes
    drafter = config.drafter
    draft_bytes = drafter_forward = rejection = draft_layers = 0
    query_len = 1
    if drafter is not None:
        if sem.cudagraph_sizes_scale_with_spec_tokens:
            query_len = 1 + drafter.num_speculative_tokens
        if last_stage:
            draft_bytes = drafter.weights_bytes
            draft_layers = len(drafter.layers)
            if drafter.layers:  # the target's hidden states stay referenced while the drafter runs the same tokens
                drafter_forward = int(tokens * (drafter.forward_bytes_per_token + spec.hidden_size) * dtype_bytes)
            if sem.engine == "V1" and sem.v1_profile_logits == "sampler" and (
                    not config.v2_model_runner or sem.v2_runner_profiles_rejection_sampler):
                rejection = rejection_sampler_bytes_per_logit(sem, sampler_bytes, rows, sort_bytes, dtype_bytes)
    uncharged = 0
    if sem.v0_profile_skips_late_allocations:
        uncharged = draft_bytes + (lora_bytes if not sem.lora_in_logged_weights else 0)
    return ServeFlagTerms(lora_bytes, draft_bytes, offloaded.bytes if offloaded else 0, drafter_forward,
                          forward_extra, rejection, draft_layers, query_len, cases, uncharged)
