"""kvplan profile without a server: the probe shapes, URL checks, the start-up log through the
doctor's reader (a real vLLM CPU log), the measured-vs-planned checks, the renderers, the CLI's
usage errors and plans rebuilt from `kvplan plan --format json`. Measurements against the real
server are in tests/vllm_real/test_vllm_profile.py."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from kvplan.errors import UsageError
from kvplan.hardware import custom_gpu, parse_size
from kvplan.memory import PlanRequest, plan
from kvplan.models import load_model
from kvplan.ops import profile as P
from kvplan.serve_flags import plan_from_args
from kvplan.report.profile_json import render_json
from kvplan.report.profile_markdown import render_markdown
from kvplan.report.profile_text import render_table

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_cpu"
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "max_position_embeddings": 4096, "vocab_size": 129280, "torch_dtype": "float32", "tie_word_embeddings": False,
}


@pytest.fixture
def tiny_plan(tmp_path):
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    req = PlanRequest(model=load_model(str(d)), gpu=custom_gpu(parse_size("16GiB"), "CPU"), device="cpu",
                      dtype="float32", vllm_version="0.32", max_model_len=2048, kv_cache_memory_bytes=1 << 30,
                      kv_memory_source="measured")  # kvplan's --kv-cache-memory: planned with, not forced on vLLM
    return plan(req)


# --------------------------------------------------------------------------- shapes
@settings(max_examples=examples(300), deadline=None)
@given(block=st.sampled_from([1, 8, 16, 32, 64, 128, 256, 512]), mml=st.integers(2, 1 << 20))
def test_every_probe_stays_within_one_block_count_and_fits_max_model_len(block, mml):
    for shape in (P.short_shape(block, mml), P.long_shape(block, mml), P.burst_shape(block, mml)):
        lo, hi = shape.block_range(block)
        assert lo == hi, (shape, block, mml)  # a scrape at any moment of the request has one right answer
        assert shape.prompt_tokens >= 1 and shape.max_tokens >= 1
        assert shape.prompt_tokens + shape.max_tokens <= mml  # vLLM would reject it otherwise


@settings(max_examples=examples(200), deadline=None)
@given(block=st.sampled_from([16, 32, 128]), mml=st.integers(256, 1 << 18))
def test_long_probe_is_near_max_model_len(block, mml):
    long = P.long_shape(block, mml)
    assert long.prompt_tokens + long.max_tokens > mml - block - long.max_tokens


def test_tiny_server_shapes():
    assert P.short_shape(128, 2048) == P.Shape(16, 64)
    assert P.long_shape(128, 2048) == P.Shape(1984, 64)
    assert P.burst_shape(128, 2048) == P.Shape(97, 32)
    with pytest.raises(UsageError, match="--long-prompt-tokens 2000"):
        P.long_shape(128, 2048, 2000)


def test_prompts_differ_from_the_first_token():
    firsts = {P.prompt_ids(i, 5)[0] for i in range(64)}
    assert len(firsts) == 64 and all(P.TOKEN_ID_BASE <= t < P.TOKEN_ID_BASE + P.TOKEN_ID_SPAN for t in firsts)


# --------------------------------------------------------------------------- URLs
@pytest.mark.parametrize("bad", ["nope", "127.0.0.1:8000", "ftp://x", "http://", "http://h:1/metrics", "http://h?x=1"])
def test_bad_url_is_a_usage_error(bad):
    with pytest.raises(UsageError, match="--url"):
        P.check_url(bad)


def test_url_forms():
    assert P.check_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000"
    assert P.check_url("http://h:1/v1") == "http://h:1"
    assert P.is_local("http://localhost:1") and not P.is_local("http://10.0.0.1:1")


def test_unreachable_server_is_a_profile_error():
    with pytest.raises(P.ProfileError, match="cannot reach http://127.0.0.1:9/v1/models"):
        P.profile_server("http://127.0.0.1:9", timeout_s=10)


def test_burst_is_bounded():
    with pytest.raises(UsageError, match="--burst 65"):
        P.profile_server("http://127.0.0.1:9", burst_concurrency=65)


# --------------------------------------------------------------------------- start-up log
def test_startup_reads_the_real_cpu_log_through_the_doctor():
    log, startup = P._startup((FIXTURES / "healthy_startup.log").read_text())
    assert log.kv_cache_tokens == 524288 and log.max_concurrency == 256.0
    assert startup["kv_line"] == ("CPU KV cache size: 524,288 tokens, Maximum concurrency for 2,048 tokens per "
                                  "request: 256.00x")
    assert startup["vllm_version"] == "0.32.0" and startup["max_model_len"] == 2048
    assert isinstance(startup["findings"], list)
    assert P._startup(None) == (None, {})


def test_cache_config_labels_from_real_metrics():
    from kvplan.bench.metrics import parse_metrics

    labels = P.cache_config(parse_metrics((FIXTURES / "metrics.txt").read_text()))
    assert labels["num_gpu_blocks"] == "4096" and labels["block_size"] == "128"
    assert labels["kv_cache_size_tokens"] == "524288"


# --------------------------------------------------------------------------- checks
def _server(blocks: int = 4096) -> P.ServerFacts:
    return P.ServerFacts("m", 2048, 128, blocks, blocks * 128, 256.0, {"num_gpu_blocks": str(blocks)}, "0.32.0")


def _step(name="short", n=1, measured=1, errors=(), gpu=None, prompt=16, max_tokens=64) -> P.ProfileStep:
    return P.ProfileStep(name, n, prompt, max_tokens, n - len(errors), tuple(errors), 1.0, 5, 1, 0.0,
                         None if measured is None else measured / 4095, n, 0, measured, 1, 16, gpu, {})


def _by_id(checks):
    return {c.id: c for c in checks}


def test_checks_pass_when_measured_equals_planned(tiny_plan):
    log, _ = P._startup((FIXTURES / "healthy_startup.log").read_text())
    steps = {"short": _step(), "burst": _step("burst", 64, 64, prompt=97, max_tokens=32)}
    checks = _by_id(P.build_checks(_server(), tiny_plan, log, steps, 128, None, 0.9))
    assert {k: c.status for k, c in checks.items()} == {
        "kv_blocks": "pass", "kv_tokens": "pass", "concurrency": "pass", "kv_per_request_short": "pass",
        "kv_per_request_burst": "pass", "peak_gpu_memory": "skipped"}
    assert "would take 16 per request" in checks["kv_per_request_short"].evidence
    assert checks["peak_gpu_memory"].measured == "n/a"


def test_checks_fail_on_a_mismatch(tiny_plan):
    steps = {"short": _step(measured=16), "burst": _step("burst", 64, 40, prompt=97, max_tokens=32)}
    steps["burst"] = P.ProfileStep(**{**steps["burst"].__dict__, "peak_running": 40, "peak_waiting": 24,
                                      "held_back": "40 running and 24 waiting after engine steps that generated 80 "
                                                   "tokens and prefilled none"})
    checks = _by_id(P.build_checks(_server(2048), tiny_plan, None, steps, 128, None, 0.9))
    assert checks["kv_blocks"].status == "fail" and checks["kv_blocks"].measured == 2048
    assert checks["kv_tokens"].status == "fail"  # /metrics' kv_cache_size_tokens when there is no log
    assert checks["kv_per_request_short"].status == "fail"  # 16 blocks: as if max_model_len were reserved
    assert checks["concurrency"].status == "fail"


def test_checks_without_a_plan_are_skipped_not_passed():
    checks = _by_id(P.build_checks(_server(), None, None, {"short": _step()}, 64, None, 0.9))
    assert checks["kv_blocks"].status == "skipped" and "no plan" in checks["kv_blocks"].evidence
    assert checks["kv_per_request_short"].status == "pass"  # needs only the server's own figures


def test_a_burst_no_scrape_caught_is_skipped_not_failed(tiny_plan):
    """All 64 completed while the only scrape saw nothing running or waiting (a busy host answered
    /metrics after the burst): the concurrency was not measured, so it is not judged; 40 of 64
    running fails only when the server was seen holding requests back (a step with requests waiting
    that prefilled none of them), not when they waited on the token budget."""
    burst = P.ProfileStep(**{**_step("burst", 64, None, prompt=97, max_tokens=32).__dict__, "peak_running": 0})
    check = _by_id(P.build_checks(_server(), tiny_plan, None, {"burst": burst}, 128, None, 0.9))["concurrency"]
    assert check.status == "skipped" and "too fast to catch" in check.evidence, check
    # 40 of 64 running and none ever seen waiting: the scrapes missed the peak, not judged either
    burst = P.ProfileStep(**{**burst.__dict__, "peak_running": 40})
    check = _by_id(P.build_checks(_server(), tiny_plan, None, {"burst": burst}, 128, None, 0.9))["concurrency"]
    assert check.status == "skipped" and "peak running 40" in check.evidence, check
    # 43 running, 21 waiting: the burst's 6,208 prompt tokens over a 4,096-token budget (a CI run's
    # launched server, whose scrapes then missed the step that ran all 64): not judged
    burst = P.ProfileStep(**{**burst.__dict__, "peak_running": 43, "peak_waiting": 21})
    check = _by_id(P.build_checks(_server(), tiny_plan, None, {"burst": burst}, 128, None, 0.9))["concurrency"]
    assert check.status == "skipped" and "peak waiting 21" in check.evidence, check
    # 40 running while 24 waited through steps that prefilled nothing: the server held them back
    burst = P.ProfileStep(**{**burst.__dict__, "peak_running": 40, "peak_waiting": 24, "held_back": "40 running"})
    check = _by_id(P.build_checks(_server(), tiny_plan, None, {"burst": burst}, 128, None, 0.9))["concurrency"]
    assert check.status == "fail" and "held back: 40 running" in check.evidence, check


class _Snap(dict):
    """A scrape as _Watch reads it (MetricsSnapshot.get)."""


def _watch_sees(*scrapes) -> P._Watch:
    watch = P._Watch()
    for running, waiting, generated, prompted in scrapes:
        watch.add(_Snap(kv_cache_usage=0.01, requests_running=running, requests_waiting=waiting,
                        generation_tokens=generated, prompt_tokens=prompted), None, 64)
    return watch


def test_requests_waiting_on_the_token_budget_are_not_held_back():
    # vLLM V1 prefills a burst within max_num_batched_tokens: every step with requests waiting
    # prefills some (the prompt counter moves), and the gauges repeat between two steps
    assert _watch_sees((43, 21, 42, 4171), (43, 21, 42, 4171), (64, 0, 106, 6208)).held_back is None
    assert _watch_sees((20, 44, 20, 1940), (41, 23, 61, 3977), (64, 0, 125, 6208)).held_back is None
    # a step that generated tokens and prefilled nothing while 24 waited: a max_num_seqs or KV limit
    watch = _watch_sees((40, 24, 40, 3880), (40, 24, 120, 3880))
    assert watch.held_back and "generated 80 tokens and prefilled none" in watch.held_back
    # a server without the counters (an older or a proxied /metrics) is never called held back
    assert _watch_sees((40, 24, None, None), (40, 24, None, None)).held_back is None


def test_a_missed_request_is_skipped_and_an_error_fails(tiny_plan):
    checks = _by_id(P.build_checks(_server(), tiny_plan, None, {"short": _step(measured=None)}, 64, None, 0.9))
    assert checks["kv_per_request_short"].status == "skipped" and "too fast" in checks["kv_per_request_short"].evidence
    checks = _by_id(P.build_checks(_server(), tiny_plan, None, {"short": _step(measured=None, errors=("HTTP 400: x",))},
                              64, None, 0.9))
    assert checks["kv_per_request_short"].status == "fail" and "HTTP 400" in checks["kv_per_request_short"].evidence


def test_gpu_memory_over_the_limit_fails(tiny_plan):
    # NVML figures as a GPU would report them (this machine has none): 92% used of 80 GiB
    total = 80 << 30
    steps = {"short": _step(gpu=int(total * 0.92))}
    check = _by_id(P.build_checks(_server(), tiny_plan, None, steps, 64, total, 0.9))["peak_gpu_memory"]
    assert check.status == "fail" and check.measured == 0.92
    check = _by_id(P.build_checks(_server(), tiny_plan, None, steps, 64, total, 0.95))["peak_gpu_memory"]
    assert check.status == "pass"


# --------------------------------------------------------------------------- renderers
def _result(tiny_plan, ok=True) -> P.ProfileResult:
    checks = P.build_checks(_server(), tiny_plan, None, {"short": _step(measured=1 if ok else 3)}, 64, None, 0.9)
    return P.ProfileResult("http://127.0.0.1:1", "odd|model`name", "0.32.0",
                           {"block_size": 128, "num_gpu_blocks": 4096, "usable_blocks": 4095, "max_model_len": 2048},
                           P.planned_figures(tiny_plan), {"kv_line": "CPU KV cache size: 1 tokens"},
                           (_step(measured=1 if ok else 3),), tuple(checks), {"available": False, "notice": "no GPU"},
                           ("a note",))


def test_json_round_trips_and_says_ok(tiny_plan):
    d = json.loads(render_json(_result(tiny_plan)))
    assert d["ok"] is True and d["schema_version"] == 1
    assert {c["id"] for c in d["checks"]} >= {"kv_blocks", "kv_tokens", "kv_per_request_short", "peak_gpu_memory"}
    assert d["planned"]["num_gpu_blocks"] == 4096 and d["steps"][0]["measured_kv_blocks"] == 1
    assert json.loads(render_json(_result(tiny_plan, ok=False)))["ok"] is False


def test_markdown_escapes_table_cells(tiny_plan):
    md = render_markdown(_result(tiny_plan, ok=False))
    assert "does not match the plan" in md
    assert "odd\\|model'name" in md and "| kv_blocks" not in md
    for line in md.splitlines():
        if line.startswith("| KV-cache blocks"):
            assert line.count("|") - line.count("\\|") == 7


def test_table_renders_every_check(tiny_plan):
    buf = io.StringIO()
    render_table(_result(tiny_plan), file=buf, width=200)
    text = buf.getvalue()
    assert "MATCHES THE PLAN" in text and "KV-cache blocks" in text and "odd|model`name" in text
    assert "short" in text and "note: a note" in text


# --------------------------------------------------------------------------- plans and CLI
def test_plan_from_args_is_the_plan_commands_plan(tiny_plan, tmp_path):
    args = ["--model", str(tmp_path / "tiny"), "--device", "cpu", "--kv-cache-memory", "1GiB", "--dtype", "float32",
            "--vllm-version", "0.32"]
    assert plan_from_args([*args, "--max-model-len", "2048"]) == tiny_plan
    assert plan_from_args([*args, "--max-model-len", "1k"]).flags.max_model_len == 1000


def test_plan_from_args_reports_the_plans_own_usage_error():
    with pytest.raises(UsageError, match="Unknown model 'no-such-model-xyz'"):
        plan_from_args(["--model", "no-such-model-xyz", "--gpu", "H100"])
    with pytest.raises(UsageError, match="plan flags: .*--no-such-flag"):
        plan_from_args(["--model", "x", "--no-such-flag"])
    with pytest.raises(UsageError, match="--max-model-len: cannot read 'lots'"):
        plan_from_args(["--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "H100", "--max-model-len", "lots"])


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", "profile", *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, KVPLAN_OFFLINE="1"))


@pytest.mark.parametrize("args,message", [
    ((), "either --url URL"),
    (("--url", "http://127.0.0.1:9", "--launch"), "either --url URL"),
    (("--launch",), "--launch needs the plan flags"),
    (("--url", "not-a-url"), "--url 'not-a-url'"),
    (("--url", "http://127.0.0.1:9", "--format", "html"), "--format"),
    (("--url", "http://127.0.0.1:9", "--log", "/no/such.log"), "file not found: /no/such.log"),
    (("--url", "http://127.0.0.1:9", "--model", "no-such-model-xyz", "--gpu", "H100"), "Unknown model"),
])
def test_cli_usage_errors_exit_2(args, message):
    out = _cli(*args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and out.stdout == ""


def test_cli_missing_vllm_exits_2_naming_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    out = _cli("--launch", "--vllm-bin", str(tmp_path / "no-vllm"), "--model", str(tmp_path), "--device", "cpu")
    assert out.returncode == 2 and str(tmp_path / "no-vllm") in out.stderr


def test_cli_unreachable_server_exits_1():
    out = _cli("--url", "http://127.0.0.1:9")
    assert out.returncode == 1 and "cannot reach http://127.0.0.1:9/v1/models" in out.stderr


def test_table_is_readable_at_80_columns(tiny_plan):
    """Issue 14, finding 21: at 80 columns no line is wider than the terminal and no number of the
    probes is wrapped (the probe table keeps the columns that say whether the plan held)."""
    buf = io.StringIO()
    render_table(_result(tiny_plan), file=buf, width=80)
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "MATCHES THE PLAN" in " ".join(text.split())
    header = next(line for line in text.splitlines() if line.strip().startswith("step"))
    assert header.split() == ["step", "requests", "tokens", "KV", "peak", "blocks", "ceil/req", "running", "s"]
