"""Secrets never leave a log kvplan reads: vLLM prints its non-default args, ``api_key`` included,
and `kvplan doctor -f json` / `kvplan plan --from-log -f json` used to copy them into ``runs[].args``
(the file people attach to tickets). Values of secret names are ``<redacted>`` wherever a log's
lines or args come out; names that merely contain "token" (``max_num_batched_tokens``,
``long_prefill_token_threshold``) are not secrets and stay."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.memory.startup_log import is_secret_name, parse_startup_log, redact_line

REPO = Path(__file__).resolve().parents[1]
SECRETS = ("sk-live-12345", "hf_abcdef", "/etc/ssl/private/server.key", "hunter2")
LOG = "\n".join([
    "INFO 07-09 09:47:45 [api_server.py:1] vLLM API server version 0.9.0",
    "INFO 07-09 09:47:45 [api_server.py:2] non-default args: {'model': 'meta-llama/Meta-Llama-3-8B', "
    "'api_key': 'sk-live-12345', 'hf_token': 'hf_abcdef', 'ssl_keyfile': '/etc/ssl/private/server.key', "
    "'max_model_len': 8192, 'max_num_batched_tokens': 4096, 'long_prefill_token_threshold': 512, "
    "'kv_transfer_config': {'kv_connector': 'x', 'db_password': 'hunter2'}}",
    "INFO 07-09 09:47:50 [gpu_worker.py:233] Available KV cache memory: 52.34 GiB",
    "INFO 07-09 09:47:50 [kv_cache_utils.py:1] GPU KV cache size: 428,768 tokens",
    "INFO 07-09 09:47:50 [kv_cache_utils.py:1] Maximum concurrency for 8,192 tokens per request: 52.34x",
    "ERROR 07-09 09:48:00 [core.py:1] ValueError: bad request from client api_key=sk-live-12345",
]) + "\n"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=dict(os.environ, KVPLAN_OFFLINE="1"))


@pytest.mark.parametrize("name, secret", [
    ("api_key", True), ("hf_token", True), ("ssl_keyfile", True), ("db_password", True), ("aws_secret_access_key", True),
    ("OPENAI_API_KEY", True), ("api-key", True), ("ssl_certfile", False), ("max_num_batched_tokens", False),
    ("long_prefill_token_threshold", False), ("tokenizer", False), ("return_tokens_as_token_ids", False),
    ("kv_cache_dtype", False), ("enable_prompt_tokens_details", False)])
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


def test_parsed_args_and_errors_are_redacted():
    log = parse_startup_log(LOG)
    assert log.args["api_key"] == log.args["hf_token"] == log.args["ssl_keyfile"] == "<redacted>"
    assert log.args["kv_transfer_config"]["db_password"] == "<redacted>"
    assert log.args["max_num_batched_tokens"] == 4096 and log.args["long_prefill_token_threshold"] == 512
    assert not any(s in json.dumps(log.args) + " ".join(log.errors) for s in SECRETS)


def test_lines_quoted_from_a_log_are_redacted():
    assert redact_line("vllm serve m --api-key sk-1 --port 8000 --hf-token=abc") == \
        "vllm serve m --api-key <redacted> --port 8000 --hf-token=<redacted>"
    assert redact_line("{'api_key': 'sk-1', 'max_num_batched_tokens': 8}") == \
        "{'api_key': '<redacted>', 'max_num_batched_tokens': 8}"
    assert redact_line("config: model=x, api_key=abc, tokenizer=y") == "config: model=x, api_key=<redacted>, tokenizer=y"
    assert redact_line("no secret here: max_num_batched_tokens=8192") == "no secret here: max_num_batched_tokens=8192"


def test_doctor_and_plan_json_carry_no_secret(tmp_path):
    path = tmp_path / "vllm.log"
    path.write_text(LOG)
    doctor = cli("doctor", str(path), "-f", "json")
    plan = cli("plan", "--from-log", str(path), "--gpu", "H100", "-f", "json")
    assert doctor.stdout and plan.stdout, (doctor.stderr, plan.stderr)
    runs = json.loads(doctor.stdout)["runs"]
    assert runs[0]["args"]["api_key"] == "<redacted>" and runs[0]["args"]["max_model_len"] == 8192
    for p in (doctor, plan):
        assert not any(s in p.stdout + p.stderr for s in SECRETS), [s for s in SECRETS if s in p.stdout + p.stderr]
