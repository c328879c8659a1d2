"""Issue 14 #1 and #20 against the real vLLM CPU build: the harness's tiny Llama is a float32
checkpoint; served with ``--dtype auto`` (vLLM's default) vLLM 0.32 downcasts it to bfloat16 on
the CPU too ("Downcasting torch.float32 to torch.bfloat16"), and its KV line is the one
``kvplan plan`` predicts without --dtype. The running server's /version is what ``preflight --url``
reads, and ``profile --url --log`` against it plans with the KV memory its log states."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from kvplan.serve_flags import plan_from_args
from kvplan.ops.launch import launch_vllm
from kvplan.ops.profile import server_vllm_version
from tests.vllm_server import env

pytestmark = pytest.mark.vllm

STARTUP_TIMEOUT_S = 300.0


def test_fp32_checkpoint_served_with_auto_dtype_matches_the_plan(tiny_llama_model, tmp_path):
    base = ["--model", str(tiny_llama_model.path), "--device", "cpu", "--kv-cache-memory", "1GiB",
            "--max-model-len", "2048", "--enforce-eager", "--vllm-version", "0.32"]
    planned = plan_from_args(base)  # no --dtype: vLLM's auto
    assert planned.flags.dtype == "bfloat16" and "--dtype" not in planned.serve_argv
    log = tmp_path / "vllm.log"
    with launch_vllm(planned, vllm_bin=str(env.vllm_python()), log_path=log, startup_timeout_s=STARTUP_TIMEOUT_S) as srv:
        text = srv.log_text()
        assert "Downcasting torch.float32 to torch.bfloat16" in text
        kv_lines = re.findall(r"CPU KV cache size: .*x", text)
        assert kv_lines == list(planned.kv.log_lines)  # 1,048,576 tokens: 1,024 B/token, not 2,048
        assert server_vllm_version(srv.base_url) == "0.32.0"
        out = subprocess.run([sys.executable, "-m", "kvplan.cli.main", "profile", "--url", srv.base_url, "--log",
                              str(log), "--format", "json", "--burst", "2", "--timeout", "240", *base],
                             capture_output=True, text=True, timeout=600, env=dict(os.environ, KVPLAN_OFFLINE="1"))
        assert out.returncode in (0, 1), out.stderr
        d = json.loads(out.stdout)
        assert d["planned"]["num_gpu_blocks"] == d["server"]["num_gpu_blocks"]
        assert {c["id"]: c["status"] for c in d["checks"]}["kv_blocks"] == "pass"
