"""llm-d-planner's vLLM 0.19.0 H100 sweep (benchmarks/data/llm_d_planner_h100.csv, its
figures checked against each run's log when scripts/build_planner_sweep.py rebuilt it): the configs
written out for models the catalog lacks are confirmed by each run's logged weights, and the
estimate of single-GPU runs stays where the source-derived sampler rule put it (a regression guard on
validation data, not a fit: nothing in kvplan reads these numbers)."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import plan_accuracy_sweep as sweep

from kvplan.memory import plan

ROWS = sweep.sweep_rows()


def _plan(row):
    return plan(sweep.plan_request(row, sweep.spec_for(row)), what_ifs=False)


def test_the_sweep_data_is_the_checked_build():
    assert len(ROWS) == 63 and all(r["init_total_memory_gib"] == 79.19 for r in ROWS)
    assert sum(1 for r in ROWS if r["checked_against_log"] == "yes" and r["vllm_version"] == "0.19.0") == 59
    assert set(sweep.NOT_EXPRESSED) <= {r["model"] for r in ROWS}


@pytest.mark.parametrize("row", [r for r in ROWS if r["model"] not in sweep.NOT_EXPRESSED],
                         ids=lambda r: r["log_file"].removesuffix(".log"))
def test_each_run_s_weights_confirm_the_model_kvplan_builds(row):
    got = _plan(row).memory.weights_gib_per_gpu
    assert got == pytest.approx(row["weights_memory_gib"], rel=0.025), (got, row["weights_memory_gib"])


def test_the_version_sweep_shows_the_sampler_change_at_0_17():
    """Qwen3-14B on one H100: 0.15/0.16 sort the logits (38 B per logit), 0.17/0.18 run the Triton
    kernel (14 B); the measured KV memory steps up by 3.4 GiB between them and so does kvplan's."""
    by_version = {r["vllm_version"]: r for r in ROWS if r["model"] == "Qwen/Qwen3-14B"}
    assert sorted(by_version) == ["0.15.0", "0.16.0", "0.17.0", "0.18.0"]
    for version, row in by_version.items():
        assert abs(_plan(row).memory.available_kv_cache_gib - row["kv_cache_memory_gib"]) < 0.4, version
    step = by_version["0.17.0"]["kv_cache_memory_gib"] - by_version["0.16.0"]["kv_cache_memory_gib"]
    ours = (_plan(by_version["0.17.0"]).memory.available_kv_cache_gib
            - _plan(by_version["0.16.0"]).memory.available_kv_cache_gib)
    assert step == pytest.approx(3.4, abs=0.05) and ours == pytest.approx(step, abs=0.2)


def test_single_gpu_runs_estimate_within_half_a_gib_at_the_median():
    errors = [abs(_plan(r).memory.available_kv_cache_gib - r["kv_cache_memory_gib"]) for r in ROWS
              if r["tp"] == 1 and r["pp"] == 1 and r["model"] not in sweep.NOT_EXPRESSED]
    assert len(errors) >= 35
    assert statistics.median(errors) < 0.5
    assert max(errors) < 1.0


def test_pipeline_runs_are_scored_against_the_smallest_stage_which_sizes_the_blocks():
    """0.19.0 prints "Available KV cache memory" on the first rank only. With PP the last stage also
    runs the sampler and has less: its figure (requested - "Total non KV cache memory") is what the
    printed block count matches: 1,075,312 tokens = 67,207 blocks of 1 MiB (16 layers per stage) =
    65.63 GiB at PP 2; 2,257,264 tokens = 141,079 blocks of 0.5 MiB = 68.89 GiB at PP 4."""
    pp = {r["pp"]: r for r in ROWS if r["model"] == "meta-llama/Llama-3.1-8B-Instruct" and r["pp"] > 1}
    assert (pp[2]["kv_cache_memory_gib"], pp[2]["kv_cache_memory_min_gib"]) == (66.54, 65.63)
    assert (pp[4]["kv_cache_memory_gib"], pp[4]["kv_cache_memory_min_gib"]) == (69.8, 68.89)
    assert 67_207 * 2**20 / 2**30 == pytest.approx(65.63, abs=0.005)
    assert 141_079 * 2**19 / 2**30 == pytest.approx(68.89, abs=0.005)
    for row in pp.values():  # kvplan's figure is its smallest stage, within 0.4 GiB of vLLM's
        assert abs(_plan(row).memory.available_kv_cache_gib - row["kv_cache_memory_min_gib"]) < 0.4
    assert all(r["kv_cache_memory_min_gib"] == r["kv_cache_memory_gib"] for r in ROWS if r["pp"] == 1 and r["tp"] == 1)


def test_gemma_3_profiles_32_images_and_keeps_their_pixels_and_embeddings_through_the_sampler():
    """llm-d-planner's 0.19.0 gemma-3-12b-it run prints "Encoder cache will be initialized with a budget
    of 8192 tokens, and profiled with 32 image items": 8,192 // 256 soft tokens per 896 px image.
    profile_run keeps the batch (bf16 pixels) and the 32 x 256 embeddings while the language model's
    dummy forward and sampler run; the SigLIP forward (27 x 4,096 patches a crop) is the smaller peak."""
    from kvplan.memory.encoder_profile import encoder_profile

    spec = sweep.spec_for(next(r for r in sweep.sweep_rows() if r["model"] == "google/gemma-3-12b-it"))
    e = encoder_profile(spec, 1, 2, 8192, "V1", items_round_up=False, max_num_seqs=1024, max_model_len=8192)
    assert (e.items, e.tokens_per_item, e.patches_per_item) == (32, 256, 4096)
    assert e.inputs_bytes == 32 * 3 * 896 * 896 * 2 and e.outputs_bytes == 32 * 256 * 3840 * 2
    assert e.peak_bytes == e.inputs_bytes + 32 * 4096 * (2 * 1152 + 2 * 4304) * 2
    # the decoder side bounds it: 2,048 tokens a prompt hold 8 images; before 0.10 cdiv(budget, tokens)
    assert encoder_profile(spec, 1, 2, 8192, "V1", items_round_up=False, max_num_seqs=2,
                           max_model_len=2048).items == 16
    assert encoder_profile(spec, 1, 2, 8000, "V1").items == 32 and encoder_profile(
        spec, 1, 2, 8000, "V1", items_round_up=False, max_num_seqs=1024, max_model_len=8192).items == 31
    # in the plan: the language model's peak plus what the encoder left held
    from dataclasses import replace

    request = sweep.plan_request(next(r for r in sweep.sweep_rows() if r["model"] == "google/gemma-3-12b-it"), spec)
    text_only = replace(spec, raw={k: v for k, v in spec.raw.items() if k != "vision_config"})
    with_tower = plan(request, what_ifs=False).memory.activation_peak_gib
    without = plan(replace(request, model=text_only), what_ifs=False).memory.activation_peak_gib
    assert (with_tower - without) * 2**30 == pytest.approx(e.held_bytes, abs=0.0002 * 2**30)


def test_pixtral_profiles_whole_images_under_one_block_mask():
    """Mistral-3's Pixtral tower: 1,540 px images of 55 x 55 merged tokens (110 x 110 patches); two fit
    an 8,192-token budget, flattened into one sequence whose (patches x patches) bf16 mask HF's
    generate_block_attention_mask builds without xformers."""
    from kvplan.memory.encoder_profile import encoder_profile

    spec = sweep.spec_for(next(r for r in sweep.sweep_rows()
                               if r["model"] == "mistralai/Mistral-Small-3.1-24B-Instruct-2503"))
    e = encoder_profile(spec, 1, 2, 8192, "V1", items_round_up=False, max_num_seqs=1024, max_model_len=8192)
    assert (e.items, e.tokens_per_item, e.patches_per_item) == (2, 3025, 12100)
    patches = 2 * 12100
    assert e.peak_bytes == e.inputs_bytes + patches * (2 * 1024 + 3 * 4096) * 2 + patches * patches * 2
    assert e.held_bytes == 2 * 3 * 1540 * 1540 * 2 + 2 * 3025 * 5120 * 2


def test_the_non_torch_growth_is_fitted_to_the_six_development_runs_only():
    """The fitted per-TP growth (budget.PROFILE_NON_TORCH_GROWTH_BYTES) is the mean of the DEV_RUNS'
    printed "non-torch forward increase" less the fusion workspace kvplan derives (1.5 GiB at TP 2/4)."""
    from kvplan.hardware import GIB
    from kvplan.memory.budget import PROFILE_NON_TORCH_GROWTH_BYTES

    dev = [r for r in ROWS if r["log_file"] in sweep.DEV_RUNS]
    assert len(dev) == 6 and {(r["model"], r["tp"]) for r in dev} == {
        (m, tp) for m in ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct") for tp in (1, 2, 4)}
    for tp, fitted in PROFILE_NON_TORCH_GROWTH_BYTES.items():
        printed = [float(r["non_torch_forward_gib"]) for r in dev if r["tp"] == tp]
        workspace = 0 if tp == 1 else 1.5
        assert fitted / GIB == pytest.approx(statistics.mean(printed) - workspace, abs=0.001)


def test_qwen2_5_72b_at_tp2_on_0_19_is_within_5_percent_once_the_growth_is_charged():
    """Validation (not a development run): Qwen2.5-72B-Instruct at TP 2 leaves vLLM 3.04 GiB of KV
    memory; without the growth kvplan said 3.67 (+21 %)."""
    row = next(r for r in ROWS if r["model"] == "Qwen/Qwen2.5-72B-Instruct" and r["tp"] == 2)
    assert row["log_file"] not in sweep.DEV_RUNS
    r = _plan(row)
    assert abs(r.memory.available_kv_cache_gib - row["kv_cache_memory_gib"]) / row["kv_cache_memory_gib"] < 0.05
    assert any("fitted, per TP" in n for n in r.notes)


def test_where_the_growth_was_not_fitted_the_plan_states_it_as_not_modelled():
    row = next(r for r in ROWS if r["log_file"] in sweep.DEV_RUNS and r["tp"] == 1)
    req = sweep.plan_request(row, sweep.spec_for(row))
    from dataclasses import replace

    for change, text in (({"vllm_version": "0.16.0"}, "0.13 GiB at TP 1"),
                         ({"enforce_eager": True}, "--enforce-eager"),
                         ({"tensor_parallel_size": 8}, "TP 8"),
                         ({"vllm_version": "0.11.0", "tensor_parallel_size": 4}, "PR 21429")):
        notes = plan(replace(req, **change), what_ifs=False).notes
        assert any(n.startswith("±") and "not modelled" in n and text in n for n in notes), (change, notes)
