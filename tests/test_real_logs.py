"""Real vLLM start-up logs from public issue threads (tests/fixtures/vllm_logs, with sources in
index.json): kvplan reads each log's figures, and with the log's measured KV memory as input it
reproduces the log's block count (within the 0.01 GiB rounding of the printed memory), token
count and concurrency."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from plan_helpers import GPT_OSS_120B

from kvplan.hardware import GIB, custom_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.memory.compare import compare_with_log
from kvplan.memory.startup_log import parse_startup_log
from kvplan.models import load_model, spec_from_config

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
INDEX = json.loads((LOGS / "index.json").read_text())

# The vLLM version (and engine, where VLLM_USE_V1 chose) each log was written by, as dated in
# index.json's version notes. Logs whose figures cannot be checked are left out here.
REPLAY = {
    "01": ("0.6.4", None), "02": ("0.6.4", None), "05": ("0.6.4", None), "06": ("0.7.3", "V0"),
    "07": ("0.7.3", "V0"), "08": ("0.7.2", "V0"), "11": ("0.7.1", "V1"), "13": ("0.8.5", None),
    "14": ("0.9.2", None), "17": ("0.11", None), "24": ("0.11", None),
    # The development set's own server logs (dennislee22/vLLM-benchmarking, v0.10.1.1 printed).
    "25": ("0.10.1", None), "26": ("0.10.1", None), "27": ("0.10.1", None), "28": ("0.10.1", None),
    "29": ("0.10.1", None),
    # 30 (gpt-oss-120b, TP4) is estimate-only here: its 0.10 token line is blocks // groups x bs
    # for a two-group hybrid, which compare_with_log does not invert into a block count.
}


# Logs 101+ replay from their own index.json fields (benchmarks/plan_accuracy_index.py builds the model,
# version and flags the same way) when their check is consistent and they print a block or token count.
def _index_replays() -> dict:
    out = {}
    for e in INDEX:
        prefix = e["file"].split("-", 1)[0]
        exp = e["expected"]
        if (prefix.isdigit() and int(prefix) >= 101 and e["check"].get("result", "").startswith("consistent")
                and "available_kv_cache_gib" in exp and ("num_gpu_blocks" in exp or "kv_cache_tokens" in exp)):
            out[prefix] = (".".join((e.get("planned_as_version") or e["vllm_version"]).split(".")[:2]), None)
    return out


REPLAY.update(_index_replays())


def _index_spec(entry: dict):
    """A 101+ entry's model: the catalog id, or config_fields (over ``base_model``'s config when named)."""
    cf = {k: v for k, v in entry["config_fields"].items() if k not in ("source", "unsure", "base_model")}
    if "base_model" in entry["config_fields"]:
        return spec_from_config({**load_model(entry["config_fields"]["base_model"]).raw, **cf}, entry["file"],
                                name=entry["model"])
    if cf.get("architectures"):
        return spec_from_config(cf, entry["file"], name=entry["model"])
    return load_model(entry["model"])


def _entry(prefix: str) -> dict:
    return next(e for e in INDEX if e["file"].startswith(prefix + "-"))


def _config(entry: dict) -> dict:
    cf = {k: v for k, v in entry["config_fields"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    cf.update(entry["config_fields"].get("assumed_geometry", {}))
    if "kv_lora_rank" in cf:
        base = {"model_type": "deepseek_v2", "q_lora_rank": None, "n_routed_experts": 64, "num_experts_per_tok": 6,
                "moe_intermediate_size": 1408, "first_k_dense_replace": 1, "n_shared_experts": 2}
    else:
        base = {"model_type": "llama"}
    cfg = {"vocab_size": 32000, "torch_dtype": "bfloat16", "intermediate_size": 4 * cf.get("hidden_size", 4096),
           "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072, **base, **cf}
    cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    return cfg


@pytest.mark.parametrize("entry", INDEX, ids=[e["file"] for e in INDEX])
def test_parser_reads_the_printed_figures(entry):
    log = parse_startup_log((LOGS / entry["file"]).read_text(), entry["file"])
    exp = entry["expected"]
    if "available_kv_cache_gib" in exp:
        assert min(log.available_kv_gib) == pytest.approx(exp["available_kv_cache_gib"])
    for key, got in (("num_gpu_blocks", log.num_gpu_blocks), ("kv_cache_tokens", log.kv_cache_tokens),
                     ("max_concurrency", log.max_concurrency), ("concurrency_len", log.concurrency_len)):
        if key in exp:
            assert got == pytest.approx(exp[key]), key


@pytest.mark.parametrize("prefix", sorted(REPLAY))
def test_replay_reproduces_blocks_tokens_and_concurrency(prefix):
    entry = _entry(prefix)
    version, engine = REPLAY[prefix]
    log = parse_startup_log((LOGS / entry["file"]).read_text(), entry["file"])
    flags = entry["flags"]
    if int(prefix) >= 101:
        spec = _index_spec(entry)
    else:
        spec = spec_from_config(GPT_OSS_120B if "gpt-oss" in entry["file"] else _config(entry), entry["file"],
                                name=entry["model"] or "unknown")
    req = PlanRequest(
        spec, custom_gpu(80 * GIB), tensor_parallel_size=flags.get("tensor_parallel_size", 1),
        pipeline_parallel_size=flags.get("pipeline_parallel_size", 1),
        kv_cache_dtype=flags.get("kv_cache_dtype", "auto"),
        max_model_len=log.concurrency_len or flags.get("max_model_len"),
        max_num_batched_tokens=flags.get("max_num_batched_tokens"),
        vllm_version=version, engine=engine,
        kv_cache_memory_bytes=max(log.available_kv_bytes, 0) if log.available_kv_bytes is not None else None,
        kv_memory_source="log",
        kv_cache_memory_per_stage=log.available_kv_per_stage(flags.get("tensor_parallel_size", 1),
                                                             flags.get("pipeline_parallel_size", 1)),
    )
    result = compare_with_log(plan(req, what_ifs=False), req, log)
    m = result.measured
    if log.available_kv_bytes is not None and log.available_kv_bytes <= 0:
        assert result.kv.num_gpu_blocks == 0 and not result.startup.ok
        return
    implied = m["num_gpu_blocks_implied"]
    assert implied is not None
    if log.available_kv_gib and "num_gpu_blocks_range" in m and entry["check"].get("result", "").startswith("consistent"):
        lo, hi = m["num_gpu_blocks_range"]
        assert lo <= implied <= hi, f"log's {implied} blocks outside kvplan's {lo}..{hi}"
        assert abs(result.kv.num_gpu_blocks - implied) <= max(2, (hi - lo))
    if log.kv_cache_tokens is not None:
        assert m["tokens_match"], (m["replayed_kv_cache_tokens"], log.kv_cache_tokens)
    if log.max_concurrency is not None:
        assert m["concurrency_match"], (m["replayed_max_concurrency"], log.max_concurrency)


def test_gpt_oss_011_error_numbers_reproduced():
    """Log 19 (vLLM 0.11, gpt-oss-120b on an H100, --max-num-batched-tokens 1024): vLLM said 4.54 GiB
    were needed against 1.71 GiB available. 0.11 sums every layer: 18 full layers × 8,192 blocks +
    18 sliding layers × (cdiv(127 + 1024, 16) + 1) blocks, 32 KiB pages."""
    entry = _entry("19")
    log = parse_startup_log((LOGS / entry["file"]).read_text(), entry["file"])
    spec = spec_from_config(GPT_OSS_120B, entry["file"], name="openai/gpt-oss-120b")
    r = plan(PlanRequest(spec, custom_gpu(80 * GIB), max_model_len=131072, max_num_batched_tokens=1024,
                         vllm_version="0.11", kv_cache_memory_bytes=log.available_kv_bytes), what_ifs=False)
    assert not r.startup.ok
    assert r.startup.error.startswith(
        "To serve at least one request with the models's max seq len (131072), (4.54 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (1.71 GiB).")
    assert log.needed_kv_gib == 4.54


@pytest.mark.parametrize("prefix, flashinfer", [("140", False), ("142", True), ("144", False), ("141", None)])
def test_parser_reads_which_sampler_the_engine_runs(prefix, flashinfer):
    """TopKTopPSampler's start-up line (0.9.2 "FlashInfer is not available", 0.9.0.1 "Using
    FlashInfer", 0.8.5 "disabled because FlashInfer>=v0.2.3"); 0.19.1 log 141 prints none."""
    path = next(LOGS.glob(prefix + "-*.log"))
    assert parse_startup_log(path.read_text()).flashinfer_sampler is flashinfer


def test_from_log_plans_with_the_sampler_the_log_names(tmp_path):
    """plan --from-log takes the log's sampler unless --[no-]flashinfer-sampler is given: the
    native sort of 0.9.2 (38 B per logit) against FlashInfer's 14 B, over 256 rows of 151,936
    logits, is 0.87 GiB of profile peak."""
    from kvplan.memory.startup_log import read_startup_log
    from kvplan.serve_flags import request_from_values

    log = read_startup_log(next(LOGS.glob("140-*.log")))
    common = dict(model="Qwen/Qwen3-8B", gpu="A100-40GB", vllm_version="0.9.2", kv_cache_memory="1GiB")
    native = request_from_values(common, set(common), log)
    forced = request_from_values(dict(common, flashinfer_sampler=True), set(common) | {"flashinfer_sampler"}, log)
    assert native.flashinfer_sampler is False and forced.flashinfer_sampler is True
    a = plan(replace_kv(native), what_ifs=False).memory.activation_peak_gib
    b = plan(replace_kv(forced), what_ifs=False).memory.activation_peak_gib
    assert abs((a - b) * GIB - 256 * 151936 * (38 - 14)) < 2**20


def replace_kv(req):
    """The request as an estimate (no measured KV memory), so the profile peak is computed."""
    from dataclasses import replace

    return replace(req, kv_cache_memory_bytes=None, kv_memory_source="kv_cache_memory")


@pytest.mark.parametrize("line, flashinfer", [
    # TopKTopPSampler.__init__'s own strings (0.8.2 L44-60, 0.19.0 L52-59)
    ("INFO 05-01 10:00:00 [topk_topp_sampler.py:44] Using FlashInfer for top-p & top-k sampling.", True),
    ("WARNING 05-01 10:00:00 [topk_topp_sampler.py:58] FlashInfer is available, but it is not enabled. Falling back "
     "to the PyTorch-native implementation of top-p & top-k sampling.", False),
    ("(EngineCore_DP0 pid=1) INFO 05-01 10:00:00 [topk_topp_sampler.py:58] FlashInfer top-p/top-k sampling is "
     "available but disabled by default. Set VLLM_USE_FLASHINFER_SAMPLER=1 to opt in", False),
    ("INFO 05-01 10:00:00 [topk_topp_sampler.py:129] FlashInfer 0.2.3+ does not support per-request generators. "
     "Falling back to PyTorch-native implementation.", None),  # a per-call fallback, not the engine's choice
])
def test_parser_reads_every_version_s_sampler_line(line, flashinfer):
    assert parse_startup_log(line).flashinfer_sampler is flashinfer
