"""The `kvplan plan` command as a user runs it: a real subprocess, real exit codes, real output."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"


def kvplan(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="120", KVPLAN_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def plan_json(*args: str) -> dict:
    out = kvplan("plan", "--format", "json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_json_contract_fields():
    d = plan_json("--model", "llama-2-70b-chat", "--gpu", "A100-80GB", "-tp", "4", "--max-model-len", "4096",
                  "--kv-cache-memory", "30")
    assert d["schema_version"] == 1
    for path in ("memory.weights_gib_per_gpu", "memory.requested_gib", "memory.non_kv_gib",
                 "memory.available_kv_cache_gib", "kv.bytes_per_token_per_gpu", "kv.bytes_per_token_total",
                 "kv.block_size", "kv.num_gpu_blocks", "kv.kv_cache_tokens", "kv.max_concurrency",
                 "kv.max_concurrency_for_tokens", "startup.ok", "startup.error", "startup.suggested_max_model_len"):
        section, key = path.split(".")
        assert key in d[section], path
    assert d["kv"]["num_gpu_blocks"] == 24_576 and d["kv"]["kv_cache_tokens"] == 393_216
    assert d["capacity_table"][0] == {"max_model_len": 1024, "max_concurrency": 384.0, "kv_cache_tokens": 393_216,
                                      "fits": True, "replicas_concurrency": 384.0}
    assert d["serve_command"].startswith("vllm serve meta-llama/Llama-2-70b-chat-hf --tensor-parallel-size 4")


def test_model_ids_are_case_insensitive_and_aliases_work():
    a = plan_json("--model", "META-LLAMA/llama-2-70B-chat-HF", "--gpu", "h100", "-tp", "4")
    b = plan_json("--model", "llama-2-70b-chat", "--gpu", "h100", "-tp", "4")
    assert a["model"]["id"] == b["model"]["id"] == "meta-llama/Llama-2-70b-chat-hf"


def test_unknown_model_suggests_close_matches_and_exits_2():
    out = kvplan("plan", "--model", "llama-2-70b-chatt", "--gpu", "h100")
    assert out.returncode == 2
    assert "Unknown model 'llama-2-70b-chatt'" in out.stderr and "meta-llama/Llama-2-70b-chat-hf" in out.stderr


def test_config_missing_field_names_field_and_file(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
                               "vocab_size": 32000}))
    out = kvplan("plan", "--model", str(tmp_path), "--gpu", "h100")
    assert out.returncode == 2
    assert f"{cfg}: field 'num_hidden_layers' is missing" in out.stderr


def test_config_not_json(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "llama",\n  oops}')
    out = kvplan("plan", "--model", str(cfg), "--gpu", "h100")
    assert out.returncode == 2 and f"{cfg}:2: not valid JSON" in out.stderr


@pytest.mark.parametrize("args,needle", [
    (("--gpu", "h1000"), "Unknown GPU 'h1000'"),
    (("--gpu", "h100", "--gpu-memory-utilization", "1.2"), "--gpu-memory-utilization must be in (0, 1]"),
    (("--gpu", "h100", "--max-model-len", "lots"), "--max-model-len: cannot read 'lots'"),
    (("--gpu", "h100", "--kv-cache-dtype", "fp3"), "--kv-cache-dtype fp3"),
    (("--gpu-memory", "eighty"), "--gpu-memory: cannot read 'eighty'"),
    ((), "give --gpu NAME"),
])
def test_bad_flags_exit_2(args, needle):
    out = kvplan("plan", "--model", "llama-3.1-8b", *args)
    assert out.returncode == 2, out.stdout
    assert needle in out.stderr


def test_impossible_config_reports_vllms_error_not_a_crash():
    d = plan_json("--model", "llama-2-70b", "--gpu", "a100-80gb", "-tp", "3")
    assert d["startup"]["ok"] is False
    assert d["startup"]["error"] == "Total number of attention heads (64) must be divisible by tensor parallel size (3)."


def test_human_readable_lengths():
    assert plan_json("--model", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "32k")["flags"]["max_model_len"] == 32000
    assert plan_json("--model", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "32K")["flags"]["max_model_len"] == 32768


def test_multi_node_and_data_parallel():
    d = plan_json("--model", "llama-3.1-405b", "--gpu", "h100", "-tp", "8", "-pp", "2", "-dp", "2")
    mn = d["multi_node"]
    assert mn["nodes"] == 2 and "--distributed-executor-backend" in mn["serve_command"]
    assert d["parallel"]["total_gpus"] == 32 and d["parallel"]["nodes"] == 4
    row = d["capacity_table"][0]
    assert row["replicas_concurrency"] == pytest.approx(2 * row["max_concurrency"], rel=1e-6)


def test_from_log_replays_a_real_startup():
    log = LOGS / "24-qwen3-14b-v1-lmcache-thread.log"
    d = plan_json("--model", "Qwen/Qwen3-14B", "--from-log", str(log), "--vllm-version", "0.11",
                  "--max-model-len", "32768", "--gpu", "h100")
    m = d["measured"]
    assert d["memory"]["source"] == "log"
    assert m["kv_cache_tokens"] == 42_656 and m["tokens_match"] and m["concurrency_match"]
    assert m["blocks_within_rounding"]


def test_markdown_and_table_render():
    md = kvplan("plan", "--model", "gpt-oss-120b", "--gpu", "h100", "--format", "markdown")
    assert md.returncode == 0 and "## Capacity" in md.stdout and "| max_model_len |" in md.stdout
    table = kvplan("plan", "--model", "gpt-oss-120b", "--gpu", "h100")
    assert table.returncode == 0 and "KV cache line, as vLLM logs it" in table.stdout


def test_serve_command_quotes_hostile_paths(tmp_path):
    folder = tmp_path / "my model; rm -rf x"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 1000, "intermediate_size": 512, "max_position_embeddings": 4096}))
    d = plan_json("--model", str(folder), "--gpu", "l4")
    argv = shlex.split(d["serve_command"])
    assert argv[:3] == ["vllm", "serve", str(folder)]
    assert d["serve_argv"][2] == str(folder)


def test_serve_config_file_is_safe_yaml(tmp_path):
    yaml = pytest.importorskip("yaml")
    out = tmp_path / "serve.yaml"
    d = plan_json("--model", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "16K", "--serve-config", str(out))
    cfg = yaml.safe_load(out.read_text())
    assert cfg == {"model": "meta-llama/Llama-3.1-8B", "gpu-memory-utilization": 0.92, "max-model-len": 16384,
                   "max-num-seqs": 1024}
    assert out.read_text() == d["serve_config_yaml"]
