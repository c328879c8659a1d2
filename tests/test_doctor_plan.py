"""`kvplan doctor`'s fixes predicted by the planner: the log's flags and measured KV memory run
through kvplan.memory.plan, then re-planned with the flag each fix changes. Real public logs whose
model is in the catalog (the model from index.json, passed as --model since the excerpts do not
print it), vLLM's CPU build, and the fallback to the log's own arithmetic (with its reason)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.errors import UsageError
from kvplan.hardware import GIB, custom_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.memory.startup_log import StartupLog
from kvplan.models import load_model
from kvplan.ops.doctor import diagnose, read_source
from kvplan.ops.doctor.model import COSTS
from kvplan.ops.doctor.planned import resolve_model
from test_bench_support import run_cli

FIX = Path(__file__).parent / "fixtures"
LOGS = FIX / "vllm_logs"
INDEX = {e["file"][:2]: e for e in json.loads((LOGS / "index.json").read_text())}


def _log(prefix: str) -> Path:
    return next(LOGS.glob(prefix + "-*.log"))


def _fixes(report, fid: str) -> dict:
    f = next(f for f in report.findings if f.id == fid)
    assert [x.cost for x in f.fixes] == sorted((x.cost for x in f.fixes), key=COSTS.index)
    return {x.change: x for x in f.fixes}


def test_v0_llama_rtx3090_fixes_come_from_the_plan():
    """Log 02 (V0, Llama-3.1-8B, RTX 3090, 23.58 GiB, util 0.90, 1,478 blocks of 2 MiB, max_model_len
    29,000). Planner numbers, hand-checked with
    `kvplan plan --model meta-llama/Llama-3.1-8B-Instruct --gpu-memory 23.58GiB --vllm-version 0.10 --engine v0
    --max-model-len 29000 --gpu-memory-utilization 0.95 --kv-cache-memory-bytes 4365532266` (2,081 blocks,
    33,296 tokens, 1.15x): the utilisation fix adds 0.05 × 23.58 GiB to the log's exact 1,478 blocks."""
    entry = INDEX["02"]
    r = diagnose([read_source(str(_log("02")))], model=entry["model"])
    assert r.runs[0].fix_basis == "plan: meta-llama/Llama-3.1-8B-Instruct, vLLM 0.10 rules (V0)"
    fixes = _fixes(r, "kv_cache_too_small_for_max_model_len")
    assert all(x.basis == "plan" for x in fixes.values())
    # keeping the asked 29,000 tokens at no cost first (vLLM's own advice order), then the largest
    # length that starts, which costs capacity
    assert list(fixes)[:2] == ["--gpu-memory-utilization 0.95", "--max-model-len 23648"]
    shorter = fixes["--max-model-len 23648"]  # vLLM's own 23,648 tokens = 1,478 × 16
    assert shorter.cost == "capacity" and shorter.price == "max_model_len 29,000 → 23,648: longer requests are refused"
    assert dict(shorter.numbers)["num_gpu_blocks"] == 1478 and dict(shorter.numbers)["starts"] is True
    util = dict(fixes["--gpu-memory-utilization 0.95"].numbers)
    assert (util["num_gpu_blocks"], util["added_blocks"], util["kv_cache_tokens"], util["max_concurrency"]) == \
        (2081, 603, 33296, 1.15)
    # the same figures straight from the planner (the hand check above)
    direct = plan(PlanRequest(load_model(entry["model"]), custom_gpu(int(23.58 * GIB)), max_model_len=29000,
                              gpu_memory_utilization=0.95, vllm_version="0.10", engine="V0",
                              kv_cache_memory_bytes=1478 * 2 * 1024 * 1024 + round(0.05 * 23.58 * GIB)), what_ifs=False)
    assert direct.kv.num_gpu_blocks == 2081 and direct.kv.kv_cache_tokens == 33296
    fp8 = dict(fixes["--kv-cache-dtype fp8"].numbers)
    assert (fp8["num_gpu_blocks"], fp8["kv_cache_tokens"], fp8["max_concurrency"]) == (2956, 47296, 1.63)
    tp2 = dict(fixes["--tensor-parallel-size 2"].numbers)
    assert tp2["starts"] and tp2["freed_gib"] == 7.48 and tp2["kv_cache_tokens"] > 2 * 47296


def test_without_a_model_the_fix_says_it_is_log_arithmetic():
    r = diagnose([read_source(str(_log("02")))])
    fixes = _fixes(r, "kv_cache_too_small_for_max_model_len")
    util = fixes["--gpu-memory-utilization 0.95"]
    assert util.basis == "log arithmetic (the log names no model; pass --model)"
    assert dict(util.numbers) == {"extra_kv_gib": 1.18, "kv_tokens": 33295}  # scaled: 1 token short of the plan
    assert r.runs[0].fix_basis == util.basis
    assert all(x.basis in (util.basis, "vLLM rule") for x in fixes.values())


def test_a_plan_that_does_not_reproduce_the_log_is_not_used():
    """Log 19 (gpt-oss-120b, vLLM 0.11, --max-num-batched-tokens 1024 not in the excerpt): vLLM
    printed 4.54 GiB needed; the plan with the excerpt's flags needs more (its sliding-window layers
    see the default batch), so doctor keeps vLLM's own estimate and says why."""
    for version in (None, "0.11"):
        r = diagnose([read_source(str(_log("19")))], model="openai/gpt-oss-120b", vllm_version=version)
        f = r.findings[0]
        shorter = next(x for x in f.fixes if x.change.startswith("--max-model-len "))
        assert shorter.change == "--max-model-len 49360" and shorter.cost == "capacity"
        assert shorter.basis.startswith("log arithmetic (plan for openai/gpt-oss-120b, vLLM ")
        assert "does not reproduce the log: vLLM needed 4.54 GiB" in shorter.basis


def test_negative_kv_memory_gpt_oss_plans_the_extra_gpu():
    """Log 16 (gpt-oss-120b on one H100, KV memory -2.14 GiB, 65.97 GiB of weights): no GPU total or
    utilisation in the excerpt, so the utilisation fix stays a rule; TP 2 is planned: 31.55 GiB less
    weights per GPU (the planner's MXFP4 weights at TP 1 vs 2, laid out as vLLM's Marlin path pads
    them on a Hopper GPU of that era: 65.91 GiB at TP 1, as the log's 65.97) leaves KV cache for
    11.61 max-length requests."""
    r = diagnose([read_source(str(_log("16")))], model="openai/gpt-oss-120b")
    fixes = _fixes(r, "no_memory_for_cache_blocks")
    assert fixes["--gpu-memory-utilization 0.95"].basis == "vLLM rule"
    tp2 = fixes["--tensor-parallel-size 2"]
    nums = dict(tp2.numbers)
    assert tp2.basis == "plan" and nums["starts"] and nums["freed_gib"] == 31.55
    assert nums["max_model_len"] == 131072 and nums["max_concurrency"] == 11.61


def test_cpu_build_failed_startup_with_its_config():
    """vLLM's CPU build refused --max-model-len 2048 with --kv-cache-memory-bytes 1048576 (4 blocks
    of 128 tokens × 2,048 B). With the model's config.json the planner reproduces vLLM's estimate
    (384) and finds the exact KV size that starts: 17 blocks of 256 KiB (16 for 2,048 tokens plus
    the null block) = 4,456,448 bytes; the log arithmetic's scaled bound was 5,592,406."""
    meta = json.loads((FIX / "vllm_cpu" / "failed_startup_kv_too_small.json").read_text())
    m = meta["model"]
    cfg = dict(m["config"], model_type=m.get("model_type", "llama"), vocab_size=m["vocab_size"],
               architectures=m.get("architectures") or ["LlamaForCausalLM"], torch_dtype="float32")
    path = FIX / "vllm_cpu" / "failed_startup_kv_too_small.log"
    old = _fixes(diagnose([read_source(str(path))]), "kv_cache_too_small_for_max_model_len")
    assert dict(old["--kv-cache-memory-bytes 5592406"].numbers)["kv_cache_memory_bytes"] == 5592406
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = Path(tmp) / "config.json"
        cfg_path.write_text(json.dumps(cfg))
        r = diagnose([read_source(str(path))], model=str(cfg_path))
    fixes = _fixes(r, "kv_cache_too_small_for_max_model_len")
    assert list(fixes)[:2] == ["--kv-cache-memory-bytes 4456448", "--max-model-len 384"]
    first = dict(fixes["--max-model-len 384"].numbers)
    assert (first["num_gpu_blocks"], first["kv_cache_tokens"], first["max_concurrency"]) == (4, 512, 1.33)
    need = dict(fixes["--kv-cache-memory-bytes 4456448"].numbers)
    assert need["num_gpu_blocks"] == 17 and need["starts"] and need["kv_cache_tokens"] == 2176
    assert "vLLM 0.32.0 rules (V1)" in r.runs[0].fix_basis
    assert not any(c.startswith("--kv-cache-dtype") or c.startswith("--tensor-parallel") for c in fixes)  # CPU


@pytest.mark.parametrize("name, expected", [
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ("META-LLAMA/llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ("/mnt/models/Llama-3.1-8B-Instruct/", "meta-llama/Llama-3.1-8B-Instruct"),
    ("Qwen3-14B", "Qwen/Qwen3-14B"),
])
def test_the_logs_model_name_is_looked_up_in_the_catalog(name, expected):
    spec, why = resolve_model(StartupLog(model=name), None)
    assert why == "" and spec.name == expected


def test_unknown_model_names_the_fallback_reason():
    spec, why = resolve_model(StartupLog(model="/models/my-private-finetune"), None)
    assert spec is None and why == "model '/models/my-private-finetune' not in catalog; pass --model"
    assert resolve_model(StartupLog(), None)[1] == "the log names no model; pass --model"
    with pytest.raises(UsageError):
        diagnose([read_source(str(_log("02")))], model="no-such-model-xyz")


def test_cli_model_flag_json_and_markdown_carry_the_basis():
    p = run_cli("doctor", str(_log("02")), "--model", "llama-3.1-8b-instruct", "-f", "json")
    assert p.returncode == 1, p.stderr
    d = json.loads(p.stdout)
    assert all(x["basis"] == "plan" for x in d["findings"][0]["fixes"])
    assert d["runs"][0]["fix_basis"].startswith("plan: meta-llama/Llama-3.1-8B-Instruct")
    p = run_cli("doctor", str(_log("02")), "-f", "markdown")
    assert "| basis |" in p.stdout and "log arithmetic (the log names no model; pass --model)" in p.stdout
    p = run_cli("doctor", str(_log("02")), "--model", "no-such-model-xyz")
    assert p.returncode == 2 and "no-such-model-xyz" in p.stderr


def test_preemption_fixes_from_the_plan_of_a_real_cpu_startup():
    """The planner set up from vLLM's CPU build's healthy start-up (1 GiB of KV: 524,288 tokens,
    256.00x at 2,048 tokens, exactly the log's line) gives the preemption fix its cap: at most 256
    requests of 2,048 tokens run at once. A peak of 300 running requests exceeds it."""
    from kvplan.memory.startup_log import parse_startup_log
    from kvplan.ops.doctor import planned_fixes
    from kvplan.ops.doctor.planned import make_planner

    meta = json.loads((FIX / "vllm_cpu" / "healthy_startup.json").read_text())
    m = meta["model"]
    cfg = dict(m["config"], model_type=m.get("model_type", "llama"), vocab_size=m["vocab_size"],
               architectures=m.get("architectures") or ["LlamaForCausalLM"], torch_dtype="float32")
    import tempfile

    log = parse_startup_log((FIX / "vllm_cpu" / "healthy_startup.log").read_text(), "healthy_startup.log")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(cfg))
        p, why = make_planner(log, dict(log.args), model=str(Path(tmp) / "config.json"))
    assert why == "" and p is not None
    assert p.baseline.kv.kv_cache_tokens == log.kv_cache_tokens == 524288
    fixes = planned_fixes.preemption(p, dict(log.args), None, 300)
    cap = fixes[0] if fixes[0].change.startswith("--max-num-seqs") else next(
        x for x in fixes if x.change.startswith("--max-num-seqs"))
    assert cap.change == "--max-num-seqs 256" and cap.basis == "plan"
    assert dict(cap.numbers)["max_concurrency"] == 256.0
    calm = [x.change for x in planned_fixes.preemption(p, dict(log.args), None, 10)]
    assert "--max-num-seqs (lower)" in calm and not any(c.startswith("--gpu-memory") for c in calm)  # CPU backend
