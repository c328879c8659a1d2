"""kvplan against real output of vLLM's CPU build (0.32.0), captured by the test harness
(tests/fixtures/vllm_cpu, recorded by tests/vllm_server/capture_fixtures.py): the KV line and
the start-up failure are predicted exactly. tests/vllm/test_vllm_plan.py checks the same live."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvplan import PlanRequest, custom_gpu, plan, spec_from_config
from kvplan.hardware import GIB
from kvplan.memory.compare import compare_with_log
from kvplan.memory.startup_log import parse_startup_log

FIX = Path(__file__).parent / "fixtures" / "vllm_cpu"


def _case(name: str):
    meta = json.loads((FIX / f"{name}.json").read_text())
    m = meta["model"]
    cfg = dict(m["config"], model_type=m.get("model_type", "llama"), vocab_size=m["vocab_size"],
               architectures=m.get("architectures") or ["LlamaForCausalLM"], torch_dtype="float32")
    flags = meta["flags"]
    if "VLLM_CPU_KVCACHE_SPACE" in meta["env"]:
        kv = int(meta["env"]["VLLM_CPU_KVCACHE_SPACE"]) * GIB
    else:
        kv = int(flags[flags.index("--kv-cache-memory-bytes") + 1])
    req = PlanRequest(spec_from_config(cfg, name), custom_gpu(16 * GIB), device="cpu", dtype="float32",
                      max_model_len=int(flags[flags.index("--max-model-len") + 1]), kv_cache_memory_bytes=kv,
                      vllm_version=meta["vllm_version"])
    return meta, req, (FIX / f"{name}.log").read_text()


@pytest.mark.parametrize("name", ["healthy_startup", "hybrid_gemma3_startup"])
def test_kv_line_predicted_exactly(name):
    meta, req, log = _case(name)
    r = plan(req)
    logged = re.search(r"(CPU KV cache size: .*x)$", meta["kv_lines"][0]["line"]).group(1)
    assert r.kv.log_lines == (logged,)
    assert logged in log
    assert r.startup.ok


def test_gemma3_blocks_match_cache_config_info():
    meta, req, _ = _case("hybrid_gemma3_startup")
    r = plan(req)
    info = meta["cache_config_info"]
    assert r.kv.num_gpu_blocks == int(info["num_gpu_blocks"]) == 8192
    assert r.kv.block_size == int(info["block_size"])
    assert r.kv.kv_cache_tokens == int(info["kv_cache_size_tokens"])
    assert r.kv.max_concurrency == pytest.approx(float(info["kv_cache_max_concurrency"]), abs=1e-4)


def test_startup_failure_predicted_with_vllms_text():
    meta, req, log = _case("failed_startup_kv_too_small")
    r = plan(req)
    assert not r.startup.ok
    assert r.startup.suggested_max_model_len == meta["estimated_maximum_model_length"] == 384
    assert "ValueError: " + r.startup.error == meta["error_lines"][0]
    assert r.startup.error in log


def test_from_log_reads_the_cpu_budget_line():
    _, req, log = _case("healthy_startup")
    parsed = parse_startup_log(log)
    assert parsed.available_kv_gib == [1.0] and parsed.kv_cache_tokens == 524_288
    result = compare_with_log(plan(req), req, parsed)
    assert result.measured["tokens_match"] and result.measured["concurrency_match"]
