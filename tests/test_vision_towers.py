"""Vision towers read from their real nested configs (kvplan.models.vision), each checked against the
published parameter count or the weights a vLLM log printed."""
from __future__ import annotations

import pytest

from kvplan.hardware import GIB, find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.models import load_model, params, spec_from_config
from kvplan.models.vision import read_vision_tower

#: Qwen/Qwen2-VL-7B-Instruct config.json: vision_config.hidden_size is the merger's OUTPUT (the language
#: model's 3,584); the tower is embed_dim (1,280) wide with an MLP of embed_dim x mlp_ratio
QWEN2_VL_7B = {
    "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl", "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "vocab_size": 152064, "max_position_embeddings": 32768, "rope_theta": 1000000.0, "sliding_window": 32768,
    "use_sliding_window": False, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "max_window_layers": 28,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                      "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14,
                      "temporal_patch_size": 2}}

#: meta-llama/Llama-3.2-11B-Vision(-Instruct) config.json, the fields that size it
MLLAMA_11B = {
    "architectures": ["MllamaForConditionalGeneration"], "model_type": "mllama", "torch_dtype": "bfloat16",
    "image_token_index": 128256,
    "text_config": {
        "model_type": "mllama_text_model", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 40,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
        "rope_theta": 500000.0, "tie_word_embeddings": False, "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38],
        "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
    "vision_config": {
        "model_type": "mllama_vision_model", "hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32,
        "num_global_layers": 8, "attention_heads": 16, "image_size": 560, "patch_size": 14, "max_num_tiles": 4,
        "num_channels": 3, "vision_output_dim": 7680, "intermediate_layers_indices": [3, 7, 15, 23, 30],
        "supported_aspect_ratios": [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]]}}


def test_qwen2_vl_reads_embed_dim_not_the_merger_output():
    """Qwen2-VL-7B-Instruct has 8,291,375,616 parameters (its model card / safetensors index). Reading
    hidden_size (3,584) as the tower's width added about 5.2 B that do not exist."""
    spec = spec_from_config(QWEN2_VL_7B, "qwen2-vl-7b.json")
    tower = params.vision_tower(spec).tower
    assert (tower.family, tower.width, tower.intermediate, tower.depth) == ("qwen2_vl", 1280, 5120, 32)
    assert params.count_params(spec) == pytest.approx(8_291_375_616, rel=1e-4)
    assert params.vision_params(spec) == pytest.approx(675.8e6, rel=1e-3)


def test_mllama_counts_its_global_layers_and_gated_tile_embeddings():
    """Llama-3.2-11B-Vision: 10,670,220,835 parameters published; vLLM's PR 12126 log (one H100, the
    dev build of January 2025) loads "model weights take 19.86GiB". The 8 gated global layers (157 M)
    and the tile position embedding (9 x 4 x 1,601 x 1,280 = 73.8 M) are part of it."""
    spec = spec_from_config(MLLAMA_11B, "mllama.json")
    tower = params.vision_tower(spec).tower
    assert (tower.family, tower.depth) == ("mllama", 40)
    assert params.count_params(spec) == pytest.approx(10_670_220_835, rel=1e-4)
    r = plan(PlanRequest(spec, find_gpu("H100"), vllm_version="0.7.0", max_model_len=65536, max_num_seqs=128,
                         enforce_eager=True), what_ifs=False)
    assert r.memory.weights_gib_per_gpu == pytest.approx(19.86, abs=0.1)


def test_llama4_tower_shards_over_tp_as_the_logged_weights_show():
    """mllama4.py builds the vision blocks, adapter and projector from parallel linears: llm-d-planner's
    0.19.0 Llama-4-Scout run at TP 4 loads 53.12 GiB per GPU; counting the tower whole on every rank
    said 54.24."""
    r = plan(PlanRequest(load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct"), find_gpu("H100"),
                         tensor_parallel_size=4, max_model_len=8192, vllm_version="0.19.0"), what_ifs=False)
    assert r.memory.weights_gib_per_gpu == pytest.approx(53.12, abs=0.03)


@pytest.mark.parametrize("model_id, family", [
    ("google/gemma-3-12b-it", "siglip"), ("mistralai/Ministral-3-14B-Instruct-2512", "pixtral"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4")])
def test_catalog_towers_are_read_by_their_family(model_id, family):
    spec = load_model(model_id)
    assert params.vision_tower(spec).tower.family == family


def test_llava_next_uses_the_tower_up_to_its_deepest_feature_layer():
    cfg = {"model_type": "llava_next", "vision_feature_layer": -2, "multimodal_projector_bias": True,
           "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096,
                             "num_hidden_layers": 24, "image_size": 336, "patch_size": 14}}
    tower = read_vision_tower(cfg, 4096).tower
    assert (tower.family, tower.depth) == ("clip", 23)  # the last layer is never run


def test_an_unrecognised_tower_is_left_out_and_the_plan_says_so_with_its_size():
    cfg = dict(load_model("Qwen/Qwen2.5-7B-Instruct").raw)
    cfg["vision_config"] = {"model_type": "brand_new_vit", "hidden_size": 1024, "num_hidden_layers": 24,
                            "intermediate_size": 4096}
    spec = spec_from_config(cfg, "new-vlm.json")
    reading = params.vision_tower(spec)
    assert reading.tower is None and reading.left_out_params == 24 * (4 * 1024**2 + 2 * 1024 * 4096)
    notes = plan(PlanRequest(spec, find_gpu("H100")), what_ifs=False).notes
    assert any("'brand_new_vit'" in n and "0.30 B parameters" in n and "0.56 GiB" in n for n in notes), notes
    assert params.vision_params(spec) == 0


def test_a_tower_whose_dummy_run_is_not_read_states_its_share_as_not_modelled():
    r = plan(PlanRequest(load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct"), find_gpu("H100"),
                         tensor_parallel_size=4, max_model_len=8192, vllm_version="0.19.0"), what_ifs=False)
    stated = [n for n in r.notes if n.startswith("±") and "llama4 vision tower's share of the profile run" in n]
    assert stated and stated[0].startswith(f"±{8192 * 5120 * 2 * 2 / GIB:.2f} GiB")


def test_v0_profiles_every_dummy_sequence_s_image_through_the_tower_at_once():
    """V0's encoder-decoder profile (enc_dec_model_runner.profile_run, 0.7.0) gives each of max_num_seqs
    dummy sequences a 4-tile image and runs them in one forward, chunked prefill off for multimodal
    models (max_num_batched_tokens = max_model_len): vLLM's PR 12126 log, Llama-3.2-11B-Vision with
    --max-model-len 65536 --max-num-seqs 128 on an H100, prints 36.63 GiB of activation peak and
    14.65 GiB of KV. kvplan planned 0.6 GiB and 51 GiB (+250 %); its source reading now gives 44.9 GiB
    and says what of it is not measured, a band the logged figure lies in, so the verdict is borderline."""
    from kvplan.memory.encoder_profile import encoder_profile

    spec = spec_from_config(MLLAMA_11B, "mllama.json")
    e = encoder_profile(spec, 1, 2, 65536, "V0", max_num_seqs=128)
    assert (e.items, e.tokens_per_item, e.patches_per_item) == (128, 4 * 1601, 4 * 1608)
    r = plan(PlanRequest(spec, find_gpu("H100"), vllm_version="0.7.0", max_model_len=65536, max_num_seqs=128,
                         enforce_eager=True), what_ifs=False)
    assert r.engine == "V0" and r.flags.max_num_batched_tokens == 65536
    assert 30 < r.memory.activation_peak_gib < 50
    logged_kv = 14.65
    assert abs(r.memory.available_kv_cache_gib - logged_kv) <= r.startup.estimate_error_gib
    assert r.startup.borderline and any(n.startswith("±") and "mllama tower" in n for n in r.notes)


def test_v0_decoder_only_multimodal_profiles_as_many_images_as_the_batch_holds():
    """model_runner._dummy_run (0.6.4.post1, 0.7.0): min(max_num_seqs, max_num_batched_tokens // the
    largest item's tokens) sequences of one image each; Qwen2-VL at 32,768 tokens (chunked prefill off
    for multimodal models in V0): two 16,384-token images, their float32 pixels held."""
    from kvplan.memory.encoder_profile import encoder_profile

    spec = spec_from_config(QWEN2_VL_7B, "qwen2-vl-7b.json")
    e = encoder_profile(spec, 1, 2, 32768, "V0", max_num_seqs=256)
    assert e.items == 2 and e.inputs_bytes == 2 * 65536 * 3 * 2 * 14 * 14 * 4
    r = plan(PlanRequest(spec, find_gpu("A100-80GB"), vllm_version="0.6.5"), what_ifs=False)
    assert r.engine == "V0" and r.flags.max_num_batched_tokens == 32768  # no chunked prefill for multimodal
