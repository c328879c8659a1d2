"""vLLM 0.8.0-0.10.1 fall back to the V0 engine on GPUs older than Ampere (compute capability < 8.0:
T4, V100, RTX 20xx): _is_v1_supported_oracle in arg_utils.py (read in 0.8.0, 0.8.2, 0.8.5, 0.9.2,
0.10.1.1; gone in 0.10.2). The plan follows V0 there and says so; --engine v1 makes vLLM refuse."""
from __future__ import annotations

import pytest

from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.memory.semantics import semantics
from kvplan.models import load_model
from kvplan.report._common import headline

GEMMA3_27B = "google/gemma-3-27b-it"


@pytest.mark.parametrize("version, sm, forced, expected", [
    ("0.8.2", 75, False, "v0_fallback"), ("0.8.2", 70, False, "v0_fallback"), ("0.10.1", 75, False, "v0_fallback"),
    ("0.10.2", 75, False, "v1"), ("0.8.2", 80, False, "v1"), ("0.8.2", 75, True, "refused"),
    ("0.11.0", 75, False, "v1"), ("0.7.3", 75, False, "v1")])
def test_the_compute_capability_rule_per_version(version, sm, forced, expected):
    assert semantics(version, "v1" if forced else None).compute_capability_engine(sm, "cuda", forced) == expected


def test_gemma_3_27b_on_eight_t4s_under_0_8_2_is_planned_with_v0_and_says_so():
    """The issue's case (Gemma-3-27B, 8 x T4, vLLM 0.8.2): V1's plan used V1's batch defaults and profile;
    vLLM ran V0 (256 sequences, a whole max-length prompt per batch, V0's sampler)."""
    req = PlanRequest(load_model(GEMMA3_27B), find_gpu("T4"), tensor_parallel_size=8, vllm_version="0.8.2",
                      max_model_len=8192)
    r = plan(req, what_ifs=False)
    assert r.engine == "V0" and "(V0)" in headline(r)
    assert r.flags.max_num_seqs == 256 and r.flags.max_num_batched_tokens == 8192
    assert any("Compute Capability < 8.0 is not supported by the V1 Engine" in n for n in r.notes)
    assert r.flags.dtype == "float16"  # bf16 needs 8.0
    on_a100 = plan(PlanRequest(load_model(GEMMA3_27B), find_gpu("A100-40GB"), tensor_parallel_size=8,
                               vllm_version="0.8.2", max_model_len=8192), what_ifs=False)
    assert on_a100.engine == "V1"


def test_engine_v1_forced_on_a_t4_is_refused_as_vllm_refuses_it():
    r = plan(PlanRequest(load_model(GEMMA3_27B), find_gpu("T4"), tensor_parallel_size=8, vllm_version="0.8.2",
                         engine="v1", max_model_len=8192), what_ifs=False)
    assert not r.startup.ok and r.startup.error == "VLLM_USE_V1=1 is not supported with Compute Capability < 8.0."
    v0 = plan(PlanRequest(load_model(GEMMA3_27B), find_gpu("T4"), tensor_parallel_size=8, vllm_version="0.8.2",
                          engine="v0", max_model_len=8192), what_ifs=False)
    assert v0.engine == "V0" and not any("Falling back" in n for n in v0.notes)
