"""--entrypoint serve|offline: vLLM's two usage contexts have their own batch defaults
(EngineArgs.get_batch_defaults: OPENAI_API_SERVER vs LLM_CLASS), and a plan made for one is wrong
for the other."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvplan.serve_flags import request_from_values
from kvplan.errors import UsageError
from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.models import load_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def test_offline_takes_8192_batched_tokens_on_a_small_gpu_and_the_command_pins_it():
    req = request_from_values(dict(model="Qwen/Qwen2.5-7B-Instruct", gpu="L4", vllm_version="0.19.0",
                                   entrypoint="offline"))
    assert req.entrypoint == "offline"
    r = plan(req, what_ifs=False)
    assert r.flags.max_num_batched_tokens == 8192 and r.flags.max_num_seqs == 256
    assert "--max-num-batched-tokens 8192" in r.serve_command
    assert any("offline LLM(...) entrypoint" in n and "`vllm serve`: 2,048" in n for n in r.notes)
    served = plan(request_from_values(dict(model="Qwen/Qwen2.5-7B-Instruct", gpu="L4", vllm_version="0.19.0")),
                  what_ifs=False)
    assert served.flags.max_num_batched_tokens == 2048 and "--max-num-batched-tokens" not in served.serve_command


@pytest.mark.parametrize("name", ["offline", "llm", "LLM_CLASS", "serve", "api"])
def test_vllm_s_own_names_are_accepted(name):
    assert request_from_values(dict(model="Qwen/Qwen2.5-7B-Instruct", gpu="H100", entrypoint=name)).entrypoint in (
        "serve", "offline")


def test_an_unknown_entrypoint_is_a_usage_error():
    with pytest.raises(UsageError, match="--entrypoint batch"):
        request_from_values(dict(model="Qwen/Qwen2.5-7B-Instruct", gpu="H100", entrypoint="batch"))


def test_the_offline_defaults_follow_the_version():
    spec, h100 = load_model("Qwen/Qwen2.5-7B-Instruct"), find_gpu("H100")
    tokens = {v: plan(PlanRequest(spec, h100, vllm_version=v, entrypoint="offline"), what_ifs=False)
              .flags.max_num_batched_tokens for v in ("0.8.2", "0.19.0")}
    assert tokens == {"0.8.2": 16384, "0.19.0": 16384}  # by the device name before 0.8.5, by memory after
    a100 = plan(PlanRequest(spec, find_gpu("A100-80GB"), vllm_version="0.19.0", entrypoint="offline"),
                what_ifs=False)
    assert a100.flags.max_num_batched_tokens == 8192  # 0.9+: an A100 takes the smaller GPUs' column


def test_log_101_an_offline_lmcache_run_is_planned_with_the_offline_budget():
    """Log 101 (Qwen3-8B, RTX A5000, vLLM 0.21, LMCache's example building vllm.LLM): vLLM 6.37 GiB of KV
    memory; with the offline budget (8,192 tokens) kvplan is within 0.05 GiB, as `vllm serve` (2,048)
    it would plan 0.16 GiB more."""
    import plan_accuracy as pa

    prefix, model, gpu, version, engine, flags, _ = next(c for c in pa.CASES if c[0] == "101")
    assert flags["entrypoint"] == "llm"
    g = pa.custom_gpu(int(gpu * pa.GIB), "A5000")
    kv = {ep: plan(PlanRequest(pa._spec(model), g, vllm_version=version, engine=engine, **{**flags, "entrypoint": ep}),
                   what_ifs=False).memory.available_kv_cache_gib for ep in ("offline", "serve")}
    assert abs(kv["offline"] - 6.37) < 0.05 and kv["serve"] - kv["offline"] > 0.1
