"""vLLM's defaults that kvplan must resolve before sizing anything: dtypes, max_model_len, the
batch limits and the block size. Each function names the vLLM code it follows."""
from __future__ import annotations

from typing import Optional

from ..errors import UsageError
from ..hardware import GIB, Gpu
from ..models.spec import LinearAttentionState, MLAttention, ModelSpec
from .admission import StartupError, max_model_len_above_derived
from .kv_specs import KVDtype
from .semantics import VllmSemantics

# Architectures without rotary embeddings (transformers gives every other config rope_parameters).
ABSOLUTE_POSITION_MODELS = {"gpt2", "opt", "bloom", "mpt", "gpt_bigcode", "gptj_alibi", "baichuan_alibi"}

MODEL_DTYPES = {"float16": 2, "half": 2, "bfloat16": 2, "float32": 4, "float": 4}


def resolve_model_dtype(spec: ModelSpec, requested: str, gpu: Gpu, device: str,
                        sem: Optional[VllmSemantics] = None) -> str:
    """``vllm/config/model.py::_resolve_auto_dtype``: ``auto`` takes config.json's torch_dtype,
    but float32 checkpoints are downcast on every platform, CPU included
    (:meth:`VllmSemantics.float32_auto_dtype` has each version's choice)."""
    if requested not in ("auto", None):
        name = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(requested, requested)
        if name not in MODEL_DTYPES:
            raise UsageError(f"--dtype {requested}: expected auto, float16, bfloat16 or float32")
        return name
    dtype = spec.torch_dtype if spec.torch_dtype in MODEL_DTYPES else "bfloat16"
    if dtype == "float32":
        from .semantics import semantics

        return (sem or semantics()).float32_auto_dtype(device, gpu.sm, spec.model_type)
    if dtype == "bfloat16" and device == "cuda" and gpu.sm is not None and gpu.sm < 80:
        return "float16"
    return dtype


KV_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
             "int8_per_token_head", "fp8_per_token_head", "int4_per_token_head")


def resolve_kv_dtype(spec: ModelSpec, requested: str, model_dtype: str) -> KVDtype:
    """``resolve_kv_cache_dtype_string``: ``auto`` is the model dtype unless the checkpoint
    declares a KV scheme (fp8). fp8 variants store 1 byte per element; ``fp8_ds_mla`` packs a
    DeepSeek latent into 656 bytes; per-token-head formats add two float32 scales per head."""
    name = requested or "auto"
    if name not in KV_DTYPES:
        raise UsageError(f"--kv-cache-dtype {requested}: expected one of {', '.join(KV_DTYPES)}")
    if name == "auto" and spec.quantization and spec.quantization.kv_cache_dtype:
        name = spec.quantization.kv_cache_dtype
    if name == "auto":
        return KVDtype(model_dtype, MODEL_DTYPES[model_dtype])
    if name in ("float16", "bfloat16"):
        return KVDtype(name, 2)
    if name == "fp8_ds_mla":
        if not spec.is_mla:
            raise UsageError("--kv-cache-dtype fp8_ds_mla is for DeepSeek MLA models only")
        return KVDtype(name, 1, mla_bytes_per_token=656)
    if name in ("int8_per_token_head", "fp8_per_token_head"):
        return KVDtype(name, 1, per_head_extra_bytes=8)
    if name == "int4_per_token_head":
        return KVDtype(name, 0.5, per_head_extra_bytes=8)
    return KVDtype(name, 1)


def derive_max_model_len(spec: ModelSpec, sem: VllmSemantics) -> tuple[int, str]:
    """``_get_and_verify_max_len``: min over the length keys (model_max_length overrides), then
    RoPE scaling: linear/dynamic multiply by factor; YaRN multiplied
    original_max_position_embeddings × factor up to 0.27 and is trusted as is in 0.33;
    llama3/longrope/su never multiply; Gemma-3 skips scaling."""
    keys = dict(spec.max_len_keys)
    if "model_max_length" in keys:
        derived, key = keys["model_max_length"], "model_max_length"
    elif keys:
        key = min(keys, key=lambda k: keys[k])
        derived = keys[key]
    else:
        derived, key = 2048, "default"
    rope = spec.rope_scaling or {}
    rope_type = str(rope.get("rope_type") or rope.get("type") or "").lower()
    factor = rope.get("factor")
    if rope and factor and not spec.model_type.startswith("gemma3"):
        if rope_type == "yarn":
            if sem.yarn_multiplies_max_len:
                original = rope.get("original_max_position_embeddings") or derived
                derived = int(original * factor)
        elif rope_type not in ("su", "longrope", "llama3", "deepseek_yarn", "deepseek_llama_scaling",
                               "default", "mrope", "proportional", ""):
            derived = int(derived * factor)
    return int(derived), key


NO_LENGTH_KEY_WARNING = ("The model's config.json does not contain any of the keys to determine the original "
                         "maximum length of the model. Assuming the model's maximum length is 2048.")


def no_length_key_warning(spec: ModelSpec, user_len: Optional[int]) -> Optional[str]:
    """vLLM's warning (``_get_and_verify_max_len``) when config.json names no length, and what was
    assumed: 2048 (before RoPE scaling), or the given --max-model-len, which vLLM then takes as is."""
    if spec.max_len_keys:
        return None
    if user_len not in (None, -1):
        return (f"config.json names no maximum length (max_position_embeddings, n_positions, max_seq_len, "
                f"seq_length, model_max_length): vLLM takes --max-model-len {user_len} as given, unchecked.")
    return NO_LENGTH_KEY_WARNING + " (vLLM's warning; kvplan assumed the same 2,048 tokens.)"


def check_max_model_len(spec: ModelSpec, sem: VllmSemantics, user_len: Optional[int]) -> tuple[int, Optional[StartupError]]:
    derived, key = derive_max_model_len(spec, sem)
    if user_len is None or user_len == -1:
        return derived, None
    if key == "default":
        return user_len, None  # no length key at all: vLLM takes --max-model-len as given
    model_max_length = spec.max_len_keys.get("model_max_length")
    if user_len > derived and not (model_max_length is not None and user_len <= model_max_length):
        # From 0.12 every RoPE model carries rope_parameters, and vLLM multiplies the derived
        # length by a float factor (1.0) before printing it: "max_position_embeddings=4096.0".
        rope_model = spec.model_type not in ABSOLUTE_POSITION_MODELS
        shown: float | int = float(derived) if sem.derived_max_len_printed_as_float and rope_model else derived
        return user_len, max_model_len_above_derived(sem, user_len, key, shown, model_max_length)
    return user_len, None


#: how a plan names vLLM's two usage contexts (``UsageContext``), and the spellings it accepts for them
ENTRYPOINTS = {"serve": "serve", "api": "serve", "openai_api_server": "serve", "openai-api-server": "serve",
               "offline": "offline", "llm": "offline", "llm_class": "offline", "llm-class": "offline"}


def entrypoint_kind(name: str) -> str:
    """``serve`` (``vllm serve``: UsageContext.OPENAI_API_SERVER) or ``offline`` (the ``LLM(...)`` class:
    UsageContext.LLM_CLASS), from any of the spellings in :data:`ENTRYPOINTS`."""
    kind = ENTRYPOINTS.get(str(name).strip().lower())
    if kind is None:
        raise UsageError(f"--entrypoint {name}: expected serve (vllm serve) or offline (the LLM(...) class; "
                         "also llm)")
    return kind


def batch_defaults(sem: VllmSemantics, gpu: Gpu, device: str, world_size: int,
                   entrypoint: str = "serve") -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as ``EngineArgs.get_batch_defaults`` picks them:
    by device name before 0.8.5, the A100 exclusion from 0.9, the >= 160 GiB tier from 0.28, GB10 (sm 12.1) excluded in 0.33,
    a CPU branch from 0.9 (docs/vllm-semantics.md §4). The offline ``LLM(...)`` entrypoint (UsageContext
    LLM_CLASS) has its own column: 8,192 batched tokens on GPUs under 70 GiB, 16,384 above."""
    serve = entrypoint_kind(entrypoint) == "serve"
    if device == "cpu" and sem.cpu_scheduler_defaults:
        return (2048 if serve else 4096) * world_size, (128 if serve else 256) * world_size
    if sem.engine == "V0":
        return 0, 256  # V0: max(max_model_len, 2048) tokens, resolved by the caller
    mem = gpu.memory_bytes
    name = gpu.name.lower()
    if sem.batch_defaults_by_device_name:
        # 0.7.x-0.8.4 `_set_default_args_v1` picks the tier by the device NAME, not its memory:
        # "h100"/"h200" in get_device_name() get 8192 (API) / 16384 (LLM), everything else 2048 / 8192;
        # max_num_seqs is 1024 on every GPU until 0.8.3 (0.7.3 EngineArgs.__post_init__, 0.8.2
        # arg_utils.py L1815), 0.8.4 gives 256 to the non-Hopper names (arg_utils.py L1669-1682).
        hopper_name = "h100" in name or "h200" in name
        tokens = (8192 if serve else 16384) if hopper_name else (2048 if serve else 8192)
        seqs = 1024 if (hopper_name or sem.max_num_seqs_1024_on_every_gpu) else 256
        return tokens, seqs
    if mem >= 160 * GIB and sem.large_gpu_scheduler_defaults:
        return 16384, 1024
    big = mem >= 70 * GIB
    if sem.a100_takes_small_gpu_defaults and "a100" in name:
        big = False
    if sem.sm121_takes_small_gpu_defaults and gpu.sm == 121:
        big = False
    if big:
        return (8192 if serve else 16384), 1024
    return (2048 if serve else 8192), 256


def default_block_size(spec: ModelSpec, gpu: Gpu, device: str, sem: VllmSemantics,
                       kv_dtype: str = "auto") -> int:
    """``Platform.update_block_size_for_backend``: 16 on CUDA. For MLA the backend decides, per
    version and compute capability (:meth:`VllmSemantics.mla_block_size`: FlashMLA's 64 on Hopper
    from 0.8 to 0.17, FLASH_ATTN_MLA's 16 there from 0.18 unless the KV cache is fp8, 128 / 64 / 32
    on Blackwell). The CPU backend prefers 128 (16 for MLA). A GPU of unknown architecture
    (--gpu-memory) gets the portable Triton backend's 16."""
    if device == "cpu":
        return 16 if spec.is_mla else sem.cpu_block_size
    if not spec.is_mla or gpu.sm is None:
        return 16
    mla = next(l.mixer for l in spec.layers if isinstance(l.mixer, MLAttention))
    if mla.indexer_bytes_per_token:
        return 64  # DeepSeek-V3.2 (0.11+): the sparse MLA backends (FlashMLA sparse) take 64-token blocks
    return sem.mla_block_size(gpu.sm, kv_dtype, mla.qk_nope_head_dim)


def align_hybrid_block_size(spec: ModelSpec, block_size: int, attn_token_bytes: int,
                            mamba_page_bytes: int) -> int:
    """``_align_hybrid_block_size``: with Mamba-style layers the attention block is enlarged
    until one attention page holds at least one recurrent state."""
    if not any(isinstance(l.mixer, LinearAttentionState) for l in spec.layers) or attn_token_bytes == 0:
        return block_size
    align = max(16, block_size)
    needed = align * -(-mamba_page_bytes // (align * attn_token_bytes))
    return max(block_size, needed)
