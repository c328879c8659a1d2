"""Deterministic tiny model folders for the real-vLLM tests.

Models are built by ``_build_model.py`` running inside the .venv-vllm interpreter (kvplan's
own venv has no torch), into ``<repo>/.cache/vllm-models/<name>-<hash>/``.  The hash covers
the spec, the builder's source and the vLLM venv's stamp, so any change rebuilds; an
existing folder is reused.  Builds are atomic (temp folder + rename) and serialised by a
file lock, so parallel test processes are safe.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import math
import os
import pathlib
import shutil
import subprocess
import time
from typing import Any

from . import env

BUILDER = pathlib.Path(__file__).with_name("_build_model.py")

#: A plain chat template (jinja) written into tokenizer_config.json.
DEFAULT_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What to build. ``config`` holds the transformers config kwargs (vocab_size is set by the builder)."""

    name: str
    model_type: str  # transformers model_type, e.g. "llama", "qwen2", "gemma3_text", "mistral"
    config: dict[str, Any]
    dtype: str = "float32"  # dtype of the saved weights
    seed: int = 0
    chat_template: str = DEFAULT_CHAT_TEMPLATE
    vocab_pad_to: int = 1

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"))

    def key(self) -> str:
        h = hashlib.sha256()
        h.update(self.to_json().encode())
        h.update(BUILDER.read_bytes())
        stamp = env.vllm_python().parent.parent / ".kvplan-vllm-stamp"
        if stamp.exists():
            h.update(stamp.read_bytes())
        return h.hexdigest()[:16]

    # --- shape helpers (used by tests that compute KV sizes from first principles)
    @property
    def num_layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def num_kv_heads(self) -> int:
        return int(self.config.get("num_key_value_heads", self.config["num_attention_heads"]))

    @property
    def head_dim(self) -> int:
        return int(self.config.get("head_dim") or self.config["hidden_size"] // self.config["num_attention_heads"])

    def kv_bytes_per_token(self, kv_dtype: str = "float32") -> int:
        """layers x kv_heads x 2 (K and V) x head_dim x dtype bytes."""
        return self.num_layers * self.num_kv_heads * 2 * self.head_dim * _DTYPE_BYTES[kv_dtype]


def tiny_llama_spec(**config_overrides: Any) -> ModelSpec:
    """Dense GQA Llama: 2 layers, hidden 256, 4 heads, 2 KV heads, head_dim 64, 4096 positions."""
    config: dict[str, Any] = dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        initializer_range=0.02,
    )
    dtype = config_overrides.pop("dtype", "float32")
    seed = config_overrides.pop("seed", 0)
    config.update(config_overrides)
    return ModelSpec(name="tiny-llama", model_type="llama", config=config, dtype=dtype, seed=seed)


def tiny_qwen2_sliding_spec(**config_overrides: Any) -> ModelSpec:
    """Qwen2 with per-layer ``layer_types`` (full + sliding-window attention), same shape as tiny-llama."""
    config: dict[str, Any] = dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        use_sliding_window=True,
        sliding_window=256,
        max_window_layers=1,
        layer_types=["full_attention", "sliding_attention"],
    )
    dtype = config_overrides.pop("dtype", "float32")
    seed = config_overrides.pop("seed", 0)
    config.update(config_overrides)
    return ModelSpec(name="tiny-qwen2-swa", model_type="qwen2", config=config, dtype=dtype, seed=seed)


def tiny_gemma3_spec(**config_overrides: Any) -> ModelSpec:
    """Gemma-3 text model: alternating sliding-window / global attention layers (hybrid KV cache)."""
    config: dict[str, Any] = dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        sliding_window=256,
        layer_types=["sliding_attention", "full_attention"],
        query_pre_attn_scalar=64,
        tie_word_embeddings=True,
        rope_theta=10000.0,
    )
    dtype = config_overrides.pop("dtype", "float32")
    seed = config_overrides.pop("seed", 0)
    config.update(config_overrides)
    return ModelSpec(name="tiny-gemma3", model_type="gemma3_text", config=config, dtype=dtype, seed=seed)


def tiny_mistral_spec(**config_overrides: Any) -> ModelSpec:
    """Mistral with a (global) sliding_window on every layer."""
    config: dict[str, Any] = dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        sliding_window=256,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
    )
    dtype = config_overrides.pop("dtype", "float32")
    seed = config_overrides.pop("seed", 0)
    config.update(config_overrides)
    return ModelSpec(name="tiny-mistral-swa", model_type="mistral", config=config, dtype=dtype, seed=seed)


@dataclasses.dataclass(frozen=True)
class BuiltModel:
    spec: ModelSpec
    path: pathlib.Path
    info: dict[str, Any]
    built: bool  # False when reused from the cache
    seconds: float

    @property
    def vocab_size(self) -> int:
        return int(self.info["vocab_size"])

    def __fspath__(self) -> str:
        return str(self.path)


def build_model(spec: ModelSpec, cache_dir: pathlib.Path | None = None, timeout: float = 600.0) -> BuiltModel:
    """Build (or reuse) the model folder for ``spec``. Raises on failure with the builder's output."""
    t0 = time.monotonic()
    cache = pathlib.Path(cache_dir) if cache_dir else env.model_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    final = cache / f"{spec.name}-{spec.key()}"
    info_file = final / "kvplan_model_info.json"
    lock_path = cache / f".{final.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if info_file.exists():
            info = json.loads(info_file.read_text())
            return BuiltModel(spec, final, info, built=False, seconds=time.monotonic() - t0)
        env.check_vllm_env()
        tmp = cache / f".{final.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        child_env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONHASHSEED="0")
        try:
            proc = subprocess.run(
                [str(env.vllm_python()), str(BUILDER), spec.to_json(), str(tmp)],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=child_env,
                stdin=subprocess.DEVNULL,
            )
            if proc.returncode != 0:
                raise RuntimeError(
                    f"building {spec.name} failed (exit {proc.returncode}):\n"
                    f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-8000:]}"
                )
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        info = json.loads(info_file.read_text())
        return BuiltModel(spec, final, info, built=True, seconds=time.monotonic() - t0)


def build_tiny_llama(cache_dir: pathlib.Path | None = None, **config_overrides: Any) -> BuiltModel:
    """The dense GQA tiny Llama (see ``tiny_llama_spec``)."""
    return build_model(tiny_llama_spec(**config_overrides), cache_dir=cache_dir)


def expected_kv_line_tokens(num_blocks: int, block_size: int, max_model_len: int) -> tuple[int, float]:
    """(tokens, concurrency) as printed in vLLM's ``CPU KV cache size`` line (V1).

    tokens = int(num_blocks / ceil(L / block_size) * L); concurrency = tokens / L.
    """
    blocks_per_req = math.ceil(max_model_len / block_size)
    concurrency = num_blocks / blocks_per_req
    return int(concurrency * max_model_len), concurrency
