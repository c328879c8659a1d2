"""``kvplan.sim.simulate`` on real plans: bench-compatible JSON, determinism, plan errors, CLI."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvplan.cli.main import app
from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest
from kvplan.models import load_model
from kvplan.sim import PlanDoesNotStart, SimResult, simulate, synthetic_trace
from kvplan.traffic.lengthdist import parse_length
from sim_helpers import FLAT, SEED_FLAGS
from sim_helpers import plan_request as _req
from sim_helpers import trace as _trace


def test_json_keys_mirror_kvplan_bench():
    from kvplan.bench.result import LATENCY_KEYS

    d = simulate(_req(), _trace()).to_dict()
    assert d["kind"] == "kvplan.simulate"
    for k in LATENCY_KEYS:
        assert {"p50", "p90", "p95", "p99", "max", "mean", "count"} <= set(d["latency_s"][k])
        assert "p999" in d["latency_s"][k]
    assert {"total", "ok", "failed", "error_rate", "completed", "rejected"} <= set(d["requests"])
    assert {"input_total", "output_total", "prompt", "output"} <= set(d["tokens"])
    assert {"window_s", "requests_per_s", "output_tokens_per_s", "input_tokens_per_s",
            "total_tokens_per_s"} <= set(d["throughput"])
    for k in ("preemptions", "rejected", "timeline", "saturation", "first_token_order", "config", "profile"):
        assert k in d
    assert d["requests"]["total"] == d["requests"]["completed"] + d["requests"]["rejected"] == 200
    assert d["tokens"]["output_total"] == 200 * 512
    json.dumps(d, allow_nan=False)  # JSON-ready: strict JSON has no NaN or Infinity


def test_same_seed_same_result_other_seed_other_traffic():
    a = simulate(_req(), _trace(seed=1)).to_dict()
    b = simulate(_req(), _trace(seed=1)).to_dict()
    c = simulate(_req(), _trace(seed=2)).to_dict()
    assert a == b
    assert a["latency_s"] != c["latency_s"]


def test_synthetic_lengths_match_kvplan_bench_for_the_same_seed():
    from kvplan.bench.config import BenchConfig
    from kvplan.bench.prompts import RequestSource

    cfg = BenchConfig(url="http://127.0.0.1:1", rate=1, max_requests=5, seed=7,
                      input_len=parse_length("uniform:10,20", "x"), output_len=parse_length("normal:50,5", "x"))
    src = RequestSource(cfg, "m", True)
    tr = synthetic_trace(1.0, num_requests=5, input_len=cfg.input_len, output_len=cfg.output_len, seed=7)
    assert [r.output_tokens for r in tr.requests] == [src.get(i).max_tokens for i in range(5)]
    assert [r.prompt_tokens for r in tr.requests] == [src.get(i).input_len_hint for i in range(5)]


def test_a_plan_that_does_not_start_raises_with_vllms_text():
    with pytest.raises(PlanDoesNotStart) as exc:
        simulate(_req(8192), _trace(n=5))
    # vLLM's ValueError from _get_and_verify_max_len (vllm/config/model.py), word for word
    assert str(exc.value).startswith("User-specified max_model_len (8192) is greater than the derived max_model_len "
                                     "(max_position_embeddings=4096.0 or model_max_length=None in model's config.json).")


def test_saturation_is_flagged_far_above_capacity():
    res: SimResult = simulate(_req(), _trace(rate=50, n=600))
    assert res.saturation["saturated"] is True
    assert res.saturation["max_sustainable_rate_estimate"] < 50
    low = simulate(_req(), _trace(rate=0.5, n=60))
    assert low.saturation["saturated"] is False


runner = CliRunner()


def test_cli_json_and_exit_codes(tmp_path):
    out = tmp_path / "sim.json"
    r = runner.invoke(app, ["simulate", *SEED_FLAGS, "--rate", "2", "--num-requests", "50",
                            "--max-model-len", "2048", "--format", "json", "--output", str(out)])
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert d["requests"]["total"] == 50 and json.loads(r.stdout)["requests"] == d["requests"]


def test_cli_usage_errors_exit_2_with_one_line():
    r = runner.invoke(app, ["simulate", *SEED_FLAGS, "--rate", "2", "--input-len", "uniform:9,1"])
    assert r.exit_code == 2
    assert "--input-len" in r.output and len(r.output.strip().splitlines()) == 1
    r = runner.invoke(app, ["simulate", *SEED_FLAGS])
    assert r.exit_code == 2 and "--rate" in r.output


def test_cli_plan_that_does_not_start_exits_1():
    r = runner.invoke(app, ["simulate", *SEED_FLAGS, "--rate", "2", "--num-requests", "5", "--max-model-len", "8192"])
    assert r.exit_code == 1
    assert "does not start" in r.output


def test_cli_slo_missed_exits_1_and_markdown_renders():
    r = runner.invoke(app, ["simulate", *SEED_FLAGS, "--rate", "20", "--num-requests", "100",
                            "--max-model-len", "2048", "--slo", "ttft_p99=1s", "--format", "markdown"])
    assert r.exit_code == 1, r.output
    assert "| ttft_p99 |" in r.output and "MISSED" in r.output


def test_hybrid_model_groups_carry_the_models_window():
    req = PlanRequest(model=load_model("gpt-oss-120b"), gpu=find_gpu("H100"), tensor_parallel_size=2)
    d = simulate(req, _trace(rate=2, n=40)).to_dict()
    kinds = [tuple(g[:2]) for g in d["config"]["kv_groups"]]
    assert ("sliding", 128) in kinds and ("full", 0) in kinds
    assert d["requests"]["completed"] == 40
    assert d["kv_cache"]["prefix_caching"] is True and any("hybrid" in n for n in d["notes"])


def test_hybrid_model_hits_the_prefix_every_request_shares():
    """HybridKVCacheCoordinator (0.11.0-0.32): a sliding-window + full model hits a shared head (a
    system prompt, the chat template's) in both groups once a request with it was admitted; the
    rest of each prompt is computed, and nothing with --no-enable-prefix-caching."""
    from kvplan.traffic.trace import SimRequest, Trace

    req = PlanRequest(model=load_model("openai/gpt-oss-20b"), gpu=find_gpu("H100"))
    reqs = tuple(SimRequest(0.01 * i, 300, 4, root_id="system", root_tokens=100) for i in range(20))
    on = simulate(req, Trace(reqs, "shared head")).to_dict()
    # 100 shared tokens are 6 full blocks of 16: every request after the first hits 96 tokens
    assert on["tokens"]["prefix_cache_hit_tokens"] == 19 * 96
    assert on["tokens"]["prompt_computed"] == 20 * 300 - 19 * 96
    off = simulate(req, Trace(reqs, "shared head"), enable_prefix_caching=False).to_dict()
    assert off["tokens"]["prefix_cache_hit_tokens"] == 0 and off["tokens"]["prompt_computed"] == 20 * 300
    assert on["latency_s"]["ttft"]["mean"] < off["latency_s"]["ttft"]["mean"]
    # the shared blocks are held once, not per request
    assert on["kv_cache"]["peak_usage"] < off["kv_cache"]["peak_usage"]


def test_async_scheduling_follows_the_platform():
    gpu = simulate(_req(), _trace(n=5)).to_dict()["config"]
    assert gpu["async_scheduling"] is True
    cpu_req = PlanRequest(model=load_model("meta-llama/Llama-2-7b-hf"), gpu=find_gpu("A100-80GB"), device="cpu",
                          kv_cache_memory_bytes=4 << 30, max_model_len=2048)
    cpu = simulate(cpu_req, synthetic_trace(1, num_requests=3, input_len=parse_length("100", "x"),
                                            output_len=parse_length("5", "x")), profile=FLAT).to_dict()["config"]
    assert cpu["async_scheduling"] is False  # vllm/platforms/cpu.py turns it off


def test_request_overhead_is_added_to_ttft_and_e2e_only():
    """A calibrated profile's request_overhead_s (the API server's own latency) is what a client
    sees on top of the engine: every TTFT and E2E grows by exactly it; TPOT and the schedule do not."""
    from dataclasses import replace

    from kvplan.sim import default_profile

    req, trace = _req(), _trace(n=50)
    base = default_profile(req)
    a = simulate(req, trace, profile=base).to_dict()
    b = simulate(req, trace, profile=replace(base, request_overhead_s=0.25)).to_dict()
    for m in ("ttft", "e2e"):
        for stat in ("p50", "p99", "max", "mean"):
            # the default GPU clock carries its own API-server latency: the replacement adds the difference
            assert b["latency_s"][m][stat] == pytest.approx(
                a["latency_s"][m][stat] + 0.25 - base.request_overhead_s, abs=1e-5)
    assert b["latency_s"]["tpot"] == a["latency_s"]["tpot"]
    assert b["first_token_order"] == a["first_token_order"] and b["preemptions"] == a["preemptions"]


def _h100_fp8(max_num_seqs=2048):
    return PlanRequest(model=load_model("meta-llama/Llama-2-70b-chat-hf"), gpu=find_gpu("H100"),
                       tensor_parallel_size=4, max_model_len=2048, max_num_seqs=max_num_seqs, kv_cache_dtype="fp8")


def _short_prompts(rate, n):
    return synthetic_trace(rate, num_requests=n, input_len=parse_length("uniform:300,500", "x"),
                           output_len=parse_length("512", "x"), seed=0)


def test_backlog_held_in_the_running_batch_is_saturation():
    """With max_num_seqs 2,048 and room in the KV cache, an overloaded engine admits everything:
    nobody waits, every step slows down, and the requests in the system keep growing."""
    # the saturation rule under test, on the roofline clock these rates were chosen for
    from kvplan.sim.steptime import roofline_profile

    prof = roofline_profile(_h100_fp8())
    over = simulate(_h100_fp8(), _short_prompts(25, 2000), profile=prof).to_dict()
    assert over["engine"]["max_waiting"] == 0 and over["saturation"]["saturated"] is True
    # no queue forms; the completions fall short of the arrivals and the rate is over the ceiling a burst measures
    sat = over["saturation"]
    assert "completes at overload" in sat["reason"] and sat["window"]["deficit"] > 3 * sat["window"]["sigma"]
    assert sat["max_sustainable_rate_estimate"] == sat["ceiling_rps"] < 25
    under = simulate(_h100_fp8(), _short_prompts(14, 1500), profile=prof).to_dict()
    assert under["saturation"]["saturated"] is False


def test_a_trace_shorter_than_the_filling_phase_is_not_judged():
    def run(rate, n):
        return simulate(_req(), synthetic_trace(rate, num_requests=n, input_len=parse_length("uniform:800,1200", "x"),
                                                output_len=parse_length("512", "x"), seed=0)).to_dict()["saturation"]
    short = run(2, 60)  # 30 s of arrivals, a median E2E of about 40 s, below the engine's ceiling
    assert short["saturated"] is None
    assert short["reason"].startswith("too short to judge")
    # as short, but above what the engine completes at overload (2.8 req/s): that alone judges it
    over = run(4, 120)
    assert over["saturated"] is True and over["ceiling_rps"] < 4 and "completes at overload" in over["reason"]


def test_cli_every_request_rejected_exits_1_with_a_clear_message():
    """Issue 14, finding 18: 1,000-token prompts against max_model_len 512 are all rejected (HTTP 400
    in vLLM). That run serves nobody: exit 1 and say so, never "median E2E of 0 s"."""
    r = runner.invoke(app, ["simulate", "--model", "qwen2.5-0.5b", "--gpu", "H100", "--max-model-len", "512",
                            "--rate", "5", "--num-requests", "20", "--input-len", "1000", "--output-len", "10",
                            "--format", "json"])
    assert r.exit_code == 1, r.output
    assert "no request completed: 20 of 20 rejected (prompt_too_long 20)" in r.stderr
    d = json.loads(r.stdout)
    assert d["verdict"]["passed"] is False
    assert [c["name"] for c in d["verdict"]["checks"]] == ["completed_requests"]
    assert "median E2E of 0 s" not in d["saturation"]["reason"] and "rejected" in d["saturation"]["reason"]
    table = runner.invoke(app, ["simulate", "--model", "qwen2.5-0.5b", "--gpu", "H100", "--max-model-len", "512",
                                "--rate", "5", "--num-requests", "20", "--input-len", "1000", "--output-len", "10"])
    assert table.exit_code == 1 and "NO REQUEST COMPLETED" in table.stdout
