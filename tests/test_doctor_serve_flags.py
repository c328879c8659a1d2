"""The LoRA, speculative-decoding and swap-space refusals kvplan's plan writes (one template of
kvplan.memory.error_texts each) are what `kvplan doctor` recognises in a vLLM log, with their numbers
and fixes; an OOM whose traceback is LoRA's or the drafter's is reported as that phase."""
from __future__ import annotations

import pytest

from kvplan.hardware import GIB, find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.models import load_model
from kvplan.ops.doctor import diagnose

LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"


def _findings(*lines: str):
    text = "INFO 12-01 09:59:58 [api_server.py:1] vLLM API server version 0.0\n" + "\n".join(
        f"(EngineCore_DP0 pid=4242) ERROR 12-01 10:00:00 [core.py:708] {line}" for line in lines) + "\n"
    return diagnose([("vllm.log", text)]).findings


def _plan_error(version="0.19", **kw) -> str:
    r = plan(PlanRequest(load_model(LLAMA8B), find_gpu("H100"), vllm_version=version, **kw), what_ifs=False)
    assert not r.startup.ok
    return r.startup.error


@pytest.mark.parametrize("version, flags, finding, numbers", [
    ("0.19", dict(enable_lora=True, max_loras=4, max_cpu_loras=2), "lora_config", {"max_cpu_loras": 2, "max_loras": 4}),
    ("0.11", dict(enable_lora=True, max_lora_rank=1), "lora_config", {"max_lora_rank": 1}),
    ("0.7", dict(enable_lora=True, cpu_offload_gb=2), "lora_config", {}),
    ("0.14", dict(speculative_config={"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4}),
     "speculative_config", {}),
    ("0.6.4", dict(swap_space=64, tensor_parallel_size=2, host_memory_bytes=100 * GIB), "swap_space",
     {"swap_gib": 128.0, "host_memory_gib": 100.0}),
])
def test_the_plans_refusal_is_what_doctor_recognises(version, flags, finding, numbers):
    if "speculative_config" in flags:
        from dataclasses import replace

        from kvplan.memory.spec_decode import parse_speculative_config

        cfg = parse_speculative_config(flags["speculative_config"])
        flags = {**flags, "speculative_config": replace(cfg, draft=load_model("meta-llama/Llama-3.2-1B-Instruct"))}
    text = _plan_error(version, **flags)
    found = [f for f in _findings("ValueError: " + text) if f.id == finding]
    assert found, text
    assert numbers.items() <= dict(found[0].numbers).items()
    assert found[0].fixes


def test_an_adapter_above_max_lora_rank_asks_for_the_next_accepted_rank():
    (f,) = _findings("ValueError: LoRA rank 64 is greater than max_lora_rank 16.")
    assert f.id == "lora_adapter_rank" and f.fixes[0].change == "--max-lora-rank 64"


@pytest.mark.parametrize("frame, phase", [
    ('  File "/vllm/lora/layers/base_linear.py", line 71, in create_lora_weights', "lora"),
    ('  File "/vllm/v1/spec_decode/eagle.py", line 1254, in load_model', "drafter"),
    ('  File "/vllm/v1/sample/rejection_sampler.py", line 122, in forward', "drafter"),
])
def test_oom_in_lora_or_drafter_names_the_phase(frame, phase):
    findings = _findings("Traceback (most recent call last):", frame,
                         "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                         "capacity of 79.19 GiB of which 1.00 GiB is free.")
    (oom,) = [f for f in findings if f.id == "cuda_oom_runtime"]
    assert dict(oom.numbers)["phase"] == phase
    first = oom.fixes[0].change
    assert ("lora" in first) if phase == "lora" else ("speculative" in first)


def test_acceptance_is_summed_over_the_periodic_spec_decoding_lines():
    findings = _findings(
        "INFO [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.42, Accepted throughput: 12.10 tokens/s, "
        "Drafted throughput: 17.00 tokens/s, Accepted: 121 tokens, Drafted: 170 tokens, Per-position acceptance rate: "
        "0.765, 0.659, Avg Draft acceptance rate: 71.2%",
        "INFO [metrics.py:88] SpecDecoding metrics: Draft acceptance rate: 10.0%, Mean acceptance length: 1.30, "
        "Accepted: 9 tokens, Drafted: 90 tokens, Per-position acceptance rate: 0.2, 0.1, 0.0")
    (f,) = [f for f in findings if f.id == "spec_decode_acceptance"]
    assert dict(f.numbers)["acceptance_rate"] == round(130 / 260, 4) and f.severity == "info"
    (low,) = [f for f in _findings("Speculative metrics: Draft acceptance rate: 0.210, System efficiency: 0.300")
              if f.id == "spec_decode_acceptance"]
    assert low.severity == "warning" and "fewer num_speculative_tokens" in low.fixes[0].change
