"""Issue #2 against a live vLLM: `kvplan plan`, run as a user runs it on the config.json the
harness built, predicts each real server's KV-cache line exactly, and predicts the start-up
failure of a configuration vLLM refuses, with vLLM's text and suggested length."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.vllm_server.fixtures import GEMMA3_HYBRID, KV_TOO_SMALL, SHARED, SMALL_KV

pytestmark = pytest.mark.vllm

KV_LINE = re.compile(r"((?:CPU|GPU) KV cache size: [0-9,]+ tokens, Maximum concurrency for [0-9,]+ tokens per "
                     r"request: [0-9.]+x)")


def kvplan_plan(model_dir, *args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "kvplan.cli.main", "plan", "--model", str(model_dir), "--device", "cpu",
         "--dtype", "float32", "--vllm-version", "0.32", "--format", "json", *args],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, KVPLAN_OFFLINE="1"))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _server_args(cfg) -> list[str]:
    args = list(cfg.args)
    if "VLLM_CPU_KVCACHE_SPACE" in cfg.env_dict:
        args += ["--kv-cache-memory", f"{cfg.env_dict['VLLM_CPU_KVCACHE_SPACE']}GiB"]
    elif "--kv-cache-memory-bytes" not in args and "--num-gpu-blocks-override" in args:
        args += ["--kv-cache-memory", "1GiB"]  # the harness default; the override decides the blocks
    return args


@pytest.mark.parametrize("cfg,server_fixture,model_fixture", [
    (SHARED, "tiny_llama_server", "tiny_llama_model"),
    (SMALL_KV, "small_kv_server", "tiny_llama_model"),
    (GEMMA3_HYBRID, "gemma3_server", "gemma3_model"),
])
def test_plan_predicts_the_servers_kv_line(request, cfg, server_fixture, model_fixture):
    srv = request.getfixturevalue(server_fixture)
    model = request.getfixturevalue(model_fixture)
    logged = KV_LINE.findall(srv.log_text())
    assert logged, srv.log_path
    d = kvplan_plan(model.path, *_server_args(cfg))
    assert d["kv"]["log_lines"] == [logged[0]]
    assert d["startup"]["ok"]
    info = re.search(r'vllm:cache_config_info\{([^}]*)\}', srv.metrics_text()).group(1)
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info))
    assert d["kv"]["num_gpu_blocks"] == int(labels["num_gpu_blocks"])
    assert d["kv"]["block_size"] == int(labels["block_size"])


def test_plan_from_the_servers_own_log(tiny_llama_server, tiny_llama_model, tmp_path):
    log = tmp_path / "startup.log"
    log.write_text(tiny_llama_server.log_text())
    d = kvplan_plan(tiny_llama_model.path, "--from-log", str(log), "--max-model-len", "2048")
    assert d["memory"]["source"] == "log"
    assert d["measured"]["tokens_match"] and d["measured"]["concurrency_match"]


def test_plan_predicts_the_refused_startup(kv_too_small_exit, tiny_llama_model):
    d = kvplan_plan(tiny_llama_model.path, *KV_TOO_SMALL.args)
    assert d["startup"]["ok"] is False
    assert d["startup"]["error_kind"] == "max_model_len_too_large"
    vllm_error = re.search(r"ValueError: (To serve at least one request.*)$", kv_too_small_exit.log_text, re.M)
    assert vllm_error, kv_too_small_exit.log_path
    assert d["startup"]["error"] == vllm_error.group(1)
    suggested = int(re.search(r"estimated maximum model length is (\d+)", vllm_error.group(1)).group(1))
    assert d["startup"]["suggested_max_model_len"] == suggested
