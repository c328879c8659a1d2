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


def flat(text: str) -> str:
    """Terminal output as one line: rich's box edges and line wraps removed."""
    return " ".join(text.replace("│", " ").split())


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


# --- finding 3: weights that do not fit; the smallest layout for every FAILS ---------------------

def test_weights_larger_than_the_gpu_fail_with_cuda_oom_and_the_smallest_layout():
    d = plan_json("--model", "llama-3.1-405b", "--gpu", "H100")
    s = d["startup"]
    assert s["ok"] is False and s["error_kind"] == "weights_oom"
    assert "CUDA out of memory while loading the model weights: 755.99 GiB of weights per GPU" in s["error"]
    assert "79.19 GiB" in s["error"] and "No available memory for the cache blocks" not in s["error"]
    f = s["fits_with"]
    assert f["found"] and (f["tensor_parallel_size"], f["pipeline_parallel_size"], f["gpus_per_replica"]) == (8, 2, 16)
    assert f["nodes"] == 2 and f["max_model_len"] == 131072 and "TP first, then PP" in f["rule"]
    assert "--tensor-parallel-size 8 --pipeline-parallel-size 2" in f["serve_command"]
    out = kvplan("plan", "--model", "llama-3.1-405b", "--gpu", "H100")
    assert "TP 8 × PP 2 = 16 H100-SXM5-80GB GPUs (2 nodes of 8)" in " ".join(out.stdout.split())


def test_every_fails_verdict_says_how_many_gpus_it_takes():
    # KV admission at the asked length: TP 2 cannot hold 131,072 tokens of Llama-3.1-70B
    s = plan_json("--model", "llama-3.1-70b", "--gpu", "H100", "-tp", "2", "--max-model-len", "131072",
                  "--gpu-memory-utilization", "0.95")["startup"]
    assert s["error_kind"] == "max_model_len_too_large"
    assert (s["fits_with"]["tensor_parallel_size"], s["fits_with"]["pipeline_parallel_size"]) == (4, 1)
    # a length above the model's limit: no layout helps, and it says so
    s = plan_json("--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4",
                  "--max-model-len", "8192")["startup"]
    assert s["fits_with"]["found"] is False and "no number of GPUs" in s["fits_with"]["reason"]


# --- finding 7: a FAILS verdict never offers the failing command; --strict; simulate agrees -------

def test_fails_verdict_offers_a_command_that_starts_never_the_failing_one():
    out = kvplan("plan", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "3")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "verdict: FAILS" in text and "must be divisible by tensor parallel size (3)" in text
    assert "--tensor-parallel-size 3" not in text
    # issue 30 #9: on the 3 GPUs the user has (TP 1 × PP 3), not fewer (TP 2 on 2 GPUs gives up KV memory)
    assert "run this instead: TP 1 × PP 3 on 3 GPUs" in text and "--pipeline-parallel-size 3" in text
    d = plan_json("--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "3")
    assert d["serve_command_starts"] is False
    md = kvplan("plan", "--format", "markdown", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB",
                "-tp", "3").stdout
    assert "--tensor-parallel-size 3" not in md and "## Run this instead" in md


def test_strict_exits_1_on_fails_and_simulate_agrees(tmp_path):
    args = ("--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "3")
    strict = kvplan("plan", "--strict", *args)
    assert strict.returncode == 1 and "verdict: FAILS" in strict.stdout
    assert kvplan("plan", "--strict", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB",
                  "-tp", "4", "--max-model-len", "4096").returncode == 0
    sim = kvplan("simulate", *args, "--rate", "1", "--input-len", "100", "--output-len", "10",
                 "--num-requests", "5")
    assert sim.returncode == 1
    assert "verdict FAILS" in sim.stderr and "must be divisible by tensor parallel size (3)" in sim.stderr
    assert "TP 1 × PP 3" in sim.stderr  # issue 30 #9: on the GPUs asked
    help_text = kvplan("plan", "--help").stdout
    assert "Exit codes" in help_text and "--strict" in help_text
    # --serve-config writes what starts (the layout offered), never the failing flags
    cfg = tmp_path / "serve.yaml"
    assert kvplan("plan", *args, "--serve-config", str(cfg)).returncode == 0
    assert "pipeline-parallel-size: 3" in cfg.read_text() and "tensor-parallel-size: 3" not in cfg.read_text()


# --- finding 10 (first half): what-if rows of a failing plan say the length they were planned at -

def test_what_if_rows_of_a_failing_plan_name_the_fallback_length():
    args = ("--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4", "--max-model-len", "8192")
    d = plan_json(*args)
    assert d["what_if_at_fallback_length"] is True and d["what_if_max_model_len"] == 4096
    assert d["what_if"] and all(w["max_model_len"] == 4096 for w in d["what_if"])
    caption = "planned at --max-model-len 4,096, the fallback length: 8,192 fails"
    assert caption in " ".join(kvplan("plan", *args).stdout.split())
    assert caption in kvplan("plan", "--format", "markdown", *args).stdout
    ok = plan_json("--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4",
                   "--max-model-len", "4096")
    assert ok["what_if_at_fallback_length"] is False


# --- finding 11: a verdict inside the estimate's error is borderline, with what settles it -------

def test_a_verdict_inside_the_estimates_error_is_borderline():
    args = ("--model", "llama-3.1-8b", "--gpu-memory", "34.5GiB")
    s = plan_json(*args)["startup"]
    assert s["ok"] is False and s["error_kind"] == "max_model_len_too_large"
    assert s["borderline"] is True and -s["estimate_error_gib"] <= s["kv_margin_gib"] < 0
    assert "--from-log" in s["settle_with"] and "--kv-cache-memory" in s["settle_with"]
    text = " ".join(kvplan("plan", *args).stdout.split())
    assert "verdict: FAILS (borderline)" in text and "vLLM may start after all" in text
    assert "vLLM refuses to start. It would print" not in text
    md = kvplan("plan", "--format", "markdown", *args).stdout
    assert "fails at start-up (borderline)" in md and "--from-log" in md
    # far outside the band: a flat verdict; measured KV memory: never borderline
    assert plan_json("--model", "llama-3.1-8b", "--gpu-memory", "30GiB")["startup"]["borderline"] is False
    assert plan_json(*args, "--kv-cache-memory", "15.5GiB")["startup"]["borderline"] is False


# --- finding 10 (second half): fp8 KV on Ampere, one rule for plan and tune -------------------

def test_fp8_kv_on_a100_one_rule_for_plan_and_tune():
    d = plan_json("--model", "llama-3.1-8b", "--gpu", "A100-80GB", "--kv-cache-dtype", "fp8")
    assert d["startup"]["ok"] and d["kv"]["bytes_per_token_per_gpu"] == 65536
    assert any("no native fp8" in w for w in d["startup"]["warnings"])
    out = kvplan("tune", "--model", "llama-3.1-8b", "--gpu", "A100-80GB", "--gpus", "1", "--kv-cache-dtype",
                 "auto,fp8", "--max-num-seqs", "64", "--rate", "1", "--num-requests", "50", "--input-len", "100",
                 "--output-len", "20", "--format", "json", "--processes", "1")
    assert out.returncode == 0, out.stderr
    t = json.loads(out.stdout)
    assert t["pruned"]["total"] == 0
    assert {r["flags"]["kv_cache_dtype"] for r in t["ranked"]} == {"bfloat16", "fp8"}


def test_fp8_kv_on_a100_under_vllm_0_10_is_the_v0_engine_or_refused():
    # vLLM 0.8-0.10: V1 took fp8 KV only with FlashAttention 3 on Hopper; elsewhere V0 (or an error if V1 forced)
    d = plan_json("--model", "llama-3.1-8b", "--gpu", "A100-80GB", "--kv-cache-dtype", "fp8", "--vllm-version", "0.10")
    assert d["engine"] == "V0" and any("falls back to the V0 engine" in n for n in d["notes"])
    assert plan_json("--model", "llama-3.1-8b", "--gpu", "H100", "--kv-cache-dtype", "fp8",
                     "--vllm-version", "0.10")["engine"] == "V1"
    s = plan_json("--model", "llama-3.1-8b", "--gpu", "A100-80GB", "--kv-cache-dtype", "fp8", "--vllm-version", "0.10",
                  "--engine", "v1")["startup"]
    assert not s["ok"] and s["error"] == "VLLM_USE_V1=1 is not supported with --kv-cache-dtype."


# --- finding 17: hub failures, missing folders, configs without a length, custom GPU memory -----

@pytest.fixture
def stub_hub():
    """A stand-in for the Hugging Face hub on 127.0.0.1 that answers as the hub does for a gated
    repository, a missing one and one without config.json (the X-Error-Code header huggingface_hub
    classifies). A fake, because the real hub is a network service the tests must not depend on."""
    import http.server
    import threading

    class Hub(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            code, error = 404, "RepoNotFound"
            if "gated-model" in self.path:
                code, error = 403, "GatedRepo"
            elif "no-config" in self.path:
                code, error = 404, "EntryNotFound"
            self.send_response(code)
            self.send_header("X-Error-Code", error)
            self.send_header("X-Error-Message", "stub hub")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = do_GET = _answer  # noqa: N815 - http.server's names

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _online(endpoint: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("KVPLAN_OFFLINE", "HF_HUB_OFFLINE", "HF_TOKEN")}
    env.update(HF_ENDPOINT=endpoint, HF_HUB_CACHE=str(tmp_path / "hf"), HF_HUB_DISABLE_IMPLICIT_TOKEN="1",
               HF_HUB_DISABLE_TELEMETRY="1", COLUMNS="120")
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", "plan", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("model,needle", [
    ("someorg/gated-model", "the repository is gated on the Hugging Face hub"),
    ("someorg/missing-model", "no such repository on the Hugging Face hub"),
    ("someorg/no-config", "has no config.json"),
])
def test_hub_failures_each_have_their_own_message(stub_hub, tmp_path, model, needle):
    out = _online(stub_hub, tmp_path, "--model", model, "--gpu", "H100")
    assert out.returncode == 2 and needle in out.stderr and "Unknown model" not in out.stderr


def test_unreachable_hub_and_missing_folder_are_named(tmp_path):
    out = _online("http://127.0.0.1:9", tmp_path, "--model", "someorg/some-model", "--gpu", "H100")
    assert out.returncode == 2 and "hub (http://127.0.0.1:9) is unreachable" in out.stderr
    out = kvplan("plan", "--model", "./nonexistent-dir", "--gpu", "H100")
    assert out.returncode == 2 and "./nonexistent-dir: no such file or directory" in out.stderr
    assert "Unknown model" not in out.stderr


def test_config_without_a_length_warns_as_vllm_does(tmp_path):
    cfg = dict(TINY_FP32)
    del cfg["max_position_embeddings"]
    path = write_config(tmp_path, cfg)
    d = plan_json("--model", str(path), "--gpu", "H100")
    assert d["flags"]["max_model_len"] == 2048
    assert any("Assuming the model's maximum length is 2048" in w for w in d["startup"]["warnings"])
    d = plan_json("--model", str(path), "--gpu", "H100", "--max-model-len", "8192")
    assert d["startup"]["ok"] and d["flags"]["max_model_len"] == 8192  # vLLM takes it as given
    assert any("takes --max-model-len 8192 as given" in w for w in d["startup"]["warnings"])


def test_custom_gpu_memory_is_labelled_as_such():
    d = plan_json("--model", "llama-3.1-8b", "--gpu", "H100", "--gpu-memory", "24GiB")
    assert d["flags"]["gpu"] == "H100-SXM5-80GB with 24.00 GiB (custom memory)"
    assert any("a H100-SXM5-80GB (its compute capability" in n for n in d["notes"])
    out = kvplan("plan", "--model", "llama-3.1-8b", "--gpu-memory", "24", "--compact")
    assert "on 24.00 GiB GPU" in out.stdout and "on 24 GPU" not in out.stdout


# --- finding 20: --version, help texts, LO > HI, no <bool>, preflight --url reads the server ------

def test_version_and_help_texts():
    out = kvplan("--version")
    assert out.returncode == 0 and out.stdout.startswith("kvplan ") and "0.6 to 0.33" in out.stdout
    plan_help = kvplan("plan", "--help").stdout
    assert "<bool>" not in plan_help
    for words in ("--dtype <str> Weights and activations", "--quantization -q <str> vLLM's --quantization",
                  "--gpu-memory-utilization <float> Share of each GPU's memory"):
        assert words in flat(plan_help), words
    profile_help = flat(kvplan("profile", "--help").stdout)
    assert "Plan flags" in profile_help and "--tensor-parallel-size, -tp" in profile_help
    assert "--kv-cache-memory" in profile_help


def test_uniform_with_lo_above_hi_says_so():
    out = kvplan("simulate", "--model", "llama-3.1-8b", "--gpu", "H100", "--input-len", "uniform:1200,800",
                 "--rate", "1", "--num-requests", "5")
    assert out.returncode == 2 and "LO > HI (1200 > 800)" in out.stderr and "cannot read" not in out.stderr


@pytest.fixture
def stub_vllm_version():
    """A stand-in that answers only vLLM's GET /version (as the real CPU server does, 0.32.0); the
    rest of preflight then fails to profile it, which is not what this test is about."""
    import http.server
    import threading

    class Server(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"version": "0.32.0"}' if self.path == "/version" else b"{}"
            self.send_response(200 if self.path == "/version" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_preflight_url_follows_the_servers_version_and_takes_its_log(stub_vllm_version, tmp_path):
    cfg = tiny_llama_config(tmp_path)
    log = FIXTURES / "vllm_cpu" / "healthy_startup.log"
    out = kvplan("preflight", "--url", stub_vllm_version, "--log", str(log), "--model", str(cfg), "--device", "cpu",
                 "--dtype", "float32", "--max-model-len", "2048", "--format", "json", timeout=300)
    assert out.returncode in (0, 1), out.stderr
    d = json.loads(out.stdout)
    assert d["plan"]["vllm_semantics"] == "0.32.0"
    assert d["plan"]["num_gpu_blocks"] == 4096  # the log's 1 GiB of KV memory, not an estimate
    assert "vLLM 0.32.0 read from" in json.dumps(d)
    assert kvplan("preflight", "--log", str(log), "--dry-run", "--model", str(cfg), "--device", "cpu").returncode == 2


# --- finding 6: lengths never recommends more than the model serves; outliers are flagged --------

def test_lengths_caps_at_the_models_limit_and_names_the_outlier(tmp_path):
    rows = [{"request": {"model": "q", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 512},
             "response": {"usage": {"prompt_tokens": 100 + i, "completion_tokens": 200, "total_tokens": 300 + i}}}
            for i in range(30)]
    rows.append({"request": {"model": "q", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1_000_000},
                 "response": {"usage": {"prompt_tokens": 16, "completion_tokens": 300, "total_tokens": 316}}})
    log = tmp_path / "requests.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = kvplan("lengths", str(log), "--model", "qwen3-8b", "--estimate", "--format", "json")
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout)["recommendation"]
    assert rec["model_limit"] == 40_960 and rec["max_model_len"] == 40_960
    assert rec["max_model_len_capped_from"] == 1_000_016 and "CAPPED" in rec["max_model_len_reason"]
    assert rec["outliers"] == 1 and "the largest max_tokens asked is 1,000,000" in rec["outliers_reason"]
    text = flat(kvplan("lengths", str(log), "--model", "qwen3-8b", "--estimate").stdout)
    assert "--max-model-len 40,960" in text and "--max-model-len 1,000,016" not in text
    assert "outliers: 1 request(s) above the model's limit" in text
    md = kvplan("lengths", str(log), "--model", "qwen3-8b", "--estimate", "--format", "markdown").stdout
    assert "| outliers | 1 |" in md


# --- finding 8: preflight's memory rule is vLLM's pre-allocation, fixes are priced, evidence true -

def _preflight_memory_check(*args: str) -> dict:
    out = kvplan("preflight", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4",
                 "--max-model-len", "4096", "--dry-run", "--format", "json", *args)
    assert out.returncode in (0, 1), out.stderr
    return next(c for c in json.loads(out.stdout)["checks"] if c["id"] == "plan_memory")


def test_preflight_at_vllms_default_utilization_passes_the_memory_check():
    c = _preflight_memory_check()  # vLLM 0.33's default 0.92 holds 92.9% of the GPU by design
    assert c["status"] == "pass" and c["measured"] == 0.9269 and not c["fixes"]
    # the evidence cites only the GPU-memory alerts `kvplan alerts` writes (issue 17's DCGM rules)
    assert any("GpuMemoryAboveVllmBudget" in e for e in c["evidence"])
    c = _preflight_memory_check("--gpu-memory-utilization", "0.99")
    assert c["status"] == "warn"
    fix = c["fixes"][0]
    assert fix["change"] == "--gpu-memory-utilization 0.97"
    assert fix["cost"] == "capacity" and fix["price"] == "−20,752 KV tokens per replica (−3% of 594,560)"
    md = kvplan("preflight", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4",
                "--max-model-len", "4096", "--dry-run", "--gpu-memory-utilization", "0.99", "--format", "markdown")
    assert "capacity: −20,752 KV tokens per replica" in md.stdout and "cost: free" not in md.stdout


# --- finding 9: doctor on a CUDA OOM in profile_run plans its fixes; --gpu; one utilisation ------

OOM_LOG = FIXTURES / "doctor_logs" / "constructed" / "oom-profile-run-llama70b-tp2-h100.log"


def test_doctor_plans_the_fixes_of_an_oom_in_profile_run():
    out = kvplan("doctor", str(OOM_LOG), "--format", "json")
    assert out.returncode == 1, out.stderr
    d = json.loads(out.stdout)
    assert d["runs"][0]["fix_basis"].startswith("plan: meta-llama/Llama-3.1-70B-Instruct")
    assert "KV memory estimated" in d["runs"][0]["fix_basis"]
    oom = next(f for f in d["findings"] if f["id"] == "cuda_oom_runtime")
    changes = [f["change"] for f in oom["fixes"]]
    # kvplan plan: 65,536 tokens fail KV admission on TP 2 at any utilisation; a lower one only makes it worse
    assert not any(c.startswith("--gpu-memory-utilization") for c in changes)
    first = oom["fixes"][0]
    assert first["change"].startswith("--max-model-len ") and first["basis"] == "plan" and first["cost"] == "capacity"
    assert "a lower utilisation only makes it worse" in first["effect"]
    assert "--tensor-parallel-size 4" in changes
    assert all(f["basis"] == "plan" for f in oom["fixes"])
    plan = plan_json("--model", "llama-3.1-70b", "--gpu", "H100", "-tp", "2", "--gpu-memory-utilization", "0.95",
                     "--max-model-len", "65536", "--vllm-version", "0.32")
    assert first["change"] == f"--max-model-len {plan['startup']['suggested_max_model_len']}"


def test_doctor_names_the_utilisation_the_log_shows_and_takes_gpu(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(
        "(APIServer pid=101) INFO 11-30 10:00:00 [api_utils.py:286] non-default args: {'model': "
        "'meta-llama/Llama-3.1-8B-Instruct', 'gpu_memory_utilization': 0.8, 'max_model_len': 131072}\n"
        "(EngineCore pid=120) ERROR 11-30 10:01:10 [core.py:946] ValueError: To serve at least one request with the "
        "model's max seq len (131072), (16.0 GiB KV cache is needed, which is larger than the available KV cache "
        "memory (10.5 GiB). Based on the available memory, the estimated maximum model length is 85984. Try "
        "increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
        "`max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.\n")
    text = kvplan("doctor", str(log)).stdout
    assert "names neither" not in text and "does not show the gpu_memory_utilization" not in text
    assert "the log shows gpu_memory_utilization=0.8 but not the GPU's total memory: pass --gpu" in flat(text)
    d = json.loads(kvplan("doctor", str(log), "--gpu", "H100", "--format", "json").stdout)
    util = next(f for f in d["findings"][0]["fixes"] if f["change"] == "--gpu-memory-utilization 0.95")
    assert util["basis"] == "plan" and "+11.88 GiB of KV cache" in util["effect"]
    bad = kvplan("doctor", str(log), "--gpu", "H1000")
    assert bad.returncode == 2 and "Unknown GPU 'H1000'" in bad.stderr


def test_profile_judges_a_live_peak_by_the_same_rule():
    """A real GPU at vLLM's default 0.92 shows ~93% in NVML: by the plan's own rule that is the
    pre-allocation, not a failure; only a peak beyond it plus the estimate's band fails."""
    from kvplan.serve_flags import plan_from_args
    from kvplan.ops.profile_checks import GPU_MEMORY_LIMIT, peak_limit

    planned = plan_from_args(["--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4",
                              "--max-model-len", "4096"])
    total = planned.flags.gpu_memory_bytes
    limit = peak_limit(planned, total)
    assert 0.9269 + 0.02 < limit < 0.96
    assert peak_limit(None, total) == GPU_MEMORY_LIMIT
    help_text = flat(kvplan("profile", "--help").stdout)
    assert "what the plan pre-allocates plus the estimate's error band" in help_text
