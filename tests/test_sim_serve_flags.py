"""The simulator's speculative-decoding and LoRA step costs (kvplan.sim.serve_flag_costs): a verify
step of 1 + k tokens per decoding request plus the drafter's passes, worth 1 + k·ρ tokens at vLLM's
draft acceptance rate ρ; LoRA's shrink/expand kernels per active adapter."""
from __future__ import annotations

import pytest

from kvplan.errors import UsageError
from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.models import load_model
from kvplan.sim.serve_flag_costs import SpeculativeStepModel, speculative_model, with_lora
from kvplan.sim.stepmodel import StepFeatures
from kvplan.sim.steptime import default_profile

LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3 = {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}


def _models(spec_config=None, **kw):
    req = PlanRequest(load_model(LLAMA8B), find_gpu("H100"), vllm_version="0.19", speculative_config=spec_config, **kw)
    res = plan(req, what_ifs=False)
    return req, res, default_profile(req, res)


def test_a_decode_step_costs_the_verify_and_the_drafts_over_the_mean_acceptance_length():
    req, res, base = _models(EAGLE3)
    fast, slow = (speculative_model(base, req, res, rho) for rho in (0.8, 0.5))
    assert isinstance(fast, SpeculativeStepModel) and fast.tokens_per_step == pytest.approx(1 + 3 * 0.8)
    f = StepFeatures(tokens=1, num_seqs=1, kv_read_tokens=1500.0)
    verify, draft, scale = fast.parts(1, 1, 1500.0, 0.0, f)
    assert verify == pytest.approx(base.time(4, 4, 1500.0, 0.0, f._replace(tokens=4, num_seqs=4)))
    assert draft > 0 and scale == pytest.approx(1 / 3.4)
    assert fast.time(1, 1, 1500.0, 0.0, f) == pytest.approx((verify + draft) / 3.4)
    # the same verify and drafts at another acceptance: the step time moves as the acceptance length
    assert slow.time(1, 1, 1500.0, 0.0, f) / fast.time(1, 1, 1500.0, 0.0, f) == pytest.approx(3.4 / 2.5)
    # the engine's decode stretches pass no features: every request decodes
    assert fast.time(1, 1, 1500.0, 0.0) == pytest.approx(fast.time(1, 1, 1500.0, 0.0, f))
    # a prefill-only step keeps its own rate (and pays the drafter's pass over its tokens)
    p = StepFeatures(tokens=2048, num_seqs=1, kv_read_tokens=2048.0, attn_pairs=2048 * 1024.0, prefill_tokens=2048,
                     prefill_seqs=1)
    assert fast.parts(2048, 1, 2048.0, p.attn_pairs, p)[2] == 1.0


def test_without_an_acceptance_every_draft_is_rejected_and_ngram_drafts_on_the_cpu():
    req, res, base = _models(EAGLE3)
    worst = speculative_model(base, req, res, None)
    f = StepFeatures(tokens=8, num_seqs=8, kv_read_tokens=8000.0)
    assert worst.tokens_per_step == 1 and worst.step_time(f) > base.step_time(f)
    assert "0 assumed" in worst.to_dict()["notes"][-1]
    req, res, base = _models({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4})
    ngram = speculative_model(base, req, res, 0.5)
    assert ngram.drafter is None and ngram.parts(8, 8, 8000.0, 0.0, f)[1] == 0
    with pytest.raises(UsageError, match=r"\[0, 1\]"):
        speculative_model(base, req, res, 1.5)
    req, res, base = _models()
    assert speculative_model(base, req, res, None) is base
    with pytest.raises(UsageError, match="needs --speculative-config"):
        speculative_model(base, req, res, 0.5)


def test_lora_adapters_cost_per_active_adapter():
    req, res, base = _models(enable_lora=True, max_loras=4, max_lora_rank=64)
    one, four = with_lora(base, req, 1), with_lora(base, req, None)
    term = four.terms[-1]
    assert term.active == 4 and term.modules == 4 * 32  # qkv, o, gate_up, down in each of the 32 layers
    f = StepFeatures(tokens=16, num_seqs=16, kv_read_tokens=16000.0)
    assert base.step_time(f) < one.step_time(f) < four.step_time(f)
    with pytest.raises(UsageError, match="between 0 and --max-loras"):
        with_lora(base, req, 5)


def test_simulated_eagle_tpot_moves_with_the_acceptance_as_the_published_speedups():
    """Llama-3.1-8B on an H100 with EAGLE-3, k = 3, one request at a time: at vLLM's acceptance 0.8
    (3.4 tokens per step) the TPOT speed-up is in EAGLE's published 2.7-3.5x range at batch 1
    (Li et al., ICML 2024, arXiv:2401.15077), at 0.5 below vLLM's "up to 2.5x" (Red Hat, 2025-07-01)."""
    from kvplan.sim import simulate
    from kvplan.traffic.trace import synthetic_trace
    from kvplan.traffic.lengthdist import parse_length

    tpot = {}
    for rho in (None, 0.5, 0.8):
        req, res, _ = _models(EAGLE3 if rho is not None else None)
        trace = synthetic_trace(0.05, num_requests=4, input_len=parse_length("1024", "in"),
                                output_len=parse_length("64", "out"), arrival="constant", seed=0)
        tpot[rho] = simulate(req, trace, plan_result=res, spec_acceptance=rho).latency_s["tpot"]["mean"]
    assert 2.7 <= tpot[None] / tpot[0.8] <= 3.5
    assert 1.8 <= tpot[None] / tpot[0.5] <= 2.5
