"""vLLM's defaults per version in the simulator, each pinned to the wheels it was read from: a user
who types ``--vllm-version 0.11`` gets 0.11's engine without knowing its flags."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvplan.cli.main import app
from kvplan.memory import semantics
from kvplan.traffic.trace import SimRequest
from sim_helpers import run

RUNNER = CliRunner()
SIM = ["simulate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--num-prompts", "20",
       "--request-rate", "inf", "--random-input-len", "200", "--random-output-len", "20", "--format", "json"]


def _config(*extra: str) -> dict:
    res = RUNNER.invoke(app, SIM + list(extra))
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    return {"async_scheduling": d["config"]["async_scheduling"],
            "clock_async": d["profile"]["clock"]["async_scheduling"]}


@pytest.mark.parametrize("version, tp, extra, expected", [
    # SchedulerConfig.async_scheduling: bool = False in the 0.10.1.1, 0.11.0, 0.12.0 and 0.13.0 wheels
    ("0.10.1.1", 1, (), False), ("0.11", 1, (), False), ("0.13", 1, (), False),
    # 0.14.0: None, resolved on in VllmConfig.__post_init__ (0.14.0 and 0.33.0 wheels) ...
    ("0.14", 1, (), True), ("0.33", 1, (), True),
    # ... unless PP > 1, or the executor is Ray (TP across nodes/containers)
    ("0.33", 1, ("-pp", "2"), False), ("0.33", 2, ("--gpus-per-node", "1"), False),
    # the flags win over the default
    ("0.11", 1, ("--async-scheduling",), True), ("0.33", 1, ("--no-async-scheduling",), False),
])
def test_async_scheduling_follows_the_version_default_and_the_flags(version, tp, extra, expected):
    cfg = _config("--vllm-version", version, "-tp", str(tp), *extra)
    assert cfg == {"async_scheduling": expected, "clock_async": expected}


def test_the_last_async_flag_wins_as_in_vllms_argparse():
    """--async-scheduling/--no-async-scheduling is one serve flag (kvplan/serve_flags.py), read as vLLM's
    BooleanOptionalAction reads it: the last spelling given wins."""
    assert _config("--vllm-version", "0.33", "--async-scheduling", "--no-async-scheduling")["async_scheduling"] is False
    assert _config("--vllm-version", "0.11", "--no-async-scheduling", "--async-scheduling")["async_scheduling"] is True


def test_the_whole_prompt_must_fit_at_admission_from_0_19_only():
    """scheduler_reserve_full_isl (default on) is in the 0.19.0 wheel's scheduler, not in 0.18.0's:
    before, a waiting request is admitted when its first chunk fits."""
    assert semantics("0.19").reserve_full_prompt_at_admission
    assert not semantics("0.18").reserve_full_prompt_at_admission
    # 159 usable blocks of 16 tokens: a 2,000-token prompt holds 125 of them while it decodes; a
    # second 1,500-token prompt (94 blocks) does not fit whole, but its first 512-token chunk does
    reqs = [SimRequest(0.0, 2000, 200), SimRequest(0.01, 1500, 50)]
    kw = dict(num_gpu_blocks=160, block_size=16, max_num_batched_tokens=512, max_model_len=4096)
    reserve = run(reqs, reserve_full_prompt=True, **kw)
    chunked = run(reqs, reserve_full_prompt=False, **kw)
    first, second = reserve.reqs
    assert reserve.preemptions == 0 and second.t_sched >= first.t_end  # waited for the blocks
    assert chunked.preemptions >= 1  # admitted on its first chunk, then preempted by recompute
    assert chunked.reqs[1].t_sched < first.t_end


def test_expert_parallel_gives_each_rank_whole_experts_and_keeps_the_all_reduce():
    """--enable-expert-parallel with TP 4 and no data parallelism: FusedMoEParallelConfig.make
    (0.11.0) sets ep_size = 4, tp_size = 1 for the experts, and use_all2all_kernels needs DP > 1."""
    base = SIM[:1] + ["--model", "zai-org/GLM-4.5-Air", "--gpu", "H100", "-tp", "4"] + SIM[5:]
    ep = json.loads(RUNNER.invoke(app, base + ["--enable-expert-parallel"]).output)
    tp = json.loads(RUNNER.invoke(app, base).output)
    (moe_ep,) = [t for t in ep["profile"]["terms"] if t["name"] == "MoE experts"]
    (moe_tp,) = [t for t in tp["profile"]["terms"] if t["name"] == "MoE experts"]
    assert moe_ep["experts"][0]["experts"] == 128 / 4 and moe_ep["experts"][0]["inter_per_rank"] == 1408
    assert moe_tp["experts"][0]["experts"] == 128 and moe_tp["experts"][0]["inter_per_rank"] == 1408 / 4
    assert any(t["name"] == "all-reduce" for t in ep["profile"]["terms"])
    res = RUNNER.invoke(app, base + ["--from-serve-cmd", "vllm serve zai-org/GLM-4.5-Air -tp 4 --enable-expert-parallel"])
    assert json.loads(res.output)["profile"]["terms"] == ep["profile"]["terms"]


@pytest.mark.parametrize("version, extra, expected", [
    # entrypoints/cli/serve.py: 0.14.0 keeps --api-server-count at 1 unless given ...
    ("0.14", ("-dp", "2"), 1),
    # ... 0.15.1 sets it to the DP size when None (vLLM's internal load balancer)
    ("0.15.1", ("-dp", "2"), 2), ("0.33", (), 1),
    ("0.11", ("--api-server-count", "3"), 3),
])
def test_api_server_count_follows_the_version_default_and_the_flag(version, extra, expected):
    res = RUNNER.invoke(app, SIM + ["--vllm-version", version, *extra])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["config"]["api_server_count"] == expected


def test_mxfp4_experts_find_triton_kernels_in_the_wheel_from_0_12():
    """vllm/third_party/triton_kernels is in the 0.12.0 wheel, not in 0.10.1.1 or 0.11.0."""
    assert semantics("0.12").mxfp4_moe_triton_bundled and semantics("0.33").mxfp4_moe_triton_bundled
    assert not semantics("0.11").mxfp4_moe_triton_bundled and not semantics("0.10.1.1").mxfp4_moe_triton_bundled


def test_the_chat_template_is_parsed_per_request_in_0_11_only():
    """resolve_chat_template_kwargs parses the template on every chat request in the 0.11.0 wheel;
    0.10.2 has no such step, 0.12.0 caches it: the API server's time per chat request grows by it."""
    from kvplan.hardware import find_gpu
    from kvplan.memory import PlanRequest, plan
    from kvplan.models import load_model
    from kvplan.sim import default_profile

    assert semantics("0.11").chat_template_parsed_per_request
    assert not semantics("0.10.2").chat_template_parsed_per_request and not semantics("0.12").chat_template_parsed_per_request

    def render(version, model="Qwen/Qwen3-8B"):
        req = PlanRequest(model=load_model(model), gpu=find_gpu("H100"), max_model_len=4096, vllm_version=version)
        prof = default_profile(req, plan(req, what_ifs=False))
        return prof.chat_render_s(req.model)

    from kvplan.sim.opmodel import CHAT_TEMPLATE_CHARS, DEFAULT_OVERHEADS

    parse = (DEFAULT_OVERHEADS.api_chat_parse_s_per_char * CHAT_TEMPLATE_CHARS / DEFAULT_OVERHEADS.api_cpu_speed)
    assert render("0.11.0") - render("0.12.0") == pytest.approx(parse) and parse > 1e-3
    assert render("0.12.0") == render("0.10.2")
    assert render("0.11.0", "openai/gpt-oss-20b") == render("0.12.0", "openai/gpt-oss-20b")  # harmony, no Jinja
