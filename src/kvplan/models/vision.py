"""The vision tower of a multimodal checkpoint, read once from its real nested ``config.json``.

Multimodal configs name their towers in family-specific ways, and the same key means different
things across families: Qwen2-VL's ``vision_config.hidden_size`` is the *merger's output* (the
language model's width, 3,584), its tower is ``embed_dim`` (1,280) wide with an MLP of
``embed_dim × mlp_ratio``; Qwen2.5-VL's ``hidden_size`` is the tower's own width. One reader per
family turns the config into a frozen :class:`VisionTower` that the weights
(:func:`kvplan.models.params.vision_params`) and the encoder profile
(:mod:`kvplan.memory.encoder_profile`) both use.

Parameter counts follow the modules vLLM builds (read in the 0.19.0 wheel unless noted:
``qwen2_vl.py``, ``qwen2_5_vl.py``, ``qwen3_vl.py``, ``mllama.py`` (0.7.0), ``siglip.py`` /
``gemma3_mm.py``, ``pixtral.py`` / ``mistral3.py`` / ``llava.py``, ``clip.py`` / ``llava_next.py``,
``moonvit.py`` / ``kimi_vl.py``, ``intern_vit.py`` / ``internvl.py``, ``mllama4.py``). Every tower
read here builds its blocks from parallel linears (``QKVParallelLinear`` / ``ColumnParallelLinear``
/ ``RowParallelLinear`` under the default ``mm_encoder_tp_mode="weights"``), so each rank holds
1/TP of the blocks' linear weights and column biases; norms, row biases, embeddings and the
projectors built from ``nn.Linear`` / ``ReplicatedLinear`` are whole on every rank.

A ``vision_config`` of a family not read here is planned without its tower, and the reading says
so, with an estimate of what was left out when the config gives widths and depth.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

#: merged tokens of the largest image the Qwen-VL processors accept by default (Qwen2-VL/Qwen2.5-VL
#: ``max_pixels`` 12,845,056 = 16,384 · 28², Qwen3-VL ``longest_edge`` 16,777,216 = 16,384 · 32²)
QWEN_VL_MAX_TOKENS_PER_IMAGE = 16384


@dataclass(frozen=True)
class VisionTower:
    """A vision encoder as vLLM builds it: its shape, its parameters, and the largest dummy item
    vLLM's profile run feeds it (0 where the processor's largest item is not read)."""

    family: str
    width: int  # the tower's hidden size
    depth: int  # transformer blocks (Mllama: its local and its gated global layers)
    intermediate: int
    gated_mlp: bool
    patch_size: int
    channels: int
    sharded_params: int  # linear weights (and column biases) that TP splits
    whole_params: int  # norms, row biases, embeddings and unsharded projectors, on every rank
    temporal_patch: int = 1
    spatial_merge: int = 1
    image_size: int = 0
    tokens_per_item: int = 0  # the language model's tokens for the largest item (the budget's unit)
    patches_per_item: int = 0
    values_per_item: int = 0  # pixel values of that item's dummy input
    kept_states: int = 0  # hidden states a forward keeps for its projector (Mllama's intermediate layers)

    def params(self, tp: int = 1) -> int:
        """Parameters one of ``tp`` ranks holds."""
        return self.whole_params + self.sharded_params // tp

    def block_allocations(self, tp: int, dtype_bytes: int) -> tuple[int, ...]:
        """The blocks' large weights as one of ``tp`` ranks allocates them, in creation order (q/k/v,
        out, the MLP's input and output linears of each block, as the families read here build them),
        for the caching allocator's rounding (kvplan.memory.allocator); biases and norms are small
        allocations, counted exactly."""
        d, inter, up = self.width, self.intermediate, 2 if self.gated_mlp else 1
        one = (3 * d * d, d * d, up * d * inter, d * inter)
        return tuple(n // tp * dtype_bytes for _ in range(self.depth) for n in one)


@dataclass(frozen=True)
class VisionReading:
    """What the reader made of a config: the tower, or why there is none."""

    tower: Optional[VisionTower] = None
    unrecognised: Optional[str] = None  # the vision_config's model type (or keys) kvplan cannot read
    left_out_params: Optional[int] = None  # a rough size of that tower, when its widths are given

    def left_out_note(self, dtype_bytes: int) -> Optional[str]:
        if self.unrecognised is None:
            return None
        size = ""
        if self.left_out_params:
            size = (f" (about {self.left_out_params / 1e9:.2f} B parameters, "
                    f"{self.left_out_params * dtype_bytes / (1 << 30):.2f} GiB of weights, left out)")
        return (f"The vision tower ({self.unrecognised}) is not one kvplan reads: this plan leaves out its weights "
                f"and its share of the profile run{size}.")


def _int(vc: Mapping[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = vc.get(key)
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value:
            return int(value)
    return default


def _vit_block(d: int, inter: int, *, qkv_bias: bool, out_bias: bool, mlp_bias: bool, gated: bool,
               norm_params: int) -> tuple[int, int]:
    """(sharded, whole) parameters of one pre-norm ViT block: q/k/v (column), out (row), an MLP of
    fc1/fc2 or gate/up/down, and its norms."""
    up = 2 if gated else 1
    sharded = 3 * d * d + (3 * d if qkv_bias else 0) + d * d + up * d * inter + d * inter
    sharded += up * inter if mlp_bias else 0
    whole = norm_params + (d if out_bias else 0) + (d if mlp_bias else 0)
    return sharded, whole


def _qwen_item(vc: Mapping[str, Any], patch: int, merge: int, temporal: int, channels: int) -> dict:
    patches = QWEN_VL_MAX_TOKENS_PER_IMAGE * merge * merge
    return {"tokens_per_item": QWEN_VL_MAX_TOKENS_PER_IMAGE, "patches_per_item": patches,
            "values_per_item": patches * channels * temporal * patch * patch}


def _merger(d: int, merge: int, out: int, norm: int) -> tuple[int, int]:
    """Qwen-VL's patch merger: a norm over the tower's width, Linear(d·m², d·m²) (column, bias),
    GELU, Linear(d·m², out) (row, bias)."""
    wide = d * merge * merge
    return wide * wide + wide + wide * out, norm + out


def _qwen2_vl(vc, raw, text_hidden) -> VisionTower:
    """qwen2_vl.py: ``embed_dim`` wide, ``depth`` blocks of LayerNorm, qkv and proj with biases, a
    QuickGELU MLP of ``embed_dim × mlp_ratio`` (fc1/fc2, biases); the merger maps to
    ``vision_config.hidden_size`` (the language model's width), a Conv3d patch embedding without bias."""
    d, n = _int(vc, "embed_dim"), _int(vc, "depth", "num_hidden_layers")
    inter = int(d * float(vc.get("mlp_ratio") or 4))
    patch, channels = _int(vc, "patch_size", default=14), _int(vc, "in_chans", "in_channels", default=3)
    merge, temporal = _int(vc, "spatial_merge_size", default=2), _int(vc, "temporal_patch_size", default=2)
    block_s, block_w = _vit_block(d, inter, qkv_bias=True, out_bias=True, mlp_bias=True, gated=False,
                                  norm_params=4 * d)
    proj_s, proj_w = _merger(d, merge, _int(vc, "hidden_size", default=text_hidden), 2 * d)
    return VisionTower("qwen2_vl", d, n, inter, False, patch, channels, n * block_s + proj_s,
                       n * block_w + proj_w + channels * temporal * patch * patch * d, temporal, merge,
                       **_qwen_item(vc, patch, merge, temporal, channels))


def _qwen2_5_vl(vc, raw, text_hidden) -> VisionTower:
    """qwen2_5_vl.py: RMSNorm blocks, qkv/proj with biases, a SiLU-gated MLP with biases
    (gate_up column, down row), an RMSNorm merger to ``out_hidden_size``."""
    d, n = _int(vc, "hidden_size", "embed_dim"), _int(vc, "depth", "num_hidden_layers")
    inter = _int(vc, "intermediate_size", default=4 * d)
    patch, channels = _int(vc, "patch_size", default=14), _int(vc, "in_chans", "in_channels", default=3)
    merge, temporal = _int(vc, "spatial_merge_size", default=2), _int(vc, "temporal_patch_size", default=2)
    gated = str(vc.get("hidden_act") or "silu").lower() in ("silu", "swiglu")
    block_s, block_w = _vit_block(d, inter, qkv_bias=True, out_bias=True, mlp_bias=True, gated=gated,
                                  norm_params=2 * d)
    proj_s, proj_w = _merger(d, merge, _int(vc, "out_hidden_size", default=text_hidden), d)
    return VisionTower("qwen2_5_vl", d, n, inter, gated, patch, channels, n * block_s + proj_s,
                       n * block_w + proj_w + channels * temporal * patch * patch * d, temporal, merge,
                       **_qwen_item(vc, patch, merge, temporal, channels))


def _qwen3_vl(vc, raw, text_hidden) -> VisionTower:
    """qwen3_vl.py: LayerNorm blocks, qkv/proj and linear_fc1/linear_fc2 with biases, a learned
    position embedding, a Conv3d patch embedding with bias, the merger and one deepstack merger
    (post-shuffle LayerNorm) per ``deepstack_visual_indexes`` entry."""
    d, n = _int(vc, "hidden_size"), _int(vc, "depth", "num_hidden_layers")
    inter = _int(vc, "intermediate_size", default=4 * d)
    patch, channels = _int(vc, "patch_size", default=16), _int(vc, "in_channels", "in_chans", default=3)
    merge, temporal = _int(vc, "spatial_merge_size", default=2), _int(vc, "temporal_patch_size", default=2)
    out = _int(vc, "out_hidden_size", default=text_hidden)
    block_s, block_w = _vit_block(d, inter, qkv_bias=True, out_bias=True, mlp_bias=True, gated=False,
                                  norm_params=4 * d)
    proj_s, proj_w = _merger(d, merge, out, 2 * d)
    deep = len(vc.get("deepstack_visual_indexes") or ())
    deep_s, deep_w = _merger(d, merge, out, 2 * d * merge * merge)
    embed = channels * temporal * patch * patch * d + d + _int(vc, "num_position_embeddings") * d
    return VisionTower("qwen3_vl", d, n, inter, False, patch, channels, n * block_s + proj_s + deep * deep_s,
                       n * block_w + proj_w + deep * deep_w + embed, temporal, merge,
                       **_qwen_item(vc, patch, merge, temporal, channels))


def _mllama(vc, raw, text_hidden) -> VisionTower:
    """mllama.py (0.7.0; the same modules in 0.6.4-0.10): ``num_hidden_layers`` local and
    ``num_global_layers`` gated global layers (qkv/o without bias, CLIPMLP fc1/fc2 with biases, two
    LayerNorms, two tanh gates on the global ones); the patch embedding (ColumnParallelConv2dPatch,
    no bias), the class embedding, the gated position embedding with its tile embedding of
    (aspect-ratio ids + 1) × tiles × (patches + 1) × width, the gated pre/post tile embeddings, the
    pre/post LayerNorms; the projector a column-parallel Linear(vision_output_dim, text width, bias)."""
    d, inter = _int(vc, "hidden_size", default=1280), _int(vc, "intermediate_size", default=5120)
    local, global_ = _int(vc, "num_hidden_layers", default=32), _int(vc, "num_global_layers", default=8)
    patch, channels = _int(vc, "patch_size", default=14), _int(vc, "num_channels", default=3)
    image, tiles = _int(vc, "image_size", default=560), _int(vc, "max_num_tiles", default=4)
    ratio_ids = len(vc.get("supported_aspect_ratios") or ()) or 8  # max_aspect_ratio_id
    block_s, block_w = _vit_block(d, inter, qkv_bias=False, out_bias=False, mlp_bias=True, gated=False,
                                  norm_params=4 * d)
    positions = (image // patch) ** 2 + 1
    embed = (channels * patch * patch * d + d + 1 + positions * d + (ratio_ids + 1) * tiles * positions * d
             + 2 * ((ratio_ids + 1) * tiles * d + 1) + 4 * d)
    out_dim = _int(vc, "vision_output_dim", default=d * (1 + len(vc.get("intermediate_layers_indices") or [0] * 5)))
    n = local + global_
    return VisionTower("mllama", d, n, inter, False, patch, channels,
                       n * block_s + out_dim * text_hidden + text_hidden,
                       n * block_w + 2 * global_ + embed, image_size=image,
                       tokens_per_item=tiles * positions, patches_per_item=tiles * (positions + (-positions) % 8),
                       values_per_item=tiles * channels * image * image,
                       kept_states=len(vc.get("intermediate_layers_indices") or ()) or 5)


def _siglip_blocks(vc, *, layers: Optional[int] = None) -> tuple[int, int, int, int, int, int, int]:
    """(width, layers, intermediate, patch, image, sharded, whole) of a SigLIP tower (siglip.py):
    q/k/v/out and fc1/fc2 with biases, two LayerNorms a block, a patch Conv2d with bias, a learned
    position embedding over the (image / patch)² patches, the post-LayerNorm."""
    d, inter = _int(vc, "hidden_size", default=1152), _int(vc, "intermediate_size", default=4304)
    n = layers if layers is not None else _int(vc, "num_hidden_layers", default=27)
    patch, image, channels = _int(vc, "patch_size", default=14), _int(vc, "image_size", default=896), \
        _int(vc, "num_channels", default=3)
    block_s, block_w = _vit_block(d, inter, qkv_bias=True, out_bias=True, mlp_bias=True, gated=False,
                                  norm_params=4 * d)
    whole = n * block_w + channels * patch * patch * d + d + (image // patch) ** 2 * d + 2 * d
    return d, n, inter, patch, image, n * block_s, whole


def _gemma3(vc, raw, text_hidden) -> VisionTower:
    """Gemma-3 (gemma3_mm.py): a SigLIP tower at a fixed size (one crop, pan-and-scan off by default,
    pooled to ``mm_tokens_per_image``) and a projector of ``mm_input_projection_weight`` (width ×
    text width) with an RMSNorm, both whole on every rank."""
    d, n, inter, patch, image, sharded, whole = _siglip_blocks(vc)
    grid = image // patch
    tokens = _int(raw, "mm_tokens_per_image", default=256)
    return VisionTower("siglip", d, n, inter, False, patch, 3, sharded, whole + d * text_hidden + d,
                       image_size=image, tokens_per_item=tokens, patches_per_item=grid * grid,
                       values_per_item=3 * image * image)


def _pixtral(vc, raw, text_hidden) -> VisionTower:
    """pixtral.py's PixtralHF tower: RMSNorm blocks, q/k/v/o without bias, a SiLU-gated MLP without
    bias, a patch Conv2d without bias and ``ln_pre``. Mistral-3 (mistral3.py) projects through an
    RMSNorm, the patch merger's Linear(width · m², width) (no bias, whole) and linear_1 (column) /
    linear_2 (row) with ``multimodal_projector_bias``; LLaVA-style Pixtral checkpoints (llava.py) have
    linear_1 / linear_2 only. The largest item is ``image_size`` px, (image // (patch · m))² tokens."""
    d, inter = _int(vc, "hidden_size", default=1024), _int(vc, "intermediate_size", default=4096)
    n, patch = _int(vc, "num_hidden_layers", default=24), _int(vc, "patch_size", default=16)
    image, channels = _int(vc, "image_size", default=1024), _int(vc, "num_channels", default=3)
    merge = _int(raw, "spatial_merge_size", default=1)
    block_s, block_w = _vit_block(d, inter, qkv_bias=False, out_bias=False, mlp_bias=False, gated=True,
                                  norm_params=2 * d)
    bias = bool(raw.get("multimodal_projector_bias", True))
    proj_s = d * text_hidden + text_hidden * text_hidden + (text_hidden if bias else 0)
    proj_w = (d + d * merge * merge * d if raw.get("model_type") == "mistral3" else 0) + (text_hidden if bias else 0)
    grid, merged = image // patch, image // (patch * merge)
    return VisionTower("pixtral", d, n, inter, True, patch, channels, n * block_s + proj_s,
                       n * block_w + proj_w + channels * patch * patch * d + d, spatial_merge=merge,
                       image_size=image, tokens_per_item=merged * merged, patches_per_item=grid * grid,
                       values_per_item=channels * image * image)


def _llava(vc, raw, text_hidden) -> VisionTower:
    """LLaVA / LLaVA-NeXT (llava.py, llava_next.py, clip.py, siglip.py): the CLIP or SigLIP tower
    up to the deepest feature layer asked (``vision_feature_layer``; -1 is all of them), linear_1
    (column, over the concatenated feature layers) and linear_2 (row), both with
    ``multimodal_projector_bias``, and LLaVA-NeXT's ``image_newline`` (text width)."""
    total = _int(vc, "num_hidden_layers", default=24)
    feature = raw.get("vision_feature_layer", -2)
    layers_asked = feature if isinstance(feature, (list, tuple)) else [feature]
    used = max((total + f + 1) if f < 0 else f for f in layers_asked)
    clip = str(vc.get("model_type") or "").startswith("clip")
    d, n, inter, patch, image, sharded, whole = _siglip_blocks(
        {"image_size": 336, "patch_size": 14, **vc}, layers=used)
    if clip:  # CLIP: a class embedding, one more position row, a pre-LayerNorm; no patch bias
        whole += 3 * d
    bias = bool(raw.get("multimodal_projector_bias", True))
    into = d * len(layers_asked)
    proj_s = into * text_hidden + text_hidden * text_hidden + (text_hidden if bias else 0)
    proj_w = (text_hidden if bias else 0) + (text_hidden if raw.get("model_type") != "llava" else 0)
    return VisionTower("clip" if clip else "siglip_llava", d, n, inter, False, patch, 3, sharded + proj_s,
                       whole + proj_w, image_size=image)


def _moonvit(vc, raw, text_hidden) -> VisionTower:
    """Kimi-VL's MoonViT (moonvit.py, kimi_vl.py): LayerNorm blocks with qkv/out and fc0/fc1 biases, a
    patch Conv2d with bias, a learned ``init_pos_emb_height × init_pos_emb_width`` position grid, a
    final LayerNorm; the projector (ReplicatedLinear, whole): a LayerNorm, Linear(width · k², width · k²)
    and Linear(width · k², text width), with biases."""
    d, inter = _int(vc, "hidden_size", default=1152), _int(vc, "intermediate_size", default=4304)
    n, patch = _int(vc, "num_hidden_layers", default=27), _int(vc, "patch_size", default=14)
    kernel = vc.get("merge_kernel_size") or (2, 2)
    k2 = int(kernel[0]) * int(kernel[1])
    block_s, block_w = _vit_block(d, inter, qkv_bias=True, out_bias=True, mlp_bias=True, gated=False,
                                  norm_params=4 * d)
    grid = _int(vc, "init_pos_emb_height", default=64) * _int(vc, "init_pos_emb_width", default=64)
    embed = 3 * patch * patch * d + d + grid * d + 2 * d
    wide = d * k2
    proj = 2 * d + wide * wide + wide + wide * text_hidden + text_hidden
    return VisionTower("moonvit", d, n, inter, False, patch, 3, n * block_s, n * block_w + embed + proj)


def _intern_vit(vc, raw, text_hidden) -> VisionTower:
    """InternViT (intern_vit.py) with InternVL's ``mlp1`` projector (internvl.py, nn.Linear: whole):
    blocks of qkv (``qkv_bias``), optional q/k RMSNorms (``qk_normalization``), proj, fc1/fc2 with
    biases, two norms and two layer scales; a class embedding, a patch Conv2d with bias and a position
    embedding of (image / patch)² + 1 rows; ``select_layer`` -1 keeps every block. The projector: a
    LayerNorm over width · (1 / downsample_ratio)², a Linear to the text width and a Linear within it."""
    d, inter = _int(vc, "hidden_size", default=1024), _int(vc, "intermediate_size", default=4096)
    total = _int(vc, "num_hidden_layers", default=24)
    select = int(raw.get("select_layer", -1) or -1)
    n = total + select + 1 if select < 0 else select
    patch, image = _int(vc, "patch_size", default=14), _int(vc, "image_size", default=448)
    rms = str(vc.get("norm_type") or "layer_norm") == "rms_norm"
    norms = (2 if rms else 4) * d + 2 * d + (2 * d if vc.get("qk_normalization") or vc.get("use_qk_norm") else 0)
    block_s, block_w = _vit_block(d, inter, qkv_bias=bool(vc.get("qkv_bias", vc.get("attention_bias", True))),
                                  out_bias=True, mlp_bias=True, gated=False, norm_params=norms)
    embed = d + 3 * patch * patch * d + d + ((image // patch) ** 2 + 1) * d
    ratio = float(raw.get("downsample_ratio") or 0.5)
    wide = int(d * int(1 / ratio) ** 2)
    proj = 2 * wide + wide * text_hidden + text_hidden + text_hidden * text_hidden + text_hidden
    return VisionTower("intern_vit", d, n, inter, False, patch, 3, n * block_s, n * block_w + embed + proj,
                       image_size=image)


def _llama4(vc, raw, text_hidden) -> VisionTower:
    """mllama4.py: blocks of qkv/o with biases and fc1/fc2 with biases, two LayerNorms; a patch
    embedding (column-parallel Linear over unfolded patches, no bias), a class embedding, a position
    embedding of (image / patch)² + 1 rows, pre/post LayerNorms; the pixel-shuffle adapter
    (fc1 column: intermediate → projector_input_dim, fc2 row → projector_output_dim, no bias) and the
    projector (column-parallel Linear(vision_output_dim, text width), no bias): all sharded but norms."""
    d, inter = _int(vc, "hidden_size", default=1408), _int(vc, "intermediate_size", default=5632)
    n, patch = _int(vc, "num_hidden_layers", default=34), _int(vc, "patch_size", default=14)
    image, channels = _int(vc, "image_size", default=336), _int(vc, "num_channels", default=3)
    block_s, block_w = _vit_block(d, inter, qkv_bias=True, out_bias=True, mlp_bias=True, gated=False,
                                  norm_params=4 * d)
    ratio = float(vc.get("pixel_shuffle_ratio") or 0.5)
    adapter_in = int(d / (ratio * ratio))
    p_in, p_out = _int(vc, "projector_input_dim", default=4096), _int(vc, "projector_output_dim", default=4096)
    sharded = n * block_s + channels * patch * patch * d + adapter_in * p_in + p_in * p_out \
        + _int(vc, "vision_output_dim", default=p_out) * text_hidden
    whole = n * block_w + d + ((image // patch) ** 2 + 1) * d + 4 * d
    return VisionTower("llama4", d, n, inter, False, patch, channels, sharded, whole, image_size=image)


Reader = Callable[[Mapping[str, Any], Mapping[str, Any], int], VisionTower]

#: top-level ``model_type`` → reader
_BY_MODEL_TYPE: dict[str, Reader] = {
    "qwen2_vl": _qwen2_vl, "qwen2_5_vl": _qwen2_5_vl, "qwen3_vl": _qwen3_vl, "qwen3_vl_moe": _qwen3_vl,
    "mllama": _mllama, "gemma3": _gemma3, "mistral3": _pixtral, "kimi_vl": _moonvit,
    "internvl_chat": _intern_vit, "internvl": _intern_vit, "llama4": _llama4,
    "llava_next": _llava, "llava_onevision": _llava,  # "llava": by its tower's type (Pixtral or CLIP)
}
#: ``vision_config.model_type`` → reader, for configs whose top level does not say
_BY_VISION_TYPE: dict[str, Reader] = {
    "pixtral": _pixtral, "moonvit": _moonvit, "llama4_vision_model": _llama4, "mllama_vision_model": _mllama,
    "intern_vit_6b": _intern_vit, "internvl_vision": _intern_vit, "clip_vision_model": _llava,
    "qwen2_vl": _qwen2_vl, "qwen2_5_vl": _qwen2_5_vl, "qwen3_vl": _qwen3_vl,
}


def _by_keys(vc: Mapping[str, Any], raw: Mapping[str, Any]) -> Optional[Reader]:
    """Configs without a model type that names the family: the Qwen-VL towers by their keys, a
    SigLIP tower with Gemma-3's ``mm_tokens_per_image``, other SigLIP towers as LLaVA's."""
    if vc.get("spatial_merge_size") and vc.get("temporal_patch_size"):
        if vc.get("embed_dim") and vc.get("mlp_ratio"):
            return _qwen2_vl
        return _qwen3_vl if vc.get("deepstack_visual_indexes") else _qwen2_5_vl
    if vc.get("model_type") == "siglip_vision_model":
        return _gemma3 if raw.get("mm_tokens_per_image") else _llava
    return None


def read_vision_tower(raw: Mapping[str, Any], text_hidden: int) -> VisionReading:
    """The tower a multimodal ``config.json`` describes (``raw``), its projector mapping into a
    language model ``text_hidden`` wide; an empty reading for a text-only config."""
    vc = raw.get("vision_config") if isinstance(raw, Mapping) else None
    if not isinstance(vc, Mapping):
        return VisionReading()
    model_type, vision_type = str(raw.get("model_type") or ""), str(vc.get("model_type") or "")
    reader = _BY_MODEL_TYPE.get(model_type) or _BY_VISION_TYPE.get(vision_type) or _by_keys(vc, raw)
    if reader is None:
        d, n = _int(vc, "hidden_size", "embed_dim", "width"), _int(vc, "num_hidden_layers", "depth", "layers")
        inter = _int(vc, "intermediate_size", default=4 * d)
        estimate = n * (4 * d * d + 2 * d * inter) if d and n else None
        what = f"vision_config model_type {vision_type!r}" if vision_type else f"a {model_type or 'model'} tower"
        return VisionReading(None, what, estimate)
    return VisionReading(reader(vc, raw, text_hidden))
