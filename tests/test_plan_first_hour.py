"""Issue 14's first-hour findings on `kvplan plan` and the commands around it, as a user meets them:
a real subprocess (or typer's CliRunner where the test needs a fixture server), real exit codes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"

TINY_FP32 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
             "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 64, "vocab_size": 1000, "max_position_embeddings": 4096, "torch_dtype": "float32"}


def kvplan(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="120", KVPLAN_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def plan_json(*args: str) -> dict:
    out = kvplan("plan", "--format", "json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def write_config(tmp_path: Path, cfg: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


# --- finding 1: fp32 checkpoints are downcast on every platform ---------------------------------

def test_fp32_checkpoint_on_cpu_is_planned_in_bf16(tmp_path):
    cfg = write_config(tmp_path, TINY_FP32)
    d = plan_json("--model", str(cfg), "--device", "cpu", "--kv-cache-memory", "1GiB", "--max-model-len", "4096",
                  "--enforce-eager", "--vllm-version", "0.32")
    assert d["flags"]["dtype"] == "bfloat16"
    assert d["kv"]["bytes_per_token_per_gpu"] == 1024
    assert d["kv"]["kv_cache_tokens"] == 1_048_576
    assert d["kv"]["log_lines"][0].startswith("CPU KV cache size: 1,048,576 tokens")


@pytest.mark.parametrize("version,device,gpu,expected", [
    ("0.32", "cuda", "H100", "bfloat16"),   # platform's preferred dtype (sm 9.0: bf16)
    ("0.32", "cuda", "T4", "float16"),      # sm 7.5: no bf16
    ("0.10.1", "cpu", None, "bfloat16"),
    ("0.8.5", "cuda", "H100", "float16"),   # before 0.10.1: "we use float16 for float32 models"
    ("0.8.5", "cpu", None, "bfloat16"),     # ... and the CPU backend casts float16 to bfloat16
])
def test_fp32_downcast_follows_each_version(tmp_path, version, device, gpu, expected):
    cfg = write_config(tmp_path, TINY_FP32)
    args = ["--model", str(cfg), "--device", device, "--kv-cache-memory", "1GiB", "--vllm-version", version]
    if gpu:
        args += ["--gpu", gpu]
    d = plan_json(*args)
    assert d["flags"]["dtype"] == expected
    assert d["kv"]["bytes_per_token_per_gpu"] == 1024


# --- finding 16: versions outside what kvplan has read, engines a version does not have ----------

@pytest.mark.parametrize("args,needle", [
    (("--vllm-version", "0.99"), "kvplan follows vLLM 0.6 to 0.33; 0.99 is newer"),
    (("--vllm-version", "0.5"), "kvplan follows vLLM 0.6 to 0.33; 0.5 is older"),
    (("--engine", "v0", "--vllm-version", "0.11"), "vLLM 0.11 has no V0 engine"),
    (("--engine", "v1", "--vllm-version", "0.6.4"), "vLLM 0.6.4 has no V1 engine"),
])
def test_unsupported_versions_and_engines_are_usage_errors(args, needle):
    out = kvplan("plan", "--model", "llama-3.1-8b", "--gpu", "H100", *args)
    assert out.returncode == 2, out.stdout
    assert needle in out.stderr


def test_a_log_from_a_newer_vllm_is_planned_with_the_nearest_rules_and_says_so(tmp_path):
    text = (FIXTURES / "vllm_cpu").glob("*.log")
    log = next(iter(sorted(text)))
    newer = tmp_path / "newer.log"
    newer.write_text(log.read_text().replace("0.32.0", "0.40.1"))
    cfg = write_config(tmp_path, TINY_FP32)
    d = plan_json("--model", str(cfg), "--from-log", str(newer))
    assert d["vllm_semantics"] == "0.33"
    assert any("vLLM 0.40.1 is newer than any version kvplan follows" in n for n in d["notes"])


# --- finding 5: a CPU log is a CPU plan; profile --url --log plans with the log's KV memory --------

def tiny_llama_config(tmp_path: Path) -> Path:
    meta = json.loads((FIXTURES / "vllm_cpu" / "healthy_startup.json").read_text())["model"]
    cfg = dict(meta["config"], architectures=meta["architectures"], model_type=meta["model_type"],
               vocab_size=meta["vocab_size"], torch_dtype="float32")
    return write_config(tmp_path, cfg)


def test_plan_from_a_cpu_log_plans_the_cpu_backend(tmp_path):
    d = plan_json("--model", str(tiny_llama_config(tmp_path)), "--from-log",
                  str(FIXTURES / "vllm_cpu" / "healthy_startup.log"))
    assert d["flags"]["device"] == "cpu" and d["kv"]["block_size"] == 128
    assert d["kv"]["num_gpu_blocks"] == 4096 == d["measured"]["num_gpu_blocks_implied"]
    assert d["kv"]["log_lines"][0].startswith("CPU KV cache size: 524,288 tokens")


def test_profile_url_with_log_plans_with_the_logs_kv_memory(tmp_path):
    from kvplan.cli.profile import plan_for_server

    args = ["--model", str(tiny_llama_config(tmp_path)), "--device", "cpu", "--dtype", "float32",
            "--max-model-len", "2048"]
    log = FIXTURES / "vllm_cpu" / "healthy_startup.log"
    planned = plan_for_server(args, log)
    assert planned.memory.source == "log" and planned.kv.num_gpu_blocks == 4096
    # the user's own --kv-cache-memory still wins over the log
    assert plan_for_server([*args, "--kv-cache-memory", "2GiB"], log).kv.num_gpu_blocks == 8192
