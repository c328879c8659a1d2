"""Model configs and helpers shared by the plan tests (hand-written shapes, checked against the
published config.json files)."""
from __future__ import annotations


from kvplan.hardware import GIB, custom_gpu, find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.models import spec_from_config

LLAMA2_70B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
    "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
    "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096,
    "torch_dtype": "float16", "tie_word_embeddings": False,
}

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "vocab_size": 129280, "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
    "tie_word_embeddings": False, "num_nextn_predict_layers": 1,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                            "weight_block_size": [128, 128]},
}

GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "intermediate_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 64, "num_local_experts": 128, "experts_per_token": 4, "num_experts_per_tok": 4,
    "sliding_window": 128, "vocab_size": 201088, "max_position_embeddings": 131072, "attention_bias": True,
    "layer_types": ["sliding_attention", "full_attention"] * 18, "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                     "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False},
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
                            "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
}

GEMMA3_27B_TEXT = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 5376,
    "intermediate_size": 21504, "num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 16,
    "head_dim": 128, "sliding_window": 1024, "sliding_window_pattern": 6, "vocab_size": 262208,
    "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
}


def model(cfg: dict, name: str = "test-model"):
    return spec_from_config(cfg, f"test:{name}", name=name)




def run_plan(cfg_or_spec, gpu="H100", **kw):
    spec = cfg_or_spec if not isinstance(cfg_or_spec, dict) else model(cfg_or_spec)
    g = find_gpu(gpu) if isinstance(gpu, str) else custom_gpu(gpu)
    return plan(PlanRequest(spec, g, **kw))


__all__ = ["GIB", "run_plan", "model"]


def kv_groups(block_size: int, *groups: tuple) -> tuple:
    """KV specs for the simulator's engine from ("full",), ("sliding", window) or ("mamba",): the
    shape of the KV (heads, bytes) does not matter to the engine, only how a spec counts blocks."""
    from kvplan.memory.kv_specs import FullAttentionSpec, MambaSpec, SlidingWindowSpec

    shape = dict(num_kv_heads=1, head_size=1, head_size_v=1, dtype_bytes=1)
    out = []
    for kind, *args in groups:
        if kind == "full":
            out.append(FullAttentionSpec(block_size, **shape))
        elif kind == "sliding":
            out.append(SlidingWindowSpec(block_size, **shape, sliding_window=args[0]))
        elif kind == "mamba":
            out.append(MambaSpec(block_size, state_bytes=1))
        else:
            raise ValueError(kind)
    return tuple(out)
