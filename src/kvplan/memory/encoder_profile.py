"""The vision encoder's share of V1's profile run, for the towers (read by :mod:`kvplan.models.vision`)
whose processor's largest item is read: Qwen-VL-style (Qwen2-VL, Qwen2.5-VL, Qwen3-VL), SigLIP at a fixed
resolution (Gemma-3: ``mm_tokens_per_image``) and Pixtral (Mistral-3). Other towers' share is stated as
not modelled (kvplan.memory.budget).

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
* what stays referenced through the language model's dummy forward and sampler
  (:func:`kvplan.memory.budget.activation_peak_bytes`): the encoder outputs (merged tokens × the
  language model's hidden size, in ``encoder_cache``) and the dummy batch itself, which
  ``profile_run`` keeps in its local ``batched_dummy_mm_inputs`` until it returns (read in 0.7.3,
  0.9.0.1 and 0.19.0; in the model dtype: ``as_kwargs(dtype=...)`` in 0.9.0.1, the processor
  context's ``_postprocess_output`` cast in 0.19.0).

How many items: ``cdiv(budget, tokens per item)`` through 0.9.2 and, from 0.10.1.1 (read there and
in 0.11.0-0.19.0; 0.10.0 attributed to it), ``max(1, min(budget // tokens, max_num_seqs ×
max(1, min(999, max_model_len // tokens))))`` (``MultiModalBudget._get_max_items``; 999 is the
default per-prompt limit): llm-d-planner's 0.19.0 Gemma-3 logs print "profiled with 32 image items"
for an 8,192-token budget of 256-token images.

What is assumed, not read from the checkpoint: the largest image is 16,384 merged tokens, the
published processors' default (Qwen2-VL/Qwen2.5-VL ``max_pixels`` 12,845,056 = 16,384 · 28², Qwen3-VL
``longest_edge`` 16,777,216 = 16,384 · 32²), i.e. 65,536 patches; ``--limit-mm-per-prompt`` and
``--mm-processor-kwargs`` that shrink it are not modelled. V0 profiles images inside the language
model's dummy sequence and is not modelled here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..models.params import vision_tower
from ..models.spec import ModelSpec
from ..models.vision import QWEN_VL_MAX_TOKENS_PER_IMAGE

__all__ = ["EncoderProfile", "QWEN_VL_MAX_TOKENS_PER_IMAGE", "attention_width", "encoder_profile", "unprofiled_tower"]


@dataclass(frozen=True)
class EncoderProfile:
    """What the encoder's dummy run holds on one GPU (bytes) and its shape, for notes and tests."""

    items: int
    tokens_per_item: int
    patches_per_item: int
    peak_bytes: int  # encoder forward peak: the dummy batch + one block's widest point
    outputs_bytes: int  # kept in encoder_cache during the language model's dummy run
    inputs_bytes: int = 0  # the dummy batch, still referenced by profile_run during that run

    @property
    def held_bytes(self) -> int:
        """Allocated through the language model's dummy forward and sampler."""
        return self.outputs_bytes + self.inputs_bytes


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


@dataclass(frozen=True)
class _Tower:
    """One dummy item of a vision tower as vLLM's processor builds it, and the tower's widths."""

    width: int  # the tower's hidden size
    intermediate: int
    tokens_per_item: int  # the language model's tokens (embeddings) per item: the budget's unit
    patches_per_item: int
    values_per_item: int  # pixel values of the item's dummy input

    def block_width(self, tp: int, rotary: Optional[str]) -> float:
        """Values per patch at the widest point of one block on one rank (model dtype units)."""
        raise NotImplementedError

    def extra_bytes(self, patches: int, dtype_bytes: int) -> int:
        """Anything else the forward holds at its peak, for ``patches`` patches in the batch."""
        return 0


@dataclass(frozen=True)
class _QwenVLTower(_Tower):
    gated: bool = True

    def block_width(self, tp: int, rotary: Optional[str]) -> float:
        mlp = 2 * self.width + (3 if self.gated else 2) * self.intermediate / tp  # residual, normed, live outputs
        return max(mlp, attention_width(self.width, tp, rotary))


@dataclass(frozen=True)
class _SiglipTower(_Tower):
    """``siglip.py`` (0.19.0): ``SiglipMLP`` keeps fc1's output and the activation's (2·I/tp) with the
    residual and normalised input (2·d); the attention's qkv (3·d/tp), q/k/v and output (4·d/tp) are
    narrower for every SigLIP shape read (7·d < 2·I)."""

    def block_width(self, tp: int, rotary: Optional[str]) -> float:
        return 2 * self.width + max(2 * self.intermediate, 7 * self.width) / tp


@dataclass(frozen=True)
class _PixtralTower(_Tower):
    """``pixtral.py`` (0.19.0) ``PixtralHFVisionModel``: the gated MLP (3·I/tp with the residual and
    normalised input, 2·d), and, without xformers (the 0.19.0 wheel does not require it), HF's
    ``generate_block_attention_mask``: one (patches × patches) mask in the model dtype over the
    batch's patches flattened into one sequence, live through the transformer."""

    def block_width(self, tp: int, rotary: Optional[str]) -> float:
        return 2 * self.width + max(3 * self.intermediate, 10 * self.width) / tp

    def extra_bytes(self, patches: int, dtype_bytes: int) -> int:
        return patches * patches * dtype_bytes


@dataclass(frozen=True)
class _MllamaTower(_Tower):
    """mllama.py's MllamaVisionModel (0.6.4-0.10, read in 0.7.0), run under V0's encoder-decoder profile:
    every tile padded to a multiple of 8 patches; the aspect-ratio attention mask (images × (tiles ·
    patches)² in the model dtype, ``_prepare_aspect_ratio_attention_mask``) lives through both
    transformers; the local transformer keeps the inputs of its ``intermediate_layers_indices`` layers
    (5) for the projector; at a later local layer's MLP the caller's input, the residual, the normed
    input and CLIPMLP's fc1 output and GELU output (2·I/tp) are live besides: (kept + 3)·d + 2·I/tp."""

    kept_states: int = 5
    tiles: int = 4

    def block_width(self, tp: int, rotary: Optional[str]) -> float:
        return (self.kept_states + 3) * self.width + 2 * self.intermediate / tp

    def extra_bytes(self, patches: int, dtype_bytes: int) -> int:
        images = patches // self.patches_per_item
        return images * self.patches_per_item * self.patches_per_item * dtype_bytes


#: the tower families whose dummy-run shape kvplan reads (the rest: no encoder share, stated unmodelled)
_PROFILED = {"qwen2_vl": _QwenVLTower, "qwen2_5_vl": _QwenVLTower, "qwen3_vl": _QwenVLTower,
             "siglip": _SiglipTower, "pixtral": _PixtralTower}


def _tower(spec: ModelSpec) -> Optional[_Tower]:
    """The V1 dummy item of the model's tower (kvplan.models.vision), for the families whose processor's
    largest item is read; None otherwise."""
    tower = vision_tower(spec).tower
    if tower is not None and tower.family == "mllama":
        return _MllamaTower(tower.width, tower.intermediate, tower.tokens_per_item, tower.patches_per_item,
                            tower.values_per_item, kept_states=tower.kept_states)
    if tower is None or tower.family not in _PROFILED or not tower.tokens_per_item:
        return None
    kind = _PROFILED[tower.family]
    fields = (tower.width, tower.intermediate, tower.tokens_per_item, tower.patches_per_item, tower.values_per_item)
    return _QwenVLTower(*fields, gated=tower.gated_mlp) if kind is _QwenVLTower else kind(*fields)


def unprofiled_tower(spec: ModelSpec) -> Optional[str]:
    """The family of a tower kvplan reads the weights of but not the V1 dummy run of, if any."""
    tower = vision_tower(spec).tower
    return tower.family if tower is not None and _tower(spec) is None else None


#: the default per-prompt item limit of 0.10+ (``MultiModalConfig``), for the decoder-side bound
DEFAULT_ITEMS_PER_PROMPT = 999


#: V0 hands the model the processor's float32 pixel values (``MultiModalKwargs.as_kwargs`` without a
#: dtype, read in 0.6.4.post1 and 0.7.0); the towers cast them to the model dtype inside
V0_PIXEL_BYTES = 4


def encoder_profile(spec: ModelSpec, tp: int, dtype_bytes: int, max_num_batched_tokens: int,
                    engine: str, rotary: Optional[str] = None, *, items_round_up: bool = True,
                    max_num_seqs: int = 256, max_model_len: Optional[int] = None) -> Optional[EncoderProfile]:
    """The encoder dummy run of a tower kvplan reads, or None. ``rotary`` is
    ``VllmSemantics.vision_rotary`` (:func:`attention_width`), ``items_round_up``
    ``VllmSemantics.encoder_items_round_up`` (the module doc). V0 (``worker/model_runner.py``
    ``_dummy_run`` and ``worker/enc_dec_model_runner.py`` ``profile_run``, read in 0.6.4.post1 and
    0.7.0) builds ``min(max_num_seqs, max_num_batched_tokens // tokens per item)`` dummy sequences (at
    least one), each with one item of the largest size, for a decoder-only model, and ``max_num_seqs``
    of them for an encoder-decoder one (Mllama), and runs them all through the tower in the model's
    one forward, the float32 pixel batch held throughout."""
    tower = _tower(spec)
    if tower is None or (engine == "V1" and isinstance(tower, _MllamaTower)):
        return None  # Mllama runs on V0 (no encoder-decoder models on V1 before 0.10; not read there)
    tokens = tower.tokens_per_item
    budget = max(max_num_batched_tokens, tokens)
    pixel_bytes = dtype_bytes
    if engine == "V0":
        items = max_num_seqs if isinstance(tower, _MllamaTower) else max(1, min(max_num_seqs, max_num_batched_tokens // tokens))
        pixel_bytes = V0_PIXEL_BYTES
    elif items_round_up:
        items = -(-budget // tokens)
    else:
        per_prompt = max(1, min(DEFAULT_ITEMS_PER_PROMPT, (max_model_len or budget) // tokens))
        items = max(1, min(budget // tokens, max_num_seqs * per_prompt))
    patches = items * tower.patches_per_item
    pixels = items * tower.values_per_item * pixel_bytes
    if isinstance(tower, _MllamaTower):
        pixels *= 2  # the batch and _parse_and_validate_image_input's padded float32 copy (out_images)
    block = patches * tower.block_width(tp, rotary) * dtype_bytes
    outputs = items * tokens * spec.hidden_size * dtype_bytes
    return EncoderProfile(items, tokens, tower.patches_per_item,
                          int(pixels + block + tower.extra_bytes(patches, dtype_bytes)), int(outputs), int(pixels))
