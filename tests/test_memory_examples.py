"""Hand-checked examples (issue #2 'Must show'): each figure below was worked out by hand from
vLLM 0.33's formulas (shared reference vllm-memory-model.md §8) before the code existed."""
from __future__ import annotations

from plan_helpers import DEEPSEEK_V3, GEMMA3_27B_TEXT, GIB, GPT_OSS_120B, LLAMA2_70B, run_plan


def test_llama2_70b_tp4_bytes_per_token():
    r = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=4, kv_cache_memory_bytes=30 * GIB)
    assert r.kv.bytes_per_token_per_gpu == 81_920
    assert r.kv.bytes_per_token_total == 327_680
    assert r.kv.bytes_per_token_logical == 327_680
    assert r.kv.bytes_per_block == 1_310_720  # 80 layers × 16 tokens × 2 heads × 256 × 2 B


def test_llama2_70b_tp4_30gib_log_line():
    r = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=4, kv_cache_memory_bytes=30 * GIB,
                 max_model_len=4096)
    assert r.kv.num_gpu_blocks == 24_576
    assert r.kv.usable_blocks == 24_575  # the null block
    assert r.kv.kv_cache_tokens == 393_216
    assert r.kv.log_lines == ("GPU KV cache size: 393,216 tokens, Maximum concurrency for 4,096 tokens per "
                              "request: 96.00x",)
    assert r.startup.ok


def test_llama2_70b_20gib():
    r = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=4, kv_cache_memory_bytes=20 * GIB)
    assert (r.kv.num_gpu_blocks, r.kv.kv_cache_tokens, round(r.kv.max_concurrency, 2)) == (16_384, 262_144, 64.0)


def test_deepseek_v3_mla_is_not_split_by_tp():
    for tp in (1, 8):
        r = run_plan(DEEPSEEK_V3, "H200", tensor_parallel_size=tp, kv_cache_memory_bytes=40 * GIB)
        assert r.kv.bytes_per_token_per_gpu == 61 * 576 * 2 == 70_272
        assert r.kv.block_size == 16  # 0.33 on Hopper: FLASH_ATTN_MLA (docs/vllm-semantics.md §8)
        assert r.kv.bytes_per_block == 61 * 16 * 576 * 2
        assert r.kv.bytes_per_token_total == 70_272 * tp  # replicated on every rank
        assert r.kv.bytes_per_token_logical == 70_272


def test_deepseek_v3_fp8_and_ds_mla():
    fp8 = run_plan(DEEPSEEK_V3, "H200", tensor_parallel_size=8, kv_cache_dtype="fp8", kv_cache_memory_bytes=40 * GIB)
    assert fp8.kv.bytes_per_token_per_gpu == 35_136
    assert fp8.kv.block_size == 64  # fp8 KV rules out FA-MLA: FlashMLA's 64
    assert run_plan(DEEPSEEK_V3, "B200", tensor_parallel_size=8, kv_cache_memory_bytes=40 * GIB).kv.block_size == 32
    # 0.18+ take the backend's preferred size: FLASH_ATTN_MLA's 16 on Hopper (read in 0.18.0, 0.19.0,
    # 0.21.0); 0.8-0.17 forced FlashMLA's 64 there (platforms/cuda.py check_and_update_config)
    assert run_plan(DEEPSEEK_V3, "H200", tensor_parallel_size=8, kv_cache_memory_bytes=40 * GIB,
                    vllm_version="0.21").kv.block_size == 16
    assert run_plan(DEEPSEEK_V3, "H200", tensor_parallel_size=8, kv_cache_memory_bytes=40 * GIB,
                    vllm_version="0.17").kv.block_size == 64
    assert run_plan(DEEPSEEK_V3, "H200", tensor_parallel_size=8, kv_cache_dtype="fp8_ds_mla",
                    kv_cache_memory_bytes=40 * GIB).kv.bytes_per_token_per_gpu == 40_016


#: Qwen2.5-7B-Instruct with the YaRN block its model card tells users to add for long inputs:
#: original_max_position_embeddings × factor (131,072) differs from max_position_embeddings (32,768).
QWEN25_7B_YARN = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
}


def test_yarn_max_len_rule_changes_at_0_30():
    # vllm/config/model.py, _get_and_verify_max_len: in 0.29.0 a "yarn" rope sets the derived length to
    # original_max_position_embeddings × factor; from 0.30.0 "yarn" is among the types whose
    # max_position_embeddings is already scaled (read in both wheels; semantics.yarn_multiplies_max_len)
    assert run_plan(QWEN25_7B_YARN, "H100", vllm_version="0.29").flags.max_model_len == 131_072
    assert run_plan(QWEN25_7B_YARN, "H100", vllm_version="0.30").flags.max_model_len == 32_768
    assert run_plan(QWEN25_7B_YARN, "H100").flags.max_model_len == 32_768  # the default, 0.33


def test_deepseek_v3_max_len_yarn_rule():
    # DeepSeek-V3's config is consistent (4,096 × 40 = 163,840 = max_position_embeddings): the same
    # length on either side of the 0.30 change
    assert run_plan(DEEPSEEK_V3, "H200", tensor_parallel_size=8).flags.max_model_len == 163_840
    assert run_plan(DEEPSEEK_V3, "H200", tensor_parallel_size=8, vllm_version="0.29").flags.max_model_len == 163_840


def test_gpt_oss_120b_hybrid_grouping():
    r = run_plan(GPT_OSS_120B, "H100", kv_cache_memory_bytes=60 * GIB)
    assert r.flags.max_model_len == 131_072
    assert r.flags.max_num_batched_tokens == 8192 and r.flags.in_flight_tokens == 16_384
    kinds = sorted((g.kind, g.layers, g.page_bytes) for g in r.kv.groups)
    assert kinds == [("full", 18, 32_768), ("sliding", 18, 32_768)]
    assert r.kv.bytes_per_block == 18 * 32_768 == 589_824
    per_group = {g.kind: g.blocks_per_request for g in r.kv.groups}
    assert per_group == {"full": 8192, "sliding": 1033}  # cdiv(127 + 16384, 16) + 1
    assert r.kv.num_gpu_blocks == 109_226
    assert r.kv.log_lines == ("GPU KV cache size: 1,551,920 tokens, Maximum concurrency for 131,072 tokens per "
                              "request: 11.84x",)


def test_gpt_oss_old_rules_differ():
    # 0.21: in-flight = one batch, and the old blocks-per-request rounding.
    r = run_plan(GPT_OSS_120B, "H100", kv_cache_memory_bytes=60 * GIB, vllm_version="0.21")
    assert {g.kind: g.blocks_per_request for g in r.kv.groups}["sliding"] == 521  # cdiv(127 + 8192, 16) + 1
    r11 = run_plan(GPT_OSS_120B, "H100", kv_cache_memory_bytes=60 * GIB, vllm_version="0.11")
    assert r11.kv.kv_cache_tokens == 109_226 // 2 * 16 == 873_808  # reference §8.2


def test_gemma3_27b_grouping_and_padding_warning():
    r = run_plan(GEMMA3_27B_TEXT, "H100", kv_cache_memory_bytes=40 * GIB)
    groups = [(g.kind, g.layers) for g in r.kv.groups]
    assert groups[0] == ("sliding", 9) and len(groups) == 7
    assert sorted(n for k, n in groups if k == "sliding") == [8, 8, 9, 9, 9, 9]
    assert [n for k, n in groups if k == "full"] == [10]
    assert r.kv.bytes_per_block == 10 * 16 * 16 * 256 * 2
    assert "Add 8 padding layers, may waste at most 15.38% KV cache memory" in r.startup.warnings
    # Gemma-3 skips RoPE scaling when deriving max_model_len.
    assert r.flags.max_model_len == 131_072


def test_sliding_window_without_layer_types_slides_every_layer():
    # Mistral-7B-v0.1: no layer_types, so vLLM's cache_config.sliding_window (4096) applies to
    # all 32 layers: cdiv(min(4095 + 2 × 8192, 32768), 16) + 1 = 1281 blocks per request.
    mistral = dict(LLAMA2_70B, model_type="mistral", num_hidden_layers=32, hidden_size=4096,
                   num_attention_heads=32, sliding_window=4096, max_position_embeddings=32768)
    r = run_plan(mistral, "H100", kv_cache_memory_bytes=10 * GIB)
    assert [g.kind for g in r.kv.groups] == ["sliding"]
    assert r.kv.blocks_per_request == 1281
    qwen = dict(mistral, model_type="qwen2", use_sliding_window=False)
    assert [g.kind for g in run_plan(qwen, "H100", kv_cache_memory_bytes=10 * GIB).kv.groups] == ["full"]


def test_kv_heads_replicated_beyond_tp():
    r16 = run_plan(LLAMA2_70B, "H100", tensor_parallel_size=16, kv_cache_memory_bytes=10 * GIB)
    r8 = run_plan(LLAMA2_70B, "H100", tensor_parallel_size=8, kv_cache_memory_bytes=10 * GIB)
    assert r16.kv.bytes_per_token_per_gpu == r8.kv.bytes_per_token_per_gpu == 80 * 256 * 2
    assert r16.kv.bytes_per_token_total == 2 * r8.kv.bytes_per_token_total


def test_pipeline_parallel_takes_min_over_stages():
    r = run_plan(LLAMA2_70B, "H100", pipeline_parallel_size=3, tensor_parallel_size=2,
                 kv_cache_memory_bytes=30 * GIB)
    # 80 layers over 3 stages: 27, 27, 26 (vLLM get_pp_indices); the 27-layer stages bind.
    page = 16 * 4 * 256 * 2
    assert r.kv.bytes_per_block == 27 * page
    assert r.kv.num_gpu_blocks == 30 * GIB // (27 * page)


def test_naive_formula_answered():
    r = run_plan(LLAMA2_70B, "A100-80GB", tensor_parallel_size=4, max_model_len=4096,
                 kv_cache_memory_bytes=30 * GIB)
    # 1 × 80 × 2 × 8192 × 4096 × 2 B = 10 GiB claimed; exact 1.25 GiB (GQA: 8x less).
    assert r.naive.claimed_bytes == 80 * 2 * 8192 * 4096 * 2
    assert r.naive.exact_bytes == 256 * 1_310_720 * 4 == 4096 * 327_680
    assert r.naive.ratio == 8.0
