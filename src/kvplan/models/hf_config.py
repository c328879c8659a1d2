"""Read a Hugging Face ``config.json`` into a :class:`ModelSpec`, the way vLLM interprets it.

Field aliases and precedence follow vLLM 0.33 (``vllm/transformers_utils/config.py``
``CONFIG_FIELD_ALIASES``, ``vllm/config/model.py``), and which layers slide follows the model
code (``vllm/model_executor/models/*.py``): vLLM only honours a sliding window where the model
class passes one to ``Attention``, so a bare ``sliding_window`` (Mistral-7B-v0.1, Phi-3) does not
make layers sliding, while ``layer_types`` and the Gemma patterns do.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Optional

from ..errors import ConfigFieldError, UsageError, file_not_found
from .spec import (
    ChunkedLocalAttention,
    DenseMLP,
    FullAttention,
    Layer,
    LinearAttentionState,
    Mamba2State,
    MLAttention,
    ModelSpec,
    MoEMLP,
    Quantization,
    SlidingWindowAttention,
)

# vllm/config/model.py: keys whose minimum is the derived max_model_len.
MAX_LEN_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)

# vllm/transformers_utils/config.py: the first present key gives the total KV heads.
KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num",
                "num_attention_groups")


# transformers' configuration defaults for fields a config.json may leave out (the published
# Gemma-3 multimodal and Falcon files rely on them). Only defaults that size memory are listed.
MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
                    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "head_dim": 256, "max_position_embeddings": 131_072, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "tie_word_embeddings": True},
    "falcon": {"max_position_embeddings": 2048},
}
MODEL_TYPE_DEFAULTS["gemma3"] = MODEL_TYPE_DEFAULTS["gemma3_text"]

# transformers' config classes that default tie_word_embeddings to False (PretrainedConfig: True).
UNTIED_BY_DEFAULT = {
    "llama", "llama4", "llama4_text", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
    "qwen3_next", "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "phi3", "phimoe", "gpt_oss", "mistral3",
}


#: Physical ranges of the fields that size a model, far beyond every published one (the largest in
#: the catalog: 126 layers, hidden 16,384, 128 heads, a 262,144-token vocabulary, a 10M-token
#: context, 512 experts): a config outside them is a typo or an attack (10,000,000 layers took
#: gigabytes to build), refused as a usage error naming the field.
MAX_LAYERS = 2048
MAX_HIDDEN = 1 << 20
MAX_HEADS = 1 << 14
MAX_HEAD_DIM = 1 << 14
MAX_VOCAB = 1 << 24
MAX_CONTEXT = 1 << 32
MAX_INTERMEDIATE = 1 << 24
MAX_EXPERTS = 1 << 16
#: any other integer field: JSON's exactly representable integers
MAX_INT = 1 << 53


def checked_int(value: Any, key: str, source: str, lo: int = -MAX_INT, hi: int = MAX_INT) -> int:
    """``value`` as an integer in [lo, hi], or a ConfigFieldError naming ``key``: a bool, a string,
    NaN, an infinity or a non-integral number is not an integer."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
        raise ConfigFieldError(key, source, f"must be an integer, got {_shown(value)}")
    if not lo <= value <= hi:
        raise ConfigFieldError(key, source, f"must be between {lo:,} and {hi:,}, got {_shown(value)}")
    return int(value)


def _shown(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 30:
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Fields:
    """Typed access to one config dict that names the file and field in every error."""

    def __init__(self, cfg: Mapping[str, Any], source: str):
        self.cfg = cfg
        self.source = source

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        value = self.cfg.get(key)
        return default if value is None else value

    def int(self, *keys: str, default: Optional[int] = None, lo: int = -MAX_INT, hi: int = MAX_INT) -> int:
        for key in keys:
            value = self.cfg.get(key)
            if value is None:
                continue
            return checked_int(value, key, self.source, lo, hi)
        if default is not None:
            return default
        raise ConfigFieldError(keys[0], self.source)


def _text_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model under ``text_config`` (Llama-4, Gemma-3,
    Mistral-3, Qwen-VL); vLLM sizes the KV cache from it. Top-level fields fill what it lacks,
    then transformers' defaults for the text model's type."""
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and ("num_hidden_layers" in text or "hidden_size" in text
                                      or "model_type" in text):
        merged = {k: v for k, v in cfg.items() if k not in ("text_config", "vision_config")}
        merged.update(text)
        for key in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
            if key not in text and key in cfg:
                merged[key] = cfg[key]
    else:
        merged = dict(cfg)
    for key, value in MODEL_TYPE_DEFAULTS.get(str(merged.get("model_type", "")).lower(), {}).items():
        merged.setdefault(key, value)
    return merged


def _layer_pattern(f: _Fields, model_type: str, n_layers: int) -> list[str]:
    """The per-layer mixer kind: full, sliding, chunked or linear, as vLLM's model code decides."""
    layer_types = f.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) >= n_layers:
        kinds = []
        for t in layer_types[:n_layers]:
            if t in ("sliding_attention", "sliding_window_attention"):
                kinds.append("sliding")
            elif t in ("linear_attention", "mamba", "linear"):
                kinds.append("linear")
            elif t == "chunked_attention":
                kinds.append("chunked")
            else:
                kinds.append("full")
        return kinds
    if f.has("full_attention_interval"):  # Qwen3-Next: every k-th layer is full attention
        k = f.int("full_attention_interval", lo=1)
        return ["full" if (i + 1) % k == 0 else "linear" for i in range(n_layers)]
    if model_type == "gemma2" and f.get("sliding_window"):
        return ["sliding" if i % 2 == 0 else "full" for i in range(n_layers)]
    if model_type.startswith("gemma3") and f.get("sliding_window"):
        pattern = f.int("sliding_window_pattern", "_sliding_window_pattern", default=6, lo=1)
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(n_layers)]
    if model_type.startswith("llama4") and f.has("attention_chunk_size"):
        nope = f.get("no_rope_layers") or []
        if len(nope) < n_layers:
            interval = f.int("no_rope_layer_interval", default=4, lo=1)
            nope = [int((i + 1) % interval != 0) for i in range(n_layers)]
        # vLLM llama4.py: NoPE layers (no_rope_layers[i] == 0) are global, the others chunked.
        return ["full" if nope[i] == 0 else "chunked" for i in range(n_layers)]
    if model_type == "gpt_oss" and f.get("sliding_window"):
        return ["sliding" if i % 2 == 0 else "full" for i in range(n_layers)]
    if model_type.startswith("qwen") and "use_sliding_window" in f.cfg:
        if not f.get("use_sliding_window"):
            return ["full"] * n_layers  # Qwen2Config drops sliding_window when it is not used
        mwl = f.int("max_window_layers", default=n_layers)
        return ["sliding" if i >= mwl else "full" for i in range(n_layers)]
    if f.get("sliding_window"):
        # No per-layer layout: vLLM sets cache_config.sliding_window from the config, and every
        # Attention layer without its own window takes it (Mistral-7B-v0.1, Phi-3).
        return ["sliding"] * n_layers
    return ["full"] * n_layers


def _quantization(f: _Fields) -> Optional[Quantization]:
    q = f.get("quantization_config")
    if not isinstance(q, Mapping):
        return None
    src = f.source

    def qint(*keys: str, default: Any = None, lo: int = 0, hi: int = MAX_HIDDEN) -> Any:
        for key in keys:
            if q.get(key):
                return checked_int(q[key], f"quantization_config.{key}", src, lo, hi)
        return default

    def names(*keys: str) -> tuple[str, ...]:
        for key in keys:
            value = q.get(key)
            if value:
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ConfigFieldError(f"quantization_config.{key}", src, "must be a list of module names")
                return tuple(value)
        return ()

    method = str(q.get("quant_method") or q.get("quant_type") or "").lower()
    skip = names("modules_to_not_convert", "ignore")
    kv_dtype = None
    if isinstance(q.get("kv_cache_scheme"), Mapping):
        kv_dtype = "fp8" if q["kv_cache_scheme"].get("type") == "float" else None
    if method == "fp8":
        block = q.get("weight_block_size")
        if block and (not isinstance(block, list) or len(block) != 2):
            raise ConfigFieldError("quantization_config.weight_block_size", src, "must be two integers [N, K]")
        if block:
            block = [checked_int(b, "quantization_config.weight_block_size", src, 1, MAX_HIDDEN) for b in block]
        return Quantization("fp8", 8, weight_block=tuple(block) if block else None,
                            kv_cache_dtype=kv_dtype, modules_not_quantized=skip)
    if method == "quark":  # AMD Quark exports (vllm quark.py): the global weight spec and the KV group
        global_cfg = q.get("global_quant_config") or {}
        weight = (global_cfg.get("weight") if isinstance(global_cfg, Mapping) else None) or {}
        dtype = str(weight.get("dtype") or "") if isinstance(weight, Mapping) else ""
        exclude = names("exclude")
        if dtype.startswith("fp8"):
            # the checkpoint's KV scales (export.kv_cache_group) are used only with --kv-cache-dtype fp8:
            # resolve_kv_cache_dtype_string reads a KV scheme from ModelOpt configs, not Quark's
            return Quantization("fp8", 8, modules_not_quantized=exclude)
        if dtype.startswith("fp4"):
            return Quantization("mxfp4", 4, group_size=32, modules_not_quantized=exclude)
        return Quantization("quark", 8, modules_not_quantized=exclude)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = qint("bits", "w_bit", default=4, lo=1, hi=64)
        group = qint("group_size", "q_group_size", default=128, lo=-1)
        return Quantization(method.replace("_marlin", ""), bits, group_size=group,
                            modules_not_quantized=skip)
    if method == "mxfp4":
        return Quantization("mxfp4", 4, group_size=32, experts_only=True, modules_not_quantized=skip)
    if method == "bitsandbytes":
        bits = 4 if q.get("load_in_4bit") else 8
        return Quantization("bitsandbytes", bits, group_size=64 if bits == 4 else None,
                            modules_not_quantized=skip)
    if method == "compressed-tensors":
        bits, group, fmt = 8, None, str(q.get("format") or "")
        groups = q.get("config_groups") or {}
        for grp in (groups.values() if isinstance(groups, Mapping) else ()):
            weights = (grp.get("weights") if isinstance(grp, Mapping) else None) or {}
            if not isinstance(weights, Mapping):
                continue
            if weights.get("num_bits"):
                bits = checked_int(weights["num_bits"], "quantization_config.config_groups.weights.num_bits", src, 1, 64)
            if weights.get("group_size"):
                group = checked_int(weights["group_size"], "quantization_config.config_groups.weights.group_size", src,
                                    -1, MAX_HIDDEN)
        name = "fp8" if "float" in fmt and bits == 8 else ("int4" if bits == 4 else f"int{bits}")
        return Quantization(name, bits, group_size=group, kv_cache_dtype=kv_dtype,
                            modules_not_quantized=skip)
    if method:
        bits = qint("bits", default=8, lo=1, hi=64)
        return Quantization(method, bits, group_size=qint("group_size", lo=-1), kv_cache_dtype=kv_dtype,
                            modules_not_quantized=skip)
    return None


#: the vision tower's fields kvplan sizes it by (models/params.py, memory/encoder_profile.py)
_VISION_INTS = ("hidden_size", "embed_dim", "num_hidden_layers", "depth", "intermediate_size", "patch_size",
                "num_channels", "in_chans", "in_channels", "temporal_patch_size", "out_hidden_size",
                "spatial_merge_size", "image_size", "num_attention_heads", "num_heads")


def _check_vision(cfg: Mapping[str, Any], source: str) -> None:
    """The vision tower's sizes, when given, are positive integers of a physical size (the tower is
    counted in the weights and profiled with vLLM's dummy images)."""
    vc = cfg.get("vision_config")
    if not isinstance(vc, Mapping):
        return
    for key in _VISION_INTS:
        if vc.get(key):
            checked_int(vc[key], f"vision_config.{key}", source, 1, MAX_HIDDEN)
    if vc.get("mlp_ratio") and not (isinstance(vc["mlp_ratio"], (int, float)) and not isinstance(vc["mlp_ratio"], bool)
                                    and 0 < vc["mlp_ratio"] <= 64):
        raise ConfigFieldError("vision_config.mlp_ratio", source, f"must be a number in (0, 64], got {_shown(vc['mlp_ratio'])}")
    for key in ("mm_tokens_per_image", "spatial_merge_size"):
        if cfg.get(key):
            checked_int(cfg[key], key, source, 1, MAX_HIDDEN)


def _per_layer(f: _Fields, key: str, index: int, default: int = 0) -> int:
    """A field that may be one number or one per layer (Hunyuan's moe_topk, num_shared_expert)."""
    value = f.cfg.get(key)
    if isinstance(value, list):
        if not value:
            return default
        return checked_int(value[min(index, len(value) - 1)], key, f.source, 0, MAX_INTERMEDIATE)
    return f.int(key, default=default)


def _ernie_moe(f: _Fields, index: int, dense_inter: int) -> DenseMLP | MoEMLP:
    """ERNIE-4.5 (vllm ernie45_moe.py): experts between moe_layer_start_index and
    moe_layer_end_index (-1 / null: the last layer) every moe_layer_interval layers."""
    n = f.int("num_hidden_layers")
    start = f.int("moe_layer_start_index", default=0)
    end = f.int("moe_layer_end_index", default=-1) if f.has("moe_layer_end_index") else -1
    end = n - 1 if end < 0 else end
    step = f.int("moe_layer_interval", default=1, lo=1)
    if not (start <= index <= end and (index - start) % step == 0):
        return DenseMLP(dense_inter)
    inter = f.int("moe_intermediate_size")
    shared = f.int("moe_num_shared_experts", default=0)
    return MoEMLP(num_experts=f.int("moe_num_experts"), experts_per_token=f.int("moe_k"),
                  expert_intermediate_size=inter, shared_experts=shared, shared_intermediate_size=shared * inter,
                  router_bias=True)  # moe_statics.e_score_correction_bias


def _mlp_for(f: _Fields, model_type: str, index: int, hidden: int) -> DenseMLP | MoEMLP:
    if model_type == "ernie4_5_moe" and f.has("moe_num_experts"):
        return _ernie_moe(f, index, f.int("intermediate_size"))
    if model_type == "hunyuan_v1_moe" and f.has("num_experts"):
        # vllm hunyuan_v1.py: every layer MoE, per-layer moe_intermediate_size / moe_topk /
        # num_shared_expert (shared experts of moe_intermediate_size each)
        inter = _per_layer(f, "moe_intermediate_size", index, f.int("intermediate_size"))
        shared = _per_layer(f, "num_shared_expert", index, 0)
        return MoEMLP(num_experts=f.int("num_experts"), experts_per_token=_per_layer(f, "moe_topk", index, 1),
                      expert_intermediate_size=inter, shared_experts=shared, shared_intermediate_size=shared * inter)
    n_experts = f.int("num_local_experts", "num_experts", "n_routed_experts", default=0, lo=0, hi=MAX_EXPERTS)
    dense_inter = f.int("intermediate_size", "ffn_hidden_size", "n_inner", default=4 * hidden, lo=0,
                        hi=MAX_INTERMEDIATE)
    if model_type.startswith("llama4"):
        dense_inter = f.int("intermediate_size_mlp", default=dense_inter)
    gated = model_type not in ("falcon", "gpt2", "gpt_neox", "phi", "gpt_bigcode", "starcoder2",
                               "opt", "bloom", "mpt")
    bias = bool(f.get("mlp_bias", False)) or model_type in ("falcon",) and bool(f.get("bias"))
    if n_experts <= 1:
        return DenseMLP(dense_inter, gated=gated, bias=bias)
    # Which layers are sparse: each family has its own switch.
    if f.has("first_k_dense_replace") and index < f.int("first_k_dense_replace"):
        return DenseMLP(dense_inter, gated=gated)
    if f.has("moe_layer_freq") and f.int("moe_layer_freq") > 1 and index % f.int("moe_layer_freq"):
        return DenseMLP(dense_inter, gated=gated)
    if index in (f.get("mlp_only_layers") or []):
        return DenseMLP(dense_inter, gated=gated)
    step = f.int("decoder_sparse_step", default=1)
    if step > 1 and (index + 1) % step != 0:
        return DenseMLP(dense_inter, gated=gated)
    interleave = f.int("interleave_moe_layer_step", default=1)
    if model_type.startswith("llama4") and interleave > 1 and (index + 1) % interleave != 0:
        return DenseMLP(dense_inter, gated=gated)
    expert_inter = f.int("moe_intermediate_size", lo=0, hi=MAX_INTERMEDIATE,
                         default=f.int("intermediate_size", default=dense_inter, lo=0, hi=MAX_INTERMEDIATE))
    shared = f.int("n_shared_experts", default=0)
    shared_inter = shared * expert_inter
    if f.int("shared_expert_intermediate_size", default=0):
        shared, shared_inter = 1, f.int("shared_expert_intermediate_size")
    if model_type == "granitemoehybrid" and f.int("shared_intermediate_size", default=0):
        shared, shared_inter = 1, f.int("shared_intermediate_size")
    if model_type.startswith("llama4"):
        shared, shared_inter = 1, f.int("intermediate_size")
    return MoEMLP(
        num_experts=n_experts,
        experts_per_token=f.int("num_experts_per_tok", "experts_per_token", "moe_topk", default=2),
        expert_intermediate_size=expert_inter,
        shared_experts=shared,
        shared_intermediate_size=shared_inter,
        shared_expert_gate=model_type in ("qwen2_moe", "qwen3_next"),
        expert_bias=model_type == "gpt_oss",
        router_bias=model_type == "gpt_oss",
    )


#: model types whose recurrent layers are Mamba-2 mixers (vllm mamba_mixer2.MambaMixer2)
MAMBA2_MODEL_TYPES = ("nemotron_h", "granitemoehybrid", "bamba", "falcon_h1")


def _mamba2(f: _Fields, model_type: str, heads: int) -> Mamba2State:
    """A Mamba-2 mixer from the family's field names (Nemotron-H: mamba_num_heads, ...; Granite /
    Bamba: mamba_n_heads, ...). The temporal state's dtype: Nemotron-H's config names it
    (``mamba_ssm_cache_dtype``, which vLLM's NemotronH config hook copies into the cache config
    when ``--mamba-ssm-cache-dtype`` is auto; float16 when absent); the others the model dtype."""
    if model_type == "nemotron_h":
        nh, hd = f.int("mamba_num_heads"), f.int("mamba_head_dim")
        state, groups = f.int("ssm_state_size"), f.int("n_groups", default=1)
        kernel = f.int("conv_kernel", default=4)
        ssm_dtype = str(f.get("mamba_ssm_cache_dtype") or "float16")
        conv_bias = bool(f.get("use_conv_bias", True))
    else:
        hidden = f.int("hidden_size")
        nh = f.int("mamba_n_heads", default=128)
        hd = f.int("mamba_d_head", default=f.int("mamba_expand", default=2) * hidden // max(nh, 1))
        state, groups = f.int("mamba_d_state", default=128), f.int("mamba_n_groups", default=1)
        kernel = f.int("mamba_d_conv", default=4)
        ssm_dtype = "auto"
        conv_bias = bool(f.get("mamba_conv_bias", True))
    ssm_bytes = {"float32": 4, "float16": 2, "bfloat16": 2}.get(ssm_dtype, 0)
    return Mamba2State(variant="mamba2", num_k_heads=groups, num_v_heads=nh, head_k_dim=state, head_v_dim=hd,
                       conv_kernel=kernel, num_heads=heads, state_size=state, n_groups=groups,
                       ssm_state_bytes=ssm_bytes, conv_bias=conv_bias)


def _nemotron_h_layers(f: _Fields, heads: int, kv_heads: int, head_dim: int) -> list[Layer]:
    """Nemotron-H's ``hybrid_override_pattern``: one block per character (M Mamba-2, * attention,
    E MoE, - MLP). kvplan's layers pair a mixer with the MLP block that follows it (a mixer with no
    MLP after it gets an empty one), so there is one layer per KV-holding block, as vLLM counts
    its cache layers."""
    pattern = str(f.get("hybrid_override_pattern") or "")
    if not pattern:
        raise ConfigFieldError("hybrid_override_pattern", f.source, "missing")
    if len(pattern) > 2 * MAX_LAYERS:
        raise ConfigFieldError("hybrid_override_pattern", f.source, f"holds {len(pattern):,} blocks; at most "
                               f"{2 * MAX_LAYERS:,} are read")
    layers: list[Layer] = []
    pending: Optional[Any] = None  # the mixer waiting for its MLP block
    n_experts = f.int("n_routed_experts", default=0)

    def mlp_block(c: str):
        if c == "E":
            return MoEMLP(num_experts=n_experts, experts_per_token=f.int("num_experts_per_tok"),
                          expert_intermediate_size=f.int("moe_intermediate_size"),
                          shared_experts=f.int("n_shared_experts", default=0),
                          shared_intermediate_size=f.int("moe_shared_expert_intermediate_size", default=0),
                          router_bias=True, gated=False)  # e_score_correction_bias; relu² experts
        return DenseMLP(f.int("intermediate_size"), gated=False, bias=bool(f.get("mlp_bias", False)))

    for pos, c in enumerate(pattern):
        if c in "M*":
            if pending is not None:
                layers.append(Layer(len(layers), pending, DenseMLP(0, gated=False), 1))
            pending = _mamba2(f, "nemotron_h", heads) if c == "M" else FullAttention(
                heads, kv_heads, head_dim, head_dim, bool(f.get("attention_bias", False)), False)
        elif c in "E-":
            if pending is None:
                raise ConfigFieldError("hybrid_override_pattern", f.source,
                                       f"an MLP block at position {pos} follows no mixer (not modelled)")
            layers.append(Layer(len(layers), pending, mlp_block(c), 2))
            pending = None
        else:
            raise ConfigFieldError("hybrid_override_pattern", f.source, f"unknown block {c!r} at position {pos}")
    if pending is not None:
        layers.append(Layer(len(layers), pending, DenseMLP(0, gated=False), 1))
    return layers


def spec_from_config(cfg: Mapping[str, Any], source: str, name: Optional[str] = None,
                     published_params: Optional[int] = None,
                     aliases: tuple[str, ...] = ()) -> ModelSpec:
    """Build a :class:`ModelSpec` from a parsed config.json dict. ``source`` names the file.

    Every error is a usage error: the fields that size the model are checked by name (type and
    physical range); a value of an unexpected kind anywhere else (a string where a table is, a
    number where a list is) is reported as the file's, never as a traceback."""
    if not isinstance(cfg, Mapping):
        raise UsageError(f"{source}: a config.json must hold a JSON object")
    try:
        return _spec_from_config(cfg, source, name, published_params, aliases)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, ZeroDivisionError, OverflowError,
            RecursionError) as exc:
        raise UsageError(f"{source}: a field holds a value kvplan cannot read ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from None


def _spec_from_config(cfg: Mapping[str, Any], source: str, name: Optional[str],
                      published_params: Optional[int], aliases: tuple[str, ...]) -> ModelSpec:
    _check_vision(cfg, source)
    flat = _text_config(cfg)
    f = _Fields(flat, source)
    model_type = str(f.get("model_type", "")).lower()
    n_layers = f.int("num_hidden_layers", "n_layer", "num_layers", "n_layers", lo=1, hi=MAX_LAYERS)
    hidden = f.int("hidden_size", "n_embd", "d_model", lo=1, hi=MAX_HIDDEN)
    heads = f.int("num_attention_heads", "n_head", "num_heads", lo=1, hi=MAX_HEADS)
    vocab = f.int("vocab_size", lo=1, hi=MAX_VOCAB)
    kv_heads = None
    for key in KV_HEAD_KEYS:
        if f.has(key):
            kv_heads = f.int(key, lo=1, hi=MAX_HEADS)
            break
    if model_type == "falcon" and not f.get("new_decoder_architecture") and f.get("multi_query"):
        kv_heads = 1
    if kv_heads is None:
        kv_heads = heads
    head_dim = f.int("head_dim", default=0, lo=0, hi=MAX_HEAD_DIM) or \
        f.int("hidden_size_per_head", default=0, lo=0, hi=MAX_HEAD_DIM) or hidden // heads
    if head_dim < 1:
        raise ConfigFieldError("num_attention_heads", source, f"is larger than hidden_size ({hidden:,}) and no "
                               "head_dim is given: heads of zero width")
    head_dim_v = head_dim
    qkv_bias = bool(f.get("attention_bias", False)) or model_type in ("qwen2", "qwen2_moe")
    qk_norm = model_type in ("qwen3", "qwen3_moe", "qwen3_next", "gemma3", "gemma3_text", "olmo2") or \
        bool(f.get("use_qk_norm", False))

    kinds = _layer_pattern(f, model_type, n_layers)
    window = f.int("sliding_window", default=0)
    chunk = f.int("attention_chunk_size", default=0)
    is_mla = f.has("kv_lora_rank")
    layers = []
    index_dim = f.int("index_head_dim", default=0) if f.has("index_topk") else 0
    for i, kind in enumerate(kinds if model_type != "nemotron_h" else ()):
        mixer: Any
        if is_mla:
            mixer = MLAttention(
                num_heads=heads,
                kv_lora_rank=f.int("kv_lora_rank"),
                qk_rope_head_dim=f.int("qk_rope_head_dim"),
                qk_nope_head_dim=f.int("qk_nope_head_dim"),
                v_head_dim=f.int("v_head_dim"),
                q_lora_rank=f.int("q_lora_rank", lo=0, hi=MAX_HIDDEN) if f.has("q_lora_rank") else None,
                # deepseek_v2.py Indexer (0.11+): fp8 values + fp32 scale per 128 (quant_block_size)
                indexer_bytes_per_token=index_dim + index_dim // 128 * 4 if index_dim else 0,
                index_head_dim=index_dim,
                index_n_heads=f.int("index_n_heads", default=0) if index_dim else 0,
            )
        elif kind == "linear" and model_type in MAMBA2_MODEL_TYPES:
            mixer = _mamba2(f, model_type, heads)
        elif kind == "linear":
            mixer = LinearAttentionState(
                variant="gated_delta_net" if model_type == "qwen3_next" else model_type or "linear",
                num_k_heads=f.int("linear_num_key_heads", default=heads),
                num_v_heads=f.int("linear_num_value_heads", default=heads),
                head_k_dim=f.int("linear_key_head_dim", default=head_dim),
                head_v_dim=f.int("linear_value_head_dim", default=head_dim),
                conv_kernel=f.int("linear_conv_kernel_dim", "conv_kernel", default=4),
                num_heads=heads,
            )
        elif kind == "sliding" and window > 0:
            mixer = SlidingWindowAttention(heads, kv_heads, head_dim, head_dim_v, qkv_bias, qk_norm,
                                           window=window)
        elif kind == "chunked" and chunk > 0:
            mixer = ChunkedLocalAttention(heads, kv_heads, head_dim, head_dim_v, qkv_bias, qk_norm,
                                          chunk=chunk)
        else:
            mixer = FullAttention(heads, kv_heads, head_dim, head_dim_v, qkv_bias, qk_norm)
        norms = 4 if model_type in ("gemma2", "gemma3", "gemma3_text") else 2
        layers.append(Layer(i, mixer, _mlp_for(f, model_type, i, hidden), norms))

    if model_type == "nemotron_h":
        layers = _nemotron_h_layers(f, heads, kv_heads, head_dim)
    max_len_keys = {k: f.int(k, lo=1, hi=MAX_CONTEXT) for k in MAX_LEN_KEYS
                    if isinstance(flat.get(k), (int, float)) and not isinstance(flat.get(k), bool)}
    rope = flat.get("rope_scaling") or flat.get("rope_parameters")
    dtype = str(f.get("torch_dtype") or f.get("dtype") or "float32").replace("torch.", "")
    return ModelSpec(
        name=name or str(cfg.get("_name_or_path") or source),
        source=source,
        architectures=tuple(flat.get("architectures") or ()),
        model_type=model_type,
        hidden_size=hidden,
        vocab_size=vocab,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        layers=tuple(layers),
        torch_dtype=dtype,
        tie_word_embeddings=bool(flat.get("tie_word_embeddings", model_type not in UNTIED_BY_DEFAULT)),
        max_len_keys=max_len_keys,
        rope_scaling=rope if isinstance(rope, Mapping) else None,
        sliding_window=window or None,
        quantization=_quantization(f),
        num_mtp_layers=f.int("num_nextn_predict_layers", default=0),
        has_vision="vision_config" in cfg,
        published_params=published_params,
        aliases=aliases,
        raw=cfg,
    )


def load_config_file(path: Path) -> ModelSpec:
    """Read ``config.json`` (or a model folder containing one)."""
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise file_not_found(path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise UsageError(f"{path}: not a config.json: JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise UsageError(f"{path}: not valid JSON: {str(exc)[:120]}") from None
    # A local model is served by its folder path: that is what `vllm serve` must be given.
    return spec_from_config(cfg, str(path), name=str(path.parent))
