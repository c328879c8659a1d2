"""A flag the user gives wins over a start-up log (``kvplan plan --from-log``) and over a config file
(``kvplan preflight --config``), even when its value is the flag's default: "given" is click's
parameter source, never a comparison with the default.

The log is a real vLLM 0.32.0 start-up log (tests/fixtures/vllm_cpu/healthy_startup.log). Its
``non-default args`` line is rewritten with the flags each case needs (vLLM prints every flag that
differs from its default there, so a TP 4 run's log carries ``'tensor_parallel_size': 4``); all
its other lines, the KV memory and GPU memory, stay as vLLM wrote them.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.cli.main import app

FIX = Path(__file__).parent / "fixtures" / "vllm_cpu"

#: what the rewritten log says: every plan flag it can carry, none at its default
LOG_ARGS = {"dtype": "float32", "max_model_len": 2048, "enforce_eager": True, "tensor_parallel_size": 4,
            "pipeline_parallel_size": 2, "data_parallel_size": 2, "kv_cache_dtype": "fp8",
            "gpu_memory_utilization": 0.8, "max_num_seqs": 64, "block_size": 32, "max_num_batched_tokens": 4096,
            "num_gpu_blocks_override": 100}

#: (the flag as typed, where the plan JSON shows it, the value the log gives, the value the flag gives)
CASES = [
    (["-tp", "1"], ("parallel", "tensor_parallel_size"), 4, 1),
    (["--tensor-parallel-size", "1"], ("parallel", "tensor_parallel_size"), 4, 1),
    (["-pp", "1"], ("parallel", "pipeline_parallel_size"), 2, 1),
    (["-dp", "1"], ("parallel", "data_parallel_size"), 2, 1),
    (["--dtype", "auto"], ("flags", "dtype"), "float32", "bfloat16"),  # auto = the config's torch_dtype
    (["--kv-cache-dtype", "auto"], ("flags", "kv_cache_dtype"), "fp8", "float32"),  # auto = the model dtype
    (["--no-enforce-eager"], ("flags", "enforce_eager"), True, False),
    (["--gpu-memory-utilization", "0.9"], ("flags", "gpu_memory_utilization"), 0.8, 0.9),
    (["--max-num-seqs", "256"], ("flags", "max_num_seqs"), 64, 256),
    (["--block-size", "16"], ("flags", "block_size"), 32, 16),
    (["--max-num-batched-tokens", "2048"], ("flags", "max_num_batched_tokens"), 4096, 2048),
    (["--max-model-len", "1024"], ("flags", "max_model_len"), 2048, 1024),
    (["--num-gpu-blocks-override", "200"], ("kv", "num_gpu_blocks"), 100, 200),
]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    """The served model's config.json (as the harness recorded it), torch_dtype bfloat16 so that
    ``--dtype auto`` differs from the log's float32."""
    m = json.loads((FIX / "healthy_startup.json").read_text())["model"]
    path = tmp_path_factory.mktemp("tiny-llama") / "config.json"
    path.write_text(json.dumps(dict(m["config"], model_type=m["model_type"], vocab_size=m["vocab_size"],
                                    architectures=m["architectures"], torch_dtype="bfloat16")))
    return path


@pytest.fixture(scope="module")
def startup_log(tmp_path_factory) -> Path:
    text = (FIX / "healthy_startup.log").read_text()
    text, n = re.subn(r"non-default args: \{.*\}", lambda _: f"non-default args: {LOG_ARGS!r}", text)
    assert n == 1
    path = tmp_path_factory.mktemp("log") / "startup.log"
    path.write_text(text)
    return path


def plan_json(*args: str) -> dict:
    out = CliRunner().invoke(app, ["plan", "--format", "json", *args], env={"KVPLAN_OFFLINE": "1"})
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_the_log_fills_every_flag_not_given(tiny_llama, startup_log):
    d = plan_json("--model", str(tiny_llama), "--from-log", str(startup_log))
    for _, (section, key), from_log, _ in CASES:
        assert d[section][key] == from_log, key


@pytest.mark.parametrize("flag,where,from_log,from_flag", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_given_flag_wins_over_the_log(tiny_llama, startup_log, flag, where, from_log, from_flag):
    d = plan_json("--model", str(tiny_llama), "--from-log", str(startup_log), *flag)
    section, key = where
    assert d[section][key] == from_flag
    others = [c for c in CASES if c[1] != where]
    for _, (s, k), value, _ in others:  # the other flags still come from the log
        assert d[s][k] == value, k


def test_tp_1_on_the_real_log_alone_is_tp_1(tiny_llama):
    """The unedited log (TP 1): the same plan with or without an explicit -tp 1."""
    log = str(FIX / "healthy_startup.log")
    assert plan_json("--model", str(tiny_llama), "--from-log", log, "-tp", "1") == \
        plan_json("--model", str(tiny_llama), "--from-log", log)


#: preflight --config: the file's value, the flag, and the value of the plan flag preflight reports
CONFIG_CASES = [
    ("tensor_parallel_size: 2", ["-tp", "1"], "tensor_parallel_size", 2, 1),
    ("dtype: float16", ["--dtype", "auto"], "dtype", "float16", "auto"),
    ("kv_cache_dtype: fp8", ["--kv-cache-dtype", "auto"], "kv_cache_dtype", "fp8", "auto"),
    ("enforce_eager: true", ["--no-enforce-eager"], "enforce_eager", True, False),
    ("device: cpu", ["--device", "cuda"], "device", "cpu", "cuda"),
    ("gpu_memory_utilization: 0.8", ["--gpu-memory-utilization", "0.9"], "gpu_memory_utilization", 0.8, 0.9),
    ("max_num_seqs: 64", ["--max-num-seqs", "256"], "max_num_seqs", 64, 256),
    ("block_size: 32", ["--block-size", "16"], "block_size", 32, 16),
    ("gpus_per_node: 4", ["--gpus-per-node", "8"], "gpus_per_node", 4, 8),
]


def preflight_plan_flags(tmp_path: Path, model: Path, config_lines: list, *flags: str) -> dict:
    cfg = tmp_path / "preflight.yaml"
    cfg.write_text("\n".join([f"model: {model}", "gpu: H100", "dry_run: true", *config_lines]) + "\n")
    out = CliRunner().invoke(app, ["preflight", "--config", str(cfg), "--format", "json", *flags],
                             env={"KVPLAN_OFFLINE": "1"})
    assert out.exit_code in (0, 1), out.output
    return json.loads(out.stdout)["inputs"]["plan_flags"]


def test_preflight_given_flags_win_over_the_config_file(tmp_path, tiny_llama):
    lines = [c[0] for c in CONFIG_CASES]
    from_file = preflight_plan_flags(tmp_path, tiny_llama, lines)
    flags = [f for c in CONFIG_CASES for f in c[1]]
    from_flags = preflight_plan_flags(tmp_path, tiny_llama, lines, *flags)
    for _, _, key, file_value, flag_value in CONFIG_CASES:
        assert from_file[key] == file_value, key
        assert from_flags[key] == flag_value, key
