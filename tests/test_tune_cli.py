"""`kvplan tune` as a user runs it: a real subprocess, real exit codes (0 a configuration meets the
SLOs, 1 none does, 2 usage errors naming the flag), JSON / Markdown / table output and --output."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.sim import StepTimeProfile

# Qwen2.5-0.5B on an H100 with 105 blocks of bf16 KV memory (see tests/test_tune.py): fp8 holds a
# steady 30 req/s of 10-block requests (E2E 0.5 s: ~15 in flight), bf16 only about 10: its queue grows.
COMMON = ["--model", "qwen2.5-0.5b", "--gpu", "H100", "--kv-cache-memory-bytes", str(105 * 196_608),
          "--gpu-memory-utilization", "0.9", "--max-num-seqs", "64", "--kv-cache-dtype", "auto,fp8",
          "--rate", "30", "--arrival", "constant", "--num-requests", "300", "--input-len", "100",
          "--output-len", "50", "--processes", "1"]


@pytest.fixture(scope="module")
def profile_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tune") / "step.json"
    StepTimeProfile(overhead_s=0.01, per_seq_s=0.0, weights_read_s=0.0, per_kv_token_s=0.0, per_token_s=0.0,
                    per_attn_pair_s=0.0, source="test: 10 ms per step").save(path)
    return str(path)


def kvplan(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="160", KVPLAN_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", "tune", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_json_winner_and_exit_0(profile_file, tmp_path):
    p = kvplan(*COMMON, "--profile", profile_file, "--slo", "ttft_p99=200ms", "--format", "json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["kind"] == "kvplan.tune" and d["ok"] is True and d["simulated"] == 2
    assert d["winner"]["flags"]["kv_cache_dtype"] == "fp8" and d["winner"]["profile"] == "test: 10 ms per step"
    assert d["serve_command"].startswith("vllm serve Qwen/Qwen2.5-0.5B-Instruct") and "--kv-cache-dtype fp8" in d["serve_command"]
    assert [r["meets_slo"] for r in d["ranked"]] == [True, False]
    assert d["workload_max_model_len"] == 150 and d["slo"] == {"ttft_p99": 0.2}


def test_markdown_and_table_to_a_file(profile_file, tmp_path):
    md = tmp_path / "tune.md"
    p = kvplan(*COMMON, "--profile", profile_file, "--slo", "ttft_p99=200ms", "--format", "markdown", "--output", str(md))
    assert p.returncode == 0 and p.stdout == "", p.stderr
    text = md.read_text()
    assert text.startswith("# kvplan tune") and "--kv-cache-dtype fp8" in text and "| 1 |" in text
    table = tmp_path / "tune.txt"
    p = kvplan(*COMMON, "--profile", profile_file, "--slo", "ttft_p99=200ms", "--output", str(table))
    assert p.returncode == 0, p.stderr
    assert "kvplan tune: OK" in table.read_text() and "meets" in table.read_text()


def test_no_configuration_meets_exit_1_names_the_closest(profile_file):
    p = kvplan(*COMMON, "--profile", profile_file, "--slo", "ttft_p99=1ms", "--format", "json")
    assert p.returncode == 1
    d = json.loads(p.stdout)
    assert d["ok"] is False and d["winner"] is None and d["closest"]["flags"]["kv_cache_dtype"] == "fp8"
    assert "no configuration meets the SLOs; closest:" in p.stderr and "kv=fp8" in p.stderr


def test_pruned_configs_are_reported(profile_file):
    p = kvplan(*COMMON, "--profile", profile_file, "--slo", "ttft_p99=200ms", "--tp", "1,4", "--format", "json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["pruned"]["by_reason"] == {"tp_heads": 2} and "divisible" in d["pruned"]["examples"]["tp_heads"]


@pytest.mark.parametrize("flag,value,needle", [
    ("--max-num-seqs", "64,abc", "--max-num-seqs"),
    ("--max-num-seqs", "64,,128", "--max-num-seqs"),
    ("--gpu-memory-utilization", "0.9,1.5", "--gpu-memory-utilization"),
    ("--kv-cache-dtype", "auto,int3", "--kv-cache-dtype"),
    ("--gpus", "0", "--gpus"),
    ("--tp", "two", "--tensor-parallel-size"),
    ("--max-model-len", "4K,-1", "--max-model-len"),
    ("--gpu", "H100,NoSuchGPU", "--gpu"),
    ("--objective", "cheapest", "--objective"),
    ("--format", "xml", "--format"),
    ("--slo", "ttft=2s", "--slo"),
    ("--processes", "0", "--processes"),
    ("--top", "0", "--top"),
    ("--coverage", "101", "--coverage"),
    ("--rate", "-3", "--rate"),
    ("--input-len", "uniform:9", "--input-len"),
    ("--profile", "/nonexistent/profile.json", "profile"),
])
def test_bad_values_exit_2_naming_the_flag(flag, value, needle):
    args = [a for a in COMMON]
    if flag in args:
        i = args.index(flag)
        args[i + 1] = value
    else:
        args += [flag, value]
    p = kvplan(*args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert needle in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_traffic_is_required():
    p = kvplan("--model", "qwen2.5-0.5b", "--gpu", "H100")
    assert p.returncode == 2 and "--rate" in p.stderr


def test_request_log_sets_the_coverage_target_of_max_model_len():
    from kvplan.sim import trace_from_log
    from kvplan.tune.space import workload_floor

    log = str(Path(__file__).parents[1] / "src/kvplan/workload/examples/customer_service.jsonl.gz")
    p = kvplan("--model", "qwen2.5-1.5b", "--gpu", "L4", "--requests", log, "--rate", "5", "--num-requests", "2000",
               "--max-num-seqs", "64", "--kv-cache-dtype", "auto", "--gpu-memory-utilization", "0.9",
               "--processes", "1", "--format", "json")
    assert p.returncode in (0, 1), p.stderr
    d = json.loads(p.stdout)
    trace = trace_from_log([log], rate=5, num_requests=2000, seed=0)
    assert d["space"]["coverage_pct"] == 99.9
    # P99.9 of prompt + output (nearest rank), below the longest request: vLLM rejects the longest few.
    assert d["workload_max_model_len"] == workload_floor(trace, 99.9) < workload_floor(trace, None)
    # The default length tried: that need rounded up to a multiple of 1,024 (issue 14, finding 18).
    assert d["ranked"][0]["flags"]["max_model_len"] == d["default_max_model_len"] == 6144


def test_nothing_starts_exit_1_with_the_reasons(profile_file):
    p = kvplan(*COMMON, "--profile", profile_file, "--tp", "4", "--format", "json")
    assert p.returncode == 1
    assert json.loads(p.stdout)["simulated"] == 0
    assert "no configuration of the space starts (tp_heads 2)" in p.stderr


# Issue 14, finding 2: 500-token outputs on steps of 10 ms + 20 us per running sequence: at overload
# (2,048 sequences) the engine completes 2,048 / (500 × 51 ms) = 80 req/s. 60 req/s is below that, but
# 1,000 requests (17 s of arrivals) end while the batch still grows (median E2E 10 s): not judged.
OVERLOAD = ["--model", "qwen2.5-0.5b", "--gpu", "H100", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "2048",
            "--kv-cache-dtype", "auto", "--arrival", "constant", "--input-len", "100",
            "--output-len", "500", "--processes", "1", "--slo", "ttft_p99=200ms", "--format", "json"]


@pytest.fixture(scope="module")
def slow_batch_profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("tune") / "step-per-seq.json"
    StepTimeProfile(overhead_s=0.01, per_seq_s=2e-5, weights_read_s=0.0, per_kv_token_s=0.0, per_token_s=0.0,
                    per_attn_pair_s=0.0, source="test: 10 ms + 20 us per sequence").save(path)
    return str(path)


def test_a_configuration_the_trace_cannot_judge_never_wins(slow_batch_profile):
    p = kvplan(*OVERLOAD, "--rate", "60", "--profile", slow_batch_profile, "--num-requests", "1000")
    assert p.returncode == 1 and "unjudged (trace too short)" in p.stderr, p.stderr
    d = json.loads(p.stdout)
    (row,) = d["ranked"]
    assert d["winner"] is None and row["saturated"] is None and not row["meets_slo"]
    assert row["latency_s"]["ttft"]["p99"] < 0.2  # the short trace's percentiles alone would pass
    assert d["trace"]["length"] == "given" and d["trace"]["extended"] == []
    note = next(n for n in d["notes"] if "could not be judged for saturation" in n)
    # 60 req/s × 5 × the 9.7 s median E2E, rounded up to 500
    assert "(#1) and cannot win" in note and "still filling" in note and "--num-requests 3000" in note


def test_the_default_trace_length_is_derived_until_the_contenders_are_judged(slow_batch_profile):
    p = kvplan(*OVERLOAD, "--rate", "60", "--profile", slow_batch_profile)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    (row,) = d["ranked"]
    assert d["trace"]["length"] == "derived" and d["trace"]["requests"] == 3000
    assert [(e["requests"], e["extended_to"]) for e in d["trace"]["extended"]] == [(1000, 3000)]
    assert row["saturated"] is False and d["winner"] is not None
    assert any(n.startswith("trace length derived: 1,000 requests") for n in d["notes"])


def test_a_rate_above_the_overload_ceiling_is_saturated_whatever_the_trace_length(slow_batch_profile):
    """200 req/s against an 80 req/s ceiling: the 1,000-request trace ends while the batch fills, but the
    ceiling (a burst of the same requests) judges it; no longer trace is drawn."""
    p = kvplan(*OVERLOAD, "--rate", "200", "--profile", slow_batch_profile)
    assert p.returncode == 1 and "(saturated)" in p.stderr, p.stderr
    d = json.loads(p.stdout)
    (row,) = d["ranked"]
    assert row["saturated"] is True and "completes at overload" in row["saturation_reason"]
    assert d["trace"]["requests"] == 1000 and d["trace"]["extended"] == []


def test_the_default_max_model_len_is_rounded_up_and_block_aligned(profile_file):
    """Issue 14, finding 18: prompts of 800-1,200 + 512 output tokens need 1,712 tokens; tune tries
    2,048 (a multiple of 1,024: block-aligned, with headroom), never the trace's exact maximum."""
    p = kvplan("--model", "qwen2.5-0.5b", "--gpu", "H100", "--max-num-seqs", "64", "--kv-cache-dtype", "auto",
               "--gpu-memory-utilization", "0.9", "--rate", "2", "--arrival", "constant", "--num-requests", "40",
               "--input-len", "uniform:800,1200", "--output-len", "512", "--processes", "1",
               "--profile", profile_file, "--format", "json")
    d = json.loads(p.stdout)
    assert d["workload_max_model_len"] <= 1712 and d["default_max_model_len"] == 2048
    assert {r["flags"]["max_model_len"] for r in d["ranked"]} == {2048}
    assert "--max-model-len 2048" in d["ranked"][0]["serve_command"]
    assert any("rounded up to a multiple of 1,024" in n for n in d["notes"])
