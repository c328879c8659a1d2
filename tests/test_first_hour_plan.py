"""Issue 30: plan's first-hour findings (2, 3, 9, 13, 21, 22, 25), bench compare (16) and the model
listing (27), as a user meets them on the command line."""
from __future__ import annotations

import json

from first_hour_helpers import FIXTURES, kvplan

LLAMA2 = ("--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB")


def plan(*args: str) -> dict:
    out = kvplan("plan", "--format", "json", *args)
    assert out.exit_code == 0, out.stderr
    return out.json()


# --- finding 2: a KV size the GPU cannot hold is an error; a measured one is not forced on vLLM ---

def test_an_impossible_kv_cache_memory_is_an_error():
    out = kvplan("plan", *LLAMA2, "-tp", "4", "--kv-cache-memory", "60")
    assert out.exit_code == 2
    assert "--kv-cache-memory cannot be what vLLM measured: 60.00 GiB" in out.stderr
    assert "45.60 GiB left for the KV cache" in out.stderr


def test_an_impossible_kv_cache_memory_bytes_fails_with_vllms_oom():
    d = plan(*LLAMA2, "-tp", "4", "--kv-cache-memory-bytes", str(60 << 30))
    assert d["startup"]["ok"] is False and d["startup"]["error_kind"] == "kv_cache_oom"
    assert d["startup"]["error"].startswith("torch.OutOfMemoryError: CUDA out of memory while allocating the KV cache")
    assert d["serve_command_starts"] is False


def test_a_measured_kv_memory_plans_but_stays_out_of_the_serve_line():
    d = plan(*LLAMA2, "-tp", "4", "--kv-cache-memory", "40")
    assert d["startup"]["ok"] and d["memory"]["available_kv_cache_gib"] == 40.0
    assert "--kv-cache-memory-bytes" not in d["serve_command"]
    m = d["memory"]  # the bar: inside the budget plus outside it stays within the GPU
    assert m["non_kv_gib"] + m["kv_cache_used_gib"] + m["preexisting_gib"] <= m["total_gib_per_gpu"]
    asked = plan(*LLAMA2, "-tp", "4", "--kv-cache-memory-bytes", str(40 << 30))
    assert f"--kv-cache-memory-bytes {40 << 30}" in asked["serve_command"]  # vLLM's own flag: asked for


# --- finding 3: what fits never exceeds the model's limit ----------------------------------------

def test_max_fitting_model_len_never_exceeds_the_derived_limit():
    d = plan(*LLAMA2, "-tp", "4", "--max-model-len", "8192")
    assert d["startup"]["error_kind"] == "max_model_len_above_derived"
    assert d["startup"]["max_fitting_model_len"] == d["derived_max_model_len"] == 4096


# --- finding 9: a failing layout is fixed on the user's GPUs first --------------------------------

def test_fits_with_keeps_the_users_gpu_count():
    d = plan(*LLAMA2, "-tp", "3")
    fw = d["startup"]["fits_with"]
    assert (fw["tensor_parallel_size"], fw["pipeline_parallel_size"], fw["gpus_per_replica"]) == (1, 3, 3)
    ours = plan(*LLAMA2, "-tp", "1", "-pp", "3")
    smaller = plan(*LLAMA2, "-tp", "2")
    assert ours["memory"]["available_kv_cache_gib"] > smaller["memory"]["available_kv_cache_gib"]
    text = kvplan("plan", *LLAMA2, "-tp", "3").flat
    assert "On the same GPUs, the layout that starts at max_model_len 4,096: TP 1 × PP 3" in text


# --- finding 13: one headroom rule, in plan too ----------------------------------------------------

def test_plan_warns_like_preflight_on_too_little_headroom():
    d = plan(*LLAMA2, "-tp", "4", "--gpu-memory-utilization", "0.99")
    assert d["startup"]["ok"] and d["headroom"]["band_gib"] > d["headroom"]["total_gib"] - d["headroom"]["peak_gib"]
    assert any("left outside vLLM's budget" in w for w in d["startup"]["warnings"])
    pre = kvplan("preflight", *LLAMA2, "-tp", "4", "--gpu-memory-utilization", "0.99", "--dry-run", "--format", "json")
    check = next(c for c in pre.json()["checks"] if c["id"] == "plan_memory")
    assert check["status"] == "warn"
    ok = plan(*LLAMA2, "-tp", "4")
    assert not ok["startup"]["warnings"] and ok["headroom"]["total_gib"] - ok["headroom"]["peak_gib"] >= ok["headroom"]["band_gib"]


def test_the_utilisation_what_if_is_offered_only_with_headroom():
    # an 8 GB-class GPU: 0.95 leaves less than the band (0.5 GiB) outside the budget
    small = plan("--model", "qwen2.5-0.5b", "--gpu-memory", "8GiB", "--max-model-len", "4096")
    assert all(w["change"] != "--gpu-memory-utilization 0.95" for w in small["what_if"])
    big = plan(*LLAMA2, "-tp", "4")
    assert any(w["change"] == "--gpu-memory-utilization 0.95" for w in big["what_if"])


# --- finding 16: bench compare refuses runs of different traffic ----------------------------------

def test_bench_compare_refuses_different_traffic():
    runs = FIXTURES / "bench_runs"
    a, b = runs / "tiny-llama-cpu-rate0.5.json", runs / "tiny-llama-cpu-rate2.json"
    out = kvplan("bench", "compare", a, b)
    assert out.exit_code == 1 and "NOT COMPARABLE" in out.flat and "rate 0.5 vs 2.0" in out.flat
    assert "REGRESSION" not in out.stdout
    d = kvplan("bench", "compare", a, b, "--format", "json").json()
    assert d["traffic_changed"] == ["rate 0.5 vs 2.0"] and not d["regressed"]
    assert all(r["verdict"] == "n/a" for r in d["rows"])
    allowed = kvplan("bench", "compare", a, b, "--allow-traffic-change").flat
    assert "DIFFERENT TRAFFIC (rate 0.5 vs 2.0)" in allowed
    same = kvplan("bench", "compare", a, a, "--format", "json").json()
    assert same["traffic_changed"] == []


# --- finding 21: titles with DP name the deployment's GPUs ---------------------------------------

def test_titles_with_dp_show_the_total_gpus():
    text = kvplan("plan", *LLAMA2, "-tp", "4", "-dp", "18", "--compact").flat
    assert "on 72× A100-SXM4-80GB (DP 18 replicas × TP 4, 4 GPUs each)" in text
    sim = kvplan("simulate", "--model", "llama-3.1-8b", "--gpu", "H100", "-dp", "4", "--rate", "2",
                 "--num-requests", "20").flat
    assert "on 4× H100-SXM5-80GB (DP 4 replicas × TP 1)" in sim


# --- finding 22: a measured ratio beside a threshold in the same unit -----------------------------

def test_preflight_memory_threshold_is_in_the_measured_unit():
    pre = kvplan("preflight", *LLAMA2, "-tp", "4", "--dry-run", "--format", "json").json()
    check = next(c for c in pre["checks"] if c["id"] == "plan_memory")
    assert 0 < check["measured"] < 1 and check["threshold"].startswith("≤ 0.97")


# --- finding 25: a local folder stays a path in the serve line ------------------------------------

def test_a_relative_model_folder_keeps_its_dot_slash(tmp_path, monkeypatch):
    cfg = json.loads((FIXTURES.parent.parent / "src/kvplan/models/catalog/Qwen--Qwen2.5-0.5B-Instruct.json")
                     .read_text())["config"]
    (tmp_path / "mymodel").mkdir()
    (tmp_path / "mymodel" / "config.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    for given in ("./mymodel", "mymodel", "mymodel/config.json"):
        d = plan("--model", given, "--gpu", "H100")
        assert d["serve_argv"][:3] == ["vllm", "serve", "./mymodel"], given


# --- finding 27: the model listing shows what a VRAM-calculator user scans for ---------------------

def test_models_lists_context_and_kv_bytes_per_token_and_each_alias_once():
    rows = {r["id"]: r for r in kvplan("models", "--format", "json").json()}
    llama = rows["meta-llama/Llama-3.1-8B-Instruct"]
    assert llama["max_context_tokens"] == 131072 and llama["kv_bytes_per_token"] == 131072
    assert all(len(r["aliases"]) == len(set(r["aliases"])) for r in rows.values())
    out = kvplan("models", "llama-3.1-8b", columns=80)
    assert "context" in out.stdout and "KV/tok" in out.stdout and "128K" in out.stdout and "128KiB" in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    amd = kvplan("models", "fp8-kv", columns=80).stdout
    assert amd.count("llama-3.1-70b-instruct-fp8-kv") == 1


# --- finding 29: vLLM bench's random lengths before 0.9 (read in the 0.8.4 / 0.8.5 wheels) --------

OLD_BENCH = ("python benchmarks/benchmark_serving.py --backend vllm --model meta-llama/Llama-3.1-8B "
             "--dataset-name random --random-input-len 1024 --random-output-len 128 --num-prompts 40 --request-rate 2")


def _sim_tokens(*args: str) -> dict:
    out = kvplan("simulate", "--model", "llama-3.1-8b", "--gpu", "H100", *args, "--format", "json")
    assert out.exit_code == 0, out.stderr
    return out.json()["tokens"]


def test_an_08_bench_command_with_range_ratio_1_is_fixed_lengths():
    for extra in ((), ("--random-range-ratio", "1.0")):
        tokens = _sim_tokens("--vllm-version", "0.8.4", "--from-bench-cmd", " ".join((OLD_BENCH,) + extra))
        assert tokens["prompt"] == 40 * (1024 + 1) and tokens["output"] == 40 * 128  # + BOS, the server's
    refused = kvplan("simulate", "--model", "llama-3.1-8b", "--gpu", "H100", "--from-bench-cmd",
                     OLD_BENCH + " --random-range-ratio 1.0")
    assert refused.exit_code == 2 and "give --vllm-version 0.8.5" in refused.stderr


def test_the_range_ratio_means_what_each_version_drew():
    import numpy as np

    from kvplan.traffic.bench_traffic import BenchTraffic, sample_bench

    t = BenchTraffic(request_rate=2.0, num_prompts=200, random_input_len=1000, random_output_len=100,
                     random_range_ratio=0.5, seed=7)
    old = sample_bench(t, version=(0, 8, 5), num_special=1, vocab_size=32000)
    new = sample_bench(t, version=(0, 19, 0), num_special=1, vocab_size=32000)
    assert 500 <= min(old.prompt_lens) and max(old.prompt_lens) <= 1000  # [L·r, L]
    assert max(new.prompt_lens) > 1000  # [L(1-r), L(1+r)]
    # the exact draws of 0.8.5's sample_random_requests after np.random.seed(seed) in main
    rs = np.random.RandomState(7)
    rs.randint(0, 32000, size=0)
    ins = rs.randint(int(1000 * 0.5), 1000 + 1, size=200)
    outs = rs.randint(int(100 * 0.5), 100 + 1, size=200)
    assert list(old.prompt_lens) == [int(x) for x in ins] and list(old.output_lens) == [int(x) for x in outs]


# --- finding 1: vLLM's own config checks, per version, with vLLM's texts --------------------------

def test_max_num_batched_tokens_below_max_num_seqs_is_refused_as_vllm_does():
    d = plan(*LLAMA2, "-tp", "4", "--max-num-batched-tokens", "10", "--max-num-seqs", "256")
    s = d["startup"]
    assert not s["ok"] and s["error_kind"] == "scheduler_config"
    assert s["error"] == "max_num_batched_tokens (10) must be greater than or equal to max_num_seqs (256)."
    assert "whatever the layout" in s["fits_with"]["reason"]  # no GPU count fixes it (and no search ran)


def test_v0_without_chunked_prefill_refuses_a_batch_below_max_model_len():
    d = plan(*LLAMA2, "-tp", "4", "--vllm-version", "0.6.4", "--max-num-batched-tokens", "100",
             "--max-num-seqs", "64")
    assert d["startup"]["error"].startswith("max_num_batched_tokens (100) is smaller than max_model_len (4096). "
                                            "This effectively limits the maximum sequence length")
    v1 = plan(*LLAMA2, "-tp", "4", "--vllm-version", "0.19", "--max-num-batched-tokens", "100", "--max-num-seqs", "64")
    assert v1["startup"]["ok"]  # V1 chunks prefills: the same flags start


def test_chunked_prefill_off_is_checked_on_v1_too():
    from dataclasses import replace

    from kvplan.hardware import find_gpu
    from kvplan.memory import PlanRequest
    from kvplan.memory import plan as run_plan
    from kvplan.models import load_model

    req = PlanRequest(load_model("meta-llama/Llama-2-70b-chat-hf"), find_gpu("A100-80GB"), tensor_parallel_size=4,
                      max_num_batched_tokens=100, max_num_seqs=64, vllm_version="0.19")
    assert run_plan(req, what_ifs=False).startup.ok
    off = run_plan(replace(req, enable_chunked_prefill=False), what_ifs=False)
    assert off.startup.error_kind == "scheduler_config" and "is smaller than max_model_len (4096)" in off.startup.error
    cli = plan(*LLAMA2, "-tp", "4", "--vllm-version", "0.19", "--no-enable-chunked-prefill",
               "--max-num-batched-tokens", "100", "--max-num-seqs", "64")
    assert cli["startup"]["error"] == off.startup.error


def test_block_sizes_vllm_refuses_per_version():
    cases = {"0.6.4": "argument --block-size: invalid choice: 7 (choose from 8, 16, 32, 64, 128)",
             "0.10.1": "argument --block-size: invalid choice: 7 (choose from 1, 8, 16, 32, 64, 128)",
             "0.15": "argument --block-size: invalid choice: 7 (choose from 1, 8, 16, 32, 64, 128, 256)",
             "0.19": "No common block size for 7. ",
             "0.33": "No common block size for 7 (FLASH_ATTN: [MultipleOf(16)])."}
    for version, text in cases.items():
        s = plan(*LLAMA2, "-tp", "4", "--vllm-version", version, "--block-size", "7")["startup"]
        assert s["error_kind"] == "block_size" and s["error"] == text, version
    assert plan(*LLAMA2, "-tp", "4", "--vllm-version", "0.33", "--block-size", "48")["startup"]["ok"]
    assert plan(*LLAMA2, "-tp", "4", "--vllm-version", "0.6.4", "--block-size", "32")["startup"]["ok"]


def test_more_pipeline_stages_than_layers_is_a_usage_error_not_a_traceback():
    out = kvplan("plan", *LLAMA2, "-pp", "81")
    assert out.exit_code == 2
    assert "--pipeline-parallel-size 81 is more than the model's 80 layers" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


# --- finding 23: two names for one quantity, given different values, are refused -----------------

def test_conflicting_aliases_are_refused_not_settled_silently():
    base = ("--model", "llama-3.1-8b", "--gpu", "H100")
    for cmd in ("simulate", "tune"):
        out = kvplan(cmd, *base, "--rate", "10", "--request-rate", "20", "--num-prompts", "20")
        assert out.exit_code == 2, cmd
        assert "--rate 10.0 and --request-rate 20.0 both give the request rate: give one of them" in out.stderr
    out = kvplan("simulate", *base, "--num-requests", "30", "--num-prompts", "20", "--request-rate", "2")
    assert out.exit_code == 2 and "both give the request count" in out.stderr
    for args in (("plan", *base, "-tp", "2", "--tensor-parallel-size", "4"),
                 ("trim", "x.jsonl", "--budget", "100", "--max-model-len", "200")):
        out = kvplan(*args)
        assert out.exit_code == 2 and "both set" in out.stdout + out.stderr, args
    assert plan(*base, "-tp", "2", "-tp", "4")["parallel"]["tensor_parallel_size"] == 4  # one name repeated: the last
    same = kvplan("simulate", *base, "--rate", "2", "--request-rate", "2", "--num-prompts", "20", "--format", "json")
    assert same.exit_code in (0, 1) and same.json()["trace"]["requests"] == 20  # the same value twice is no conflict


# --- finding 22 (doctor): the GPU margin in the numbers' own unit ----------------------------------

def test_doctor_history_states_the_margin_in_mib_beside_mib_figures():
    from kvplan.ops.doctor.history import Points, analyse
    from kvplan.ops.thresholds import Thresholds

    t0 = 1_800_000_000
    outside = [(t0 + i, 1000 + 200 * i) for i in range(40)]
    totals = [(t0 + i, 81090) for i in range(40)]
    p = Points(kv=[], waiting=[], preemptions=[], requests=[], prompt_tokens=[], generation_tokens=[], e2e_p99=[],
               ttft_p99=[], start_time=[], gpus={"GPU 0 on h": (outside, totals)})
    found = {f.id: dict(f.numbers) for f in analyse("prometheus X", p, Thresholds(), 1.0, 0.92)}
    g = found["gpu_memory_outside_budget"]
    assert g["margin_mib"] == round(0.03 * 81090, 1) and g["margin_share_of_total"] == 0.03
    assert "margin" not in g
