"""The vision encoder's share of V1's profile run, for Qwen-VL-style towers (Qwen2-VL, Qwen2.5-VL,
Qwen3-VL: a ``vision_config`` with ``spatial_merge_size`` and ``temporal_patch_size``).

Before the dummy forward, ``GPUModelRunner.profile_run`` (read in 0.7.1, 0.7.3 and 0.9.0.1) runs the
encoder on ``cdiv(encoder_budget, max_tokens_per_item)`` dummy items of the largest feature size
(``encoder_budget = min(max_num_encoder_input_tokens, encoder_cache_size)``, both
``max(max_num_batched_tokens, max_tokens_per_item)``: "Encoder cache will be initialized with a
budget of 16384 tokens, and profiled with 1 image items of the maximum feature size") and keeps its
outputs in ``encoder_cache`` while ``_dummy_run`` and the sampler run. The caching allocator's peak
is therefore the larger of

* the encoder forward: the item's patches in the model dtype (``MultiModalKwargs.as_kwargs(dtype=
  model dtype)``, 0.9.0.1) plus the widest point of one vision block, its MLP: the residual and the
  normalised input (2·d) and, gated (SwiGLU), gate, activation and up outputs of the rank's
  intermediate slice (3·I/tp) — ``Qwen2_5_VisionMLP.forward`` — or its attention, whichever is
  wider (:func:`attention_width`: the float32 RoPE of 0.7-0.11.0 makes the attention the wider one);
* the encoder outputs (merged tokens × the language model's hidden size) plus the language model's
  dummy forward and sampler (:func:`kvplan.memory.budget.activation_peak_bytes`).

What is assumed, not read from the checkpoint: the largest image is 16,384 merged tokens, the
published processors' default (Qwen2-VL/Qwen2.5-VL ``max_pixels`` 12,845,056 = 16,384 · 28², Qwen3-VL
``longest_edge`` 16,777,216 = 16,384 · 32²), i.e. 65,536 patches; ``--limit-mm-per-prompt`` and
``--mm-processor-kwargs`` that shrink it are not modelled. V0 profiles images inside the language
model's dummy sequence and is not modelled here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ..models.spec import ModelSpec

#: merged tokens of the largest image the Qwen-VL processors accept by default (see the module doc)
QWEN_VL_MAX_TOKENS_PER_IMAGE = 16384


@dataclass(frozen=True)
class EncoderProfile:
    """What the encoder's dummy run holds on one GPU (bytes) and its shape, for notes and tests."""

    items: int
    tokens_per_item: int
    patches_per_item: int
    peak_bytes: int  # encoder forward peak: patches + one block's widest point
    outputs_bytes: int  # kept in encoder_cache during the language model's dummy run


def _vision_config(spec: ModelSpec) -> Optional[Mapping[str, Any]]:
    vc = spec.raw.get("vision_config") if isinstance(spec.raw, Mapping) else None
    if not isinstance(vc, Mapping) or not vc.get("spatial_merge_size") or not vc.get("temporal_patch_size"):
        return None
    return vc


def attention_width(d: int, tp: int, rotary: Optional[str]) -> float:
    """Values per patch live at the widest point of one vision block's attention on one rank, in
    units of the model dtype (``Qwen2_5_VisionAttention.forward``, ``Qwen2VisionAttention`` alike).

    Live through the call: the block's residual and the normalised input (2·d: ``nn.Module.__call__``
    holds its argument), the rank's qkv output (3·d/tp), its contiguous q, k, v (3·d/tp). With TP,
    ``split_qkv`` all-gathers qkv (3·d) and concatenates the interleaved pieces (3·d more) while the
    local output lives: 8·d + 3·d/tp. RoPE on CUDA (``apply_rotary_pos_emb_vision``): ``t.float()``
    (2 units per value), flash-attn's out-of-place float32 output (2) and ``.type_as(t)`` (1):
    5·d/tp on q, then on k (``"fp32_per_tensor"``: 2·d + 11·d/tp, 13·d at TP 1); on the
    concatenated q and k (``"fp32_qk_concat"``, 0.11.0) the concatenation (2·d/tp) and 10·d/tp:
    2·d + 18·d/tp. Versions not re-read keep the earlier estimate, d + 4.5·d/tp (9·d at TP 1)."""
    gather = 8 * d + 3 * d / tp if tp > 1 else 0.0
    if rotary == "fp32_per_tensor":
        return max(gather, 2 * d + 11 * d / tp)
    if rotary == "fp32_qk_concat":
        return max(gather, 2 * d + 18 * d / tp)
    return d + 4.5 * d / tp if tp > 1 else 9 * d


def encoder_profile(spec: ModelSpec, tp: int, dtype_bytes: int, max_num_batched_tokens: int,
                    engine: str, rotary: Optional[str] = None) -> Optional[EncoderProfile]:
    """The encoder dummy run of a Qwen-VL-style tower under V1, or None (no such tower, or V0).
    ``rotary`` is ``VllmSemantics.vision_rotary`` (:func:`attention_width`)."""
    vc = _vision_config(spec)
    if vc is None or engine != "V1":
        return None
    d = int(vc.get("hidden_size") or vc.get("embed_dim") or 0)
    if not d:
        return None
    inter = int(vc.get("intermediate_size") or int(vc.get("mlp_ratio") or 4) * d)
    merge = int(vc["spatial_merge_size"])
    patch = int(vc.get("patch_size") or 14)
    channels = int(vc.get("in_chans") or vc.get("in_channels") or vc.get("num_channels") or 3)
    temporal = int(vc["temporal_patch_size"])
    gated = str(vc.get("hidden_act") or "").lower() in ("silu", "swiglu")
    tokens = QWEN_VL_MAX_TOKENS_PER_IMAGE
    budget = max(max_num_batched_tokens, tokens)
    items = -(-budget // tokens)
    patches = items * tokens * merge * merge
    pixels = patches * channels * temporal * patch * patch * dtype_bytes
    mlp_width = 2 * d + (3 if gated else 2) * inter / tp  # residual + normed input + the MLP's live outputs
    block = patches * max(mlp_width, attention_width(d, tp, rotary)) * dtype_bytes
    outputs = items * tokens * spec.hidden_size * dtype_bytes
    return EncoderProfile(items, tokens, patches // items, int(pixels + block), int(outputs))
