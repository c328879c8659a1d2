"""Issue 30, findings 4-8: one log reader for every command (vLLM 0.6-0.8's ``args: Namespace``
lines), doctor on measured blocks, on slow servers, on non-logs, on start-up phases that contain
each other, and fixes ranked by evidence before cost. Fixtures: tests/fixtures/vllm_logs_args/
(constructed in each version's format, see its README)."""
from __future__ import annotations

import pytest

from first_hour_helpers import ARGS_LOGS, EXAMPLE_LOG, FIXTURES, kvplan

V064 = ARGS_LOGS / "v0.6.4-llama31-8b-a100-util097-seqs512.log"
V073 = ARGS_LOGS / "v0.7.3-v1-llama31-8b-h100-blocks-queue.log"
V085 = ARGS_LOGS / "v0.8.5-v1-llama31-8b-h100-util097-slow-start.log"


# --- finding 4: plan --from-log reads 0.6-0.8's "args: Namespace(...)" like doctor does ----------

@pytest.mark.parametrize("log,version", [(V064, "0.6.4"), (V073, "0.7.3"), (V085, "0.8.5")])
def test_plan_from_log_takes_the_flags_of_an_args_namespace_line(log, version):
    d = kvplan("plan", "--from-log", log, "--gpu", "A100-80GB", "--format", "json").json()
    assert d["flags"]["gpu_memory_utilization"] in (0.97, 0.95)
    assert d["flags"]["max_num_seqs"] == 512
    assert d["flags"]["max_model_len"] == 8192
    assert d["vllm_semantics"] == version
    m = d["memory"]
    # the bar (inside the budget + outside it) never exceeds the GPU: the utilisation is the log's
    assert m["non_kv_gib"] + m["kv_cache_used_gib"] <= m["requested_gib"] + 0.01
    assert m["requested_gib"] <= m["total_gib_per_gpu"]


def test_doctor_and_plan_read_the_same_flags_from_one_log():
    doc = kvplan("doctor", V064, "--format", "json").json()
    plan = kvplan("plan", "--from-log", V064, "--gpu", "A100-80GB", "--format", "json").json()
    args = doc["runs"][0]["args"]
    assert args["gpu_memory_utilization"] == plan["flags"]["gpu_memory_utilization"] == 0.97
    assert args["max_num_seqs"] == plan["flags"]["max_num_seqs"] == 512


def test_an_args_line_never_repeats_the_api_key():
    out = kvplan("doctor", V064, "--format", "json")
    assert "token-abc123" not in out.stdout
    assert out.json()["runs"][0]["args"]["api_key"] == "<redacted>"


# --- finding 5: the log's block count is the KV memory, with or without --gpu ------------------

def test_doctor_plans_from_the_blocks_the_log_counted_with_and_without_gpu():
    plain = kvplan("doctor", V073, "--format", "json").json()
    with_gpu = kvplan("doctor", V073, "--gpu", "H100", "--format", "json").json()
    for d in (plain, with_gpu):
        assert d["runs"][0]["fix_basis"].startswith("plan:")
        full = next(f for f in d["findings"] if f["id"] == "kv_cache_full_with_waiting")
        assert full["numbers"]["kv_cache_tokens"] == 30312 * 16
        fp8 = next(x for x in full["fixes"] if x["change"] == "--kv-cache-dtype fp8")
        assert fp8["numbers"]["num_gpu_blocks"] == 2 * 30312  # planned from the log's blocks
        assert fp8["numbers"]["max_model_len"] == 8192  # the log's length, not the model's limit
    assert plain["findings"] == with_gpu["findings"]


def test_plan_from_log_uses_the_measured_blocks_not_an_estimate():
    d = kvplan("plan", "--from-log", V073, "--gpu", "H100", "--format", "json").json()
    assert d["kv"]["num_gpu_blocks"] == 30312
    assert d["memory"]["source"] == "log"


# --- finding 6: queueing and saturation are findings; a non-log is not "healthy" ---------------

def test_a_growing_queue_with_a_full_kv_cache_is_diagnosed_with_numbers():
    out = kvplan("doctor", V073, "--format", "json")
    assert out.exit_code == 0  # warnings, not errors
    d = out.json()
    q = next(f for f in d["findings"] if f["id"] == "requests_queued")
    n = q["numbers"]
    assert (n["waiting_first"], n["waiting_last"], n["window_s"]) == (200, 1180, 120.0)
    assert n["queue_growth_per_s"] == pytest.approx(8.17, abs=0.01)
    assert n["limited_by"] == "kv_cache"
    assert any("replicas" in f["change"] for f in q["fixes"])
    assert any("max_tokens" in f["change"] for f in q["fixes"])
    assert any(f["id"] == "kv_cache_full_with_waiting" for f in d["findings"])
    text = kvplan("doctor", V073).stdout
    assert "requests queued: waiting grew from 200 to 1,180 in 120 s (+8.2 req/s)" in text
    assert "no errors" in text and "warnings" in text


def test_the_replica_count_follows_from_the_observed_rate_and_the_request_lengths():
    d = kvplan("doctor", V073, "--requests", EXAMPLE_LOG, "--format", "json").json()
    q = next(f for f in d["findings"] if f["id"] == "requests_queued")
    fix = next(f for f in q["fixes"] if "replicas" in f["change"])
    nums = fix["numbers"]
    # completions = prompt tokens/s ÷ mean prompt; arrivals = completions + the queue's growth
    assert nums["arrivals_per_s"] == pytest.approx(nums["completions_per_s"] + 8.17, abs=0.02)
    assert nums["replicas"] == -(-nums["arrivals_per_s"] // nums["completions_per_s"])
    assert fix["change"].startswith(f"{nums['replicas']} replicas instead of 1")


@pytest.mark.parametrize("content", [b"", bytes(range(256)) * 8, b"hello\nworld\n"])
def test_an_empty_or_garbage_file_is_not_a_healthy_log(tmp_path, content):
    path = tmp_path / "not-a-log.txt"
    path.write_bytes(content)
    out = kvplan("doctor", path)
    assert out.exit_code == 2
    assert f"{path}: no vLLM log lines found" in out.stderr
    assert "no errors" not in out.stdout


def test_a_garbage_file_beside_a_real_log_is_named(tmp_path):
    garbage = tmp_path / "app.log"
    garbage.write_text("2026-01-01 12:00:00 app started\n2026-01-01 12:00:01 GET /health 200\n")
    out = kvplan("doctor", garbage, FIXTURES / "doctor_logs" / "09-oom-sampler-v1-vllm-15105.log")
    assert out.exit_code == 2
    assert "app.log: no vLLM log lines found" in out.stdout
    assert "cuda_oom_runtime" in out.stdout


# --- finding 7: phases that contain each other are counted once ---------------------------------

def test_slow_start_counts_each_second_once_and_stays_within_the_logs_own_span():
    d = kvplan("doctor", V085, "--format", "json").json()
    slow = next(f for f in d["findings"] if f["id"] == "slow_start")
    n = slow["numbers"]
    # Model loading (157.6 s) holds the download and the weight loading; init engine (53.87 s)
    # holds torch.compile and the graph capture
    assert n["total_s"] == pytest.approx(157.6 + 53.87, abs=0.01)
    assert n["download_within"] == "model_loading" and n["compile_within"] == "engine_init"
    assert n["total_s"] <= n["log_span_s"] == 227.0


# --- finding 8: a fix the log gives no evidence for ranks after those it supports ---------------

def test_sampler_oom_ranks_the_unsupported_n_best_of_fix_last():
    d = kvplan("doctor", FIXTURES / "doctor_logs" / "09-oom-sampler-v1-vllm-15105.log", "--format", "json").json()
    fixes = d["findings"][0]["fixes"]
    assert fixes[-1]["change"].startswith("lower n / best_of / logprobs")
    assert "shows no request parameters" in fixes[-1]["premise"]
    assert all(not f["premise"] for f in fixes[:-1])


def test_sampler_oom_with_logged_n_gt_1_requests_ranks_that_fix_first(tmp_path):
    log = (FIXTURES / "doctor_logs" / "09-oom-sampler-v1-vllm-15105.log").read_text()
    request = ("INFO 03-20 02:29:05 [logger.py:39] Received request chatcmpl-1: prompt: 'hi', params: "
               "SamplingParams(n=8, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, temperature=1.0, "
               "top_p=1.0, top_k=-1, min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], "
               "include_stop_str_in_output=False, ignore_eos=False, max_tokens=512, min_tokens=0, logprobs=None, "
               "prompt_logprobs=None, skip_special_tokens=True, spaces_between_special_tokens=True, "
               "truncate_prompt_tokens=None, guided_decoding=None, extra_args=None), prompt_token_ids: None, "
               "lora_request: None, prompt_adapter_request: None.\n")
    path = tmp_path / "oom.log"
    path.write_text(request + log)
    d = kvplan("doctor", path, "--format", "json").json()
    first = d["findings"][0]["fixes"][0]
    assert first["change"].startswith("lower n / best_of / logprobs") and first["premise"] == ""
    assert "1 logged request(s) with n/best_of > 1" in first["effect"]
