"""plan() as three stages (issue 13): resolve -> size_kv -> assemble around a frozen ResolvedConfig,
and estimate_budget reading that object instead of sixteen positional arguments."""
from __future__ import annotations

import dataclasses

import pytest

from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.memory._assemble import assemble
from kvplan.memory._resolve import ResolvedConfig, resolve
from kvplan.memory._sizing import size_kv
from kvplan.memory.allocator import rounding_bytes
from kvplan.memory.budget import estimate_budget, requested_bytes, rope_cache_bytes
from kvplan.models import load_model

from plan_helpers import GPT_OSS_120B, model


def _request(**kw) -> PlanRequest:
    return PlanRequest(load_model("meta-llama/Llama-3.1-8B-Instruct"), find_gpu("H100"), **kw)


def test_plan_is_the_three_stages_in_order():
    req = _request(max_model_len=-1)
    config = resolve(req)
    staged = assemble(config, size_kv(config), what_ifs=False, fit_search=False, replan=plan)
    assert staged == plan(req, what_ifs=False, fit_search=False)


def test_the_resolved_configuration_is_frozen_and_holds_the_flags_vllm_settles_on():
    config = resolve(_request(vllm_version="0.10", max_num_seqs=64))
    assert isinstance(config, ResolvedConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_num_seqs = 1  # type: ignore[misc]
    assert config.max_num_seqs == 64
    assert config.gpu_memory_utilization == 0.9  # the version's default before 0.20
    assert config.max_model_len == config.derived_max_model_len == 131072
    assert config.auto_fit is False and config.errors == ()
    assert len(config.weights) == len(config.stages) == 1


def test_auto_fit_is_the_sizing_stage_s_and_the_result_reports_it():
    config = resolve(_request(max_model_len=-1, gpu_memory_utilization=0.35))
    sized = size_kv(config)
    assert config.auto_fit and sized.max_model_len < config.max_model_len
    assert any(n.startswith("Auto-fit max_model_len") for n in sized.notes)
    result = assemble(config, sized, what_ifs=False, fit_search=False, replan=plan)
    assert result.flags.max_model_len == sized.max_model_len


def test_estimate_budget_reads_the_resolved_configuration():
    config = resolve(_request(tensor_parallel_size=2, pipeline_parallel_size=2, enforce_eager=True))
    last, first = config.weights[-1], config.weights[0]
    terms = estimate_budget(config, last, config.max_num_batched_tokens)
    assert terms.requested_bytes == requested_bytes(config.gpu.memory_bytes, config.gpu_memory_utilization,
                                                    config.semantics)
    # the stage's tensors as the caching allocator counts them (the lm_head's 501 MiB takes a 502 MiB
    # block: a 1 MiB remainder is not split off), and the RoPE cache
    assert rounding_bytes(last.tensor_bytes) == 1 << 20
    assert terms.weights_bytes == (last.bytes_per_rank + rounding_bytes(last.tensor_bytes)
                                   + rope_cache_bytes(config.model, config.dtype_bytes))
    assert terms.cudagraph_bytes == 0  # --enforce-eager
    assert terms.source == "estimate"
    # only the last pipeline stage runs the dummy sampler
    assert estimate_budget(config, first, config.max_num_batched_tokens).activation_bytes <= terms.activation_bytes
    # the sizing stage's budgets are exactly these
    sized = size_kv(config)
    assert sized.budgets == tuple(estimate_budget(config, st, config.max_num_batched_tokens) for st in config.weights)


def test_a_given_kv_memory_replaces_the_estimate_in_the_budget():
    config = resolve(_request(kv_cache_memory_bytes=10 << 30))
    terms = estimate_budget(config, config.weights[0], config.max_num_batched_tokens)
    assert (terms.available_kv_bytes, terms.source) == (10 << 30, "kv_cache_memory")


def test_the_fp8_fallback_to_v0_is_resolved_once_for_every_later_stage():
    """vLLM 0.8-0.10 on a pre-Hopper GPU runs an fp8 KV cache on V0: the resolved semantics say V0."""
    spec, gpu = model(GPT_OSS_120B, "gpt-oss-120b"), find_gpu("A100-SXM4-80GB")
    assert resolve(PlanRequest(spec, gpu, vllm_version="0.8.4")).semantics.engine == "V1"
    config = resolve(PlanRequest(spec, gpu, vllm_version="0.8.4", kv_cache_dtype="fp8"))
    assert config.semantics.engine == "V0"
    assert any("falls back to the V0 engine" in n for n in config.notes)
    result = plan(config.request, what_ifs=False)
    assert result.engine == "V0"
    assert result.kv.log_lines[0].startswith("# cuda blocks:")  # V0's capacity line
