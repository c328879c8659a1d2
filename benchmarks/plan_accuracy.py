"""kvplan's estimate-only error on KV memory, against real vLLM start-up logs.

For every public log in tests/fixtures/vllm_logs whose GPU size, model and flags are known, kvplan
plans the start-up *without* the log's measurement and compares its "Available KV cache memory"
with the one vLLM printed. Per log it prints the error in GiB and in % of the measured KV memory,
whether kvplan's start/fail verdict matches vLLM's, and the summary overall, per family and per
version. Logs marked ``dev`` belong to the development set the fitted non-torch constants were
fitted to (memory/budget.py); they are reported apart from the validation logs. The runs of
llm-d-planner's own H100 sweeps (plan_accuracy_sweep.py; the 0.19.0 figures checked against each
run's log) are validation too, scored beside the peer's own prediction of each. Usage:

    .venv/bin/python benchmarks/plan_accuracy.py [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from kvplan.hardware import GIB, custom_gpu, find_gpu
from dataclasses import replace

from kvplan.memory import PlanRequest, plan
from kvplan.memory.compare import compare_with_log
from kvplan.memory.startup_log import parse_startup_log
from kvplan.models import load_model, spec_from_config

LOGS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "vllm_logs"

R1_DISTILL_1_5B = {  # deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B config.json (Qwen2 architecture)
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960,
    "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
    "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    "use_sliding_window": False, "sliding_window": 4096,
}


QWEN2_7B = {  # Qwen/Qwen2-7B-Instruct config.json (recalled; 14.2488 GiB of bf16 weights at TP1 confirm it)
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    "use_sliding_window": False, "sliding_window": 131072, "rope_theta": 1000000.0,
}

A100_80 = "A100-80GB"
A100_40 = "A100-40GB"


def _qwen72_gptq() -> dict:
    cfg = dict(load_model("Qwen/Qwen2.5-72B-Instruct").raw)
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}
    cfg["torch_dtype"] = "float16"
    return cfg


def _qwen3_30b_w4a16() -> dict:
    cfg = dict(load_model("Qwen/Qwen3-30B-A3B").raw)
    cfg["quantization_config"] = {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                  "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 128}}}}
    return cfg


def _qwen3_235b_fp8() -> dict:
    """Qwen/Qwen3-235B-A22B-FP8: the bf16 config plus its block-wise fp8 quantization_config."""
    cfg = dict(load_model("Qwen/Qwen3-235B-A22B").raw)
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                  "weight_block_size": [128, 128]}
    return cfg


def _llama70b_w8a8() -> dict:
    """neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8: int8 channel-wise weights
    (compressed-tensors), on the Llama-3.1-70B-Instruct geometry."""
    cfg = dict(load_model("meta-llama/Llama-3.1-70B-Instruct").raw)
    cfg["quantization_config"] = {"quant_method": "compressed-tensors", "format": "int-quantized",
                                  "config_groups": {"group_0": {"weights": {"num_bits": 8, "strategy": "channel"}}}}
    return cfg


# Logs no configuration-based estimate can predict, shown but left out of the scores, with why.
# (Log 13, Llama-3.1-8B on an L40S, is not listed at all: its utilisation is not stated.)
UNPREDICTABLE = {
    "05": "another process held ~3.6 GiB of the GPU before vLLM started: the log prints "
          "non_torch_memory=4.09GiB at 0.6.4, whose budget charges everything on the GPU",
}

# (log prefix, model id or config, GPU name or total GiB, vLLM version, engine, plan flags, family)
CASES = [
    ("01", "meta-llama/Llama-3.1-8B-Instruct", 23.58, "0.6.4", None, dict(max_model_len=20000, gpu_memory_utilization=0.9), "dense"),
    ("02", "meta-llama/Llama-3.1-8B-Instruct", 23.58, "0.6.4", None, dict(max_model_len=29000, gpu_memory_utilization=0.9), "dense"),
    ("04", "meta-llama/Meta-Llama-3-8B", 79.22, "0.6.4", None, dict(gpu_memory_utilization=0.9), "dense"),
    ("05", _qwen72_gptq, 47.74, "0.6.4", None, dict(max_model_len=8192, gpu_memory_utilization=0.95), "quantized"),
    ("06", R1_DISTILL_1_5B, 7.75, "0.7.3", "V0", dict(max_model_len=2000, gpu_memory_utilization=0.9), "dense"),
    ("10", _qwen3_30b_w4a16, 23.56, "0.8.5", "V0", dict(max_num_seqs=8, gpu_memory_utilization=0.9), "MoE quantized"),
    ("14", "deepseek-ai/DeepSeek-V2-Lite", "L4", "0.9.2", None,
     dict(tensor_parallel_size=2, pipeline_parallel_size=2, max_model_len=1024), "MLA MoE"),
    # 0.7.1 V1 (Jan 2025 dev build); the GPU is not named: 67.7 GiB of weights at TP 1 need an 80 GB
    # one, and H100 / A100-80GB give the same total and batch tier in 0.7 (no A100 rule before 0.9).
    ("11", _llama70b_w8a8, "H100", "0.7.1", "V1", dict(max_model_len=2048, gpu_memory_utilization=0.98), "quantized"),
    # July 2025 thread, no version printed: 0.10.0 (released that week) is assumed.
    ("15", _qwen3_235b_fp8, "H100", "0.10.0", None, dict(tensor_parallel_size=4), "MoE fp8"),
    ("16", "openai/gpt-oss-120b", "H100", "0.10.1", None, dict(), "MoE MXFP4"),
    ("19", "openai/gpt-oss-120b", "H100", "0.11", None,
     dict(gpu_memory_utilization=0.95, max_num_batched_tokens=1024, max_model_len=131072), "MoE MXFP4"),
    # Blog post log (myoceane.fr, April 2026): version printed; an A100 80 GB (see index.json).
    ("31", "openai/gpt-oss-20b", A100_80, "0.19", None, dict(max_model_len=131072, gpu_memory_utilization=0.65),
     "MoE MXFP4"),
    # Development set (dennislee22/vLLM-benchmarking server logs, v0.10.1.1 printed): fitted to.
    ("25", QWEN2_7B, A100_80, "0.10.1", None, dict(max_model_len=16384, gpu_memory_utilization=0.25), "dense"),
    ("26", QWEN2_7B, A100_80, "0.10.1", None, dict(max_model_len=16384, gpu_memory_utilization=0.5), "dense"),
    ("27", QWEN2_7B, A100_80, "0.10.1", None,
     dict(max_model_len=16384, gpu_memory_utilization=0.25, tensor_parallel_size=2), "dense"),
    ("28", QWEN2_7B, A100_80, "0.10.1", None,
     dict(max_model_len=16384, gpu_memory_utilization=0.5, tensor_parallel_size=2), "dense"),
    ("29", QWEN2_7B, A100_40, "0.10.1", None,
     dict(max_model_len=16384, gpu_memory_utilization=0.5, tensor_parallel_size=2), "dense"),
    ("30", "openai/gpt-oss-120b", A100_80, "0.10.1", None,
     dict(max_model_len=16384, gpu_memory_utilization=0.8, tensor_parallel_size=4), "MoE MXFP4"),
]
DEV_SET = {"25", "26", "27", "28", "29", "30"}
# Logs whose paths show how vLLM was installed, which their user knows and types (--vllm-install pip):
# vLLM 0.8-0.11.0 sample with FlashInfer wherever it is importable, and their wheels do not require
# flashinfer-python (0.10.1 and 0.11.0 list it only under the `flashinfer` extra, 0.8/0.9/0.10.0 not at
# all), so a pip install samples with PyTorch's native top-k/top-p (memory/budget.py: its torch.sort
# peaks at 38 B per logit, against FlashInfer's 14 B). Logs 16 and 19 run from a conda env's
# site-packages; log 14 runs a development branch from a source checkout (a build from source installs
# the same requirements): only its last pipeline stage samples (gpu_model_runner.profile_run, 0.9.2),
# and that stage's figure (11.33 GiB) is the one scored; stage 0 (12.13 GiB) is planned at 12.21 either
# way. Logs that print no path (15, 102, 103) are planned as the user who does not say: the release
# image. A log's sampler line, where it prints one, wins (logs 140, 142-144, 302). The development logs
# 25-30 print "Using FlashInfer for top-p & top-k sampling" (their source logs).
INSTALL_FROM_LOG = {
    "14": "a 0.9.2 development branch run from a source checkout (/home/ray/default/work/vllm/vllm/...): the "
          "0.9.2 wheel does not require flashinfer-python; the last of 2 pipeline stages samples",
    "16": "vLLM 0.10.1 in /home/ubuntu/miniconda3/envs/... (torch 2.7.1+cu126, the stock wheel: Marlin on Hopper)",
    "19": "vLLM 0.11.0 in /opt/conda/envs/vllm_env/lib/python3.13/site-packages (torch 2.8.0+cu128)",
}

# Logs 101+ are built from their index.json entries (benchmarks/plan_accuracy_index.py): validation only.
from plan_accuracy_index import index_cases, vendor_builds  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

import plan_accuracy_sweep as sweep  # noqa: E402
from plan_accuracy_flags import flag_rows  # noqa: E402

_INDEX_CASES, _INDEX_EXCLUDED, MEASURED_FROM_INDEX = index_cases()
CASES += _INDEX_CASES
UNPREDICTABLE.update(_INDEX_EXCLUDED)
WITHIN = 5.0  # per cent of the measured KV memory (or of GPU memory when vLLM measured ~0)
#: serve flags that move memory beyond the model (kvplan.memory.lora, spec_decode, offload): logs run with
#: them are scored apart (set "flags"), so the other sets keep measuring the plain model
SERVE_FLAGS = ("enable_lora", "speculative_config", "cpu_offload_gb")


def _spec(model):
    if callable(model):
        model = model()
    if isinstance(model, dict):
        return spec_from_config(model, "benchmark", name="benchmark-model")
    return load_model(model)


STARTUP_FAILURES = ("ValueError", "is larger than the maximum number of tokens", "No available memory for the cache",
                    "CUDA out of memory")


def _verdict_right(r, log, text: str) -> bool:
    """vLLM started when it printed a positive KV memory and none of its start-up errors."""
    started = min(log.available_kv_gib or [1.0]) > 0 and not log.errors and not any(f in text for f in STARTUP_FAILURES)
    return bool(r.startup.ok) == started


def _measured_gib(prefix: str, name: str, log, r) -> float:
    """The KV memory vLLM measured: its printed figure, else (older logs, or early V1 that printed
    only a token count or a concurrency) the block count's memory, exact to within one block for
    a dense model (tokens = blocks x block size)."""
    if prefix in MEASURED_FROM_INDEX:
        return MEASURED_FROM_INDEX[prefix]
    if log.available_kv_gib:
        return min(log.available_kv_gib)
    tokens = log.kv_cache_tokens or (round(log.max_concurrency * log.concurrency_len)
                                     if log.max_concurrency and log.concurrency_len else None)
    blocks = log.num_gpu_blocks or (tokens // r.kv.block_size if tokens else None)
    if not blocks:
        raise SystemExit(f"{name}: the log prints no KV memory, block, token or concurrency count to score against")
    return round(blocks * r.kv.bytes_per_block / GIB, 2)


def run() -> list[dict]:
    rows = []
    for prefix, model, gpu, version, engine, flags, family in CASES:
        path = next(LOGS.glob(prefix + "-*.log"))
        text = path.read_text()
        log = parse_startup_log(text)
        g = custom_gpu(int(gpu * GIB), f"{gpu} GiB") if isinstance(gpu, float) else find_gpu(gpu)
        if log.flashinfer_sampler is not None and "flashinfer_sampler" not in flags:
            # the sampler the engine said it runs (TopKTopPSampler's start-up line): configuration
            # the log states, as its serve flags are, not a measured figure
            flags = {**flags, "flashinfer_sampler": log.flashinfer_sampler}
        if prefix in INSTALL_FROM_LOG:
            flags = {**flags, "vllm_install": "pip"}  # what the log's paths show (INSTALL_FROM_LOG)
        r = plan(PlanRequest(_spec(model), g, vllm_version=version, engine=engine, **flags), what_ifs=False)
        est = r.memory.available_kv_cache_gib
        measured = _measured_gib(prefix, path.name, log, r)
        err = est - measured
        # Error relative to the measured KV memory; when vLLM measured (almost) nothing, relative
        # to the GPU's memory so a -2 GiB log does not divide by zero.
        base = measured if measured >= 1.0 else g.memory_gib
        kind = "dev" if prefix in DEV_SET else "excluded" if prefix in UNPREDICTABLE else \
            "flags" if any(flags.get(k) for k in SERVE_FLAGS) else "validation"
        rows.append({"log": path.name, "vllm": version, "family": family, "set": kind,
                     "excluded_because": UNPREDICTABLE.get(prefix),
                     "model": r.model.id, "gpu_gib": round(g.memory_gib, 2), "tp": r.parallel.tensor_parallel_size,
                     "measured_gib": measured, "kvplan_gib": round(est, 2), "error_gib": round(err, 2),
                     "error_pct": round(err / base * 100, 2), "verdict_right": _verdict_right(r, log, text),
                     # what vLLM's "Model loading took" counts (the weights, and LoRA / drafter tensors
                     # loaded with them): the weights alone on a log without those flags
                     "weights_gib": round(r.memory.loaded_gib or r.memory.weights_gib_per_gpu, 2),
                     "log_weights_gib": log.model_loading_gib})
    return rows + sweep_run() + flag_rows()


def sweep_run() -> list[dict]:
    """llm-d-planner's own H100 sweeps (plan_accuracy_sweep.py): every run started, so
    the verdict is right when kvplan says it starts; the peer's own prediction rides along."""
    rows = []
    for run_row in sweep.sweep_rows():
        spec = sweep.spec_for(run_row)
        name = f"planner:{run_row['log_file'].removesuffix('.log')}"
        if spec is None:
            rows.append({"log": name, "set": "not expressed", "why": sweep.NOT_EXPRESSED[run_row["model"]]})
            continue
        req = sweep.plan_request(run_row, spec)
        r = plan(req, what_ifs=False)
        # the smallest worker's KV memory, which vLLM sizes the blocks by (the first rank's printed
        # figure is larger with PP: the last stage also runs the sampler)
        est, measured = r.memory.available_kv_cache_gib, run_row["kv_cache_memory_min_gib"]
        peer = run_row["peer_pred_kv_cache_memory_gib"]
        kind = "sweep-dev" if run_row["log_file"] in sweep.DEV_RUNS else "sweep"
        rows.append({"log": name, "vllm": run_row["vllm_version"], "family": sweep.family(spec, run_row["quantization"]),
                     "set": kind, "excluded_because": None, "model": run_row["model"],
                     "gpu_gib": round(req.gpu.memory_gib, 2), "tp": run_row["tp"], "measured_gib": measured,
                     "kvplan_gib": round(est, 2), "error_gib": round(est - measured, 2),
                     "error_pct": round((est - measured) / measured * 100, 2), "verdict_right": bool(r.startup.ok),
                     "weights_gib": round(r.memory.weights_gib_per_gpu, 2),
                     "log_weights_gib": run_row["weights_memory_gib"],
                     "peer_error_gib": None if peer is None else round(peer - measured, 2)})
    return rows


def _summary(rows: list[dict]) -> str:
    if not rows:
        return "-"
    errs = sorted(abs(r["error_gib"]) for r in rows)
    p90 = errs[min(len(errs) - 1, int(round(0.9 * (len(errs) - 1))))]
    ok = sum(1 for r in rows if abs(r["error_pct"]) <= WITHIN and r["verdict_right"])
    verdict = sum(1 for r in rows if r["verdict_right"])
    return (f"{len(rows):3d} logs | within ±{WITHIN:g}% and right verdict {ok}/{len(rows)} ({ok / len(rows):.1%}) | "
            f"verdict right {verdict}/{len(rows)} | median |error| {statistics.median(errs):.2f} GiB | "
            f"P90 {p90:.2f} GiB | max {errs[-1]:.2f} GiB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    rows = run()
    if parser.parse_args().json:
        json.dump(rows, sys.stdout, indent=2)
        return
    print(f"{'log':52s} {'set':4s} {'vLLM':6s} {'family':13s} {'TP':>2s} {'GPU':>6s} {'vLLM KV':>8s} {'kvplan':>8s} "
          f"{'error':>7s} {'err%':>7s} {'verdict':>7s} {'weights':>8s} {'(log)':>7s}")
    for r in rows:
        if r["set"] == "not expressed":
            continue
        lw = f"{r['log_weights_gib']:.2f}" if r["log_weights_gib"] else "-"
        print(f"{r['log'][:52]:52s} {('dev' if 'dev' in r['set'] else r['set'])[:4]:4s} {r['vllm']:6s} {r['family'][:13]:13s} {r['tp']:2d} {r['gpu_gib']:6.2f} "
              f"{r['measured_gib']:8.2f} {r['kvplan_gib']:8.2f} {r['error_gib']:+7.2f} {r['error_pct']:+7.1f} "
              f"{'right' if r['verdict_right'] else 'WRONG':>7s} {r['weights_gib']:8.2f} {lw:>7s}")
    val = [r for r in rows if r["set"] in ("validation", "sweep")]
    dev = [r for r in rows if r["set"] in ("dev", "sweep-dev")]
    swept = [r for r in rows if r["set"] == "sweep"]
    scored = val + dev
    print("\nall         " + _summary(scored))
    print("validation  " + _summary(val) + "   (logs nothing was fitted to: the threads' logs and the sweep)")
    print("  threads   " + _summary([r for r in val if r["set"] == "validation"]))
    print("  sweep     " + _summary(swept) + f"   (llm-d-planner's H100 runs, {sweep.SOURCE})")
    print("dev set     " + _summary(dev) + "   (the non-torch constants were fitted to these)")
    print("  threads   " + _summary([r for r in dev if r["set"] == "dev"]) + "   (0.10.1.1 A100 server logs 25-30)")
    print("  sweep     " + _summary([r for r in dev if r["set"] == "sweep-dev"])
          + "   (llm-d-planner 0.19.0: Qwen2.5-7B and Llama-3.1-8B at TP 1/2/4, the non-torch growth's per-TP fit)")
    flagged = [r for r in rows if r["set"] == "flags"]
    print("serve flags " + _summary(flagged) + "   (LoRA / speculative decoding / CPU offload logs, scored apart; "
          "nothing fitted to them)")
    for r in flagged:
        if "flag_effect_logged_gib" in r:
            print(f"  {r['log'][:40]:40s} the flag's own effect on KV memory: vLLM {r['flag_effect_logged_gib']:+.2f} GiB, "
                  f"kvplan {r['flag_effect_kvplan_gib']:+.2f} GiB (against the same server without it)")
    with_peer = [r for r in swept if r["peer_error_gib"] is not None]
    if with_peer:
        peer_abs = sorted(abs(r["peer_error_gib"]) for r in with_peer)
        ours_abs = sorted(abs(r["error_gib"]) for r in with_peer)
        peer_within = sum(1 for r in with_peer if abs(r["peer_error_gib"]) / r["measured_gib"] * 100 <= WITHIN)
        ours_within = sum(1 for r in with_peer if abs(r["error_pct"]) <= WITHIN and r["verdict_right"])
        print(f"  the peer on its own {len(with_peer)} runs it predicted: median |error| "
              f"{statistics.median(peer_abs):.2f} GiB, mean {statistics.mean(r['peer_error_gib'] for r in with_peer):+.2f}, "
              f"within ±{WITHIN:g}% {peer_within}/{len(with_peer)}; kvplan on the same runs: median |error| "
              f"{statistics.median(ours_abs):.2f} GiB, mean {statistics.mean(r['error_gib'] for r in with_peer):+.2f}, "
              f"within ±{WITHIN:g}% {ours_within}/{len(with_peer)}")
    for r in rows:
        if r["set"] == "excluded":
            print(f"excluded    {r['log']}: {r['excluded_because']}")
        elif r["set"] == "not expressed":
            print(f"not scored  {r['log']}: {r['why']}")
    print("\nper family (validation logs):")
    for fam in sorted({r["family"] for r in val}):
        print(f"  {fam:18s} " + _summary([r for r in val if r["family"] == fam]))
    print("per version (validation logs):")
    for ver in sorted({r["vllm"] for r in val}, key=lambda v: tuple(int(x) for x in v.split("."))):
        print(f"  {ver:18s} " + _summary([r for r in val if r["vllm"] == ver]))
    mla = measured_mla_rows()
    print(f"\nmeasured mode on the MLA logs (their printed KV memory in; blocks must equal the log's): "
          f"{sum(r['exact'] for r in mla)}/{len(mla)} exact")
    for r in mla:
        shown = r["log_blocks"] if r["log_blocks"] is not None else f"none at {r['block_size']}-token blocks"
        print(f"  {r['log'][:52]:52s} vLLM {r['vllm']:6s} {r['gpu'][:16]:16s} block {r['block_size']:3d}  "
              f"log {shown}  kvplan {r['kvplan_blocks']} (printed memory allows {r['range'][0]}..{r['range'][1]})  "
              f"{'exact' if r['exact'] else 'WRONG'}")
    print("\nwhat if a vendor build is planned as the upstream version its file:line tags match (not scored: a user "
          "types the version the log prints):")
    for r in _vendor_build_what_if():
        print(f"  {r['log'][:52]:52s} printed {r['printed']:6s} as {r['as']:6s} vLLM KV {r['measured_gib']:6.2f}  "
              f"kvplan {r['kvplan_gib']:6.2f}  error {r['error_gib']:+6.2f} ({r['error_pct']:+.1f} %)  "
              f"verdict {'right' if r['verdict_right'] else 'WRONG'}")
    print("\nwhat if the logs scored with --vllm-install pip (their paths show a pip or source install) were planned "
          "without it (the release image's FlashInfer sampler, kvplan's default when the install is not said):")
    for r in _install_unsaid_what_if():
        print(f"  {r['log'][:52]:52s} vLLM KV {r['measured_gib']:6.2f}  kvplan {r['kvplan_gib']:6.2f}  "
              f"error {r['error_gib']:+6.2f}  verdict {'right' if r['verdict_right'] else 'WRONG'}  ({r['why']})")


def measured_mla_rows() -> list[dict]:
    """Measured mode on every MLA log: kvplan given the KV memory the log printed (per stage with PP)
    must give the log's block count exactly. The printed memory is rounded to 0.01 GiB, so the blocks
    it allows are a range; the log's own count is what its token line implies at kvplan's block
    size (tokens / block size, an integer only at the right size), and it must lie in that range."""
    rows = []
    for prefix, model, gpu, version, engine, flags, family in CASES:
        if "MLA" not in family or prefix in UNPREDICTABLE:
            continue
        path = next(LOGS.glob(prefix + "-*.log"))
        log = parse_startup_log(path.read_text(), path.name)
        g = custom_gpu(int(gpu * GIB), f"{gpu} GiB") if isinstance(gpu, float) else find_gpu(gpu)
        tp, pp = flags.get("tensor_parallel_size", 1), flags.get("pipeline_parallel_size", 1)
        req = PlanRequest(_spec(model), g, vllm_version=version, engine=engine, **flags,
                          kv_cache_memory_bytes=max(log.available_kv_bytes, 0), kv_memory_source="log",
                          kv_cache_memory_per_stage=log.available_kv_per_stage(tp, pp))
        r = compare_with_log(plan(req, what_ifs=False), req, log)
        lo, hi = r.measured["num_gpu_blocks_range"]
        implied = r.measured["num_gpu_blocks_implied"]
        exact = implied is not None and lo <= implied <= hi and r.measured.get("tokens_match", True) \
            and r.measured.get("concurrency_match", True)
        rows.append({"log": path.name, "vllm": version, "gpu": g.name, "block_size": r.kv.block_size,
                     "log_blocks": implied, "kvplan_blocks": r.kv.num_gpu_blocks, "range": (lo, hi), "exact": exact})
    for run_row in sweep.sweep_rows():
        spec = sweep.spec_for(run_row)
        if spec is None or not spec.is_mla:
            continue
        req = sweep.plan_request(run_row, spec)
        half = int(0.005 * GIB)
        kv = int(run_row["kv_cache_memory_min_gib"] * GIB)
        r = plan(replace(req, kv_cache_memory_bytes=kv, kv_memory_source="log"), what_ifs=False)
        bs, bpb = r.kv.block_size, r.kv.bytes_per_block
        lo, hi = (kv - half) // bpb, (kv + half) // bpb
        tokens = int(run_row["kv_cache_tokens"])  # 0.19.0 prints num_blocks // groups x block size
        implied = tokens // bs if tokens % bs == 0 else None
        rows.append({"log": f"planner:{run_row['log_file'].removesuffix('.log')}", "vllm": run_row["vllm_version"],
                     "gpu": req.gpu.name, "block_size": bs, "log_blocks": implied, "kvplan_blocks": r.kv.num_gpu_blocks,
                     "range": (lo, hi), "exact": implied is not None and lo <= implied <= hi})
    return rows


def _replanned(selected, overrides):
    """(prefix, log file, its text, the parsed log, the GPU, the printed version, the plan) for each case in
    ``selected``, planned with ``overrides(prefix)`` over the case's own flags: a what-if's rows."""
    for prefix, model, gpu, version, engine, flags, _family in CASES:
        if prefix not in selected:
            continue
        path = next(LOGS.glob(prefix + "-*.log"))
        text = path.read_text()
        g = custom_gpu(int(gpu * GIB), f"{gpu} GiB") if isinstance(gpu, float) else find_gpu(gpu)
        kw = {"vllm_version": version, "engine": engine, **flags, **overrides(prefix)}
        yield prefix, path, text, parse_startup_log(text), g, version, plan(PlanRequest(_spec(model), g, **kw),
                                                                              what_ifs=False)


def _vendor_build_what_if() -> list[dict]:
    builds = vendor_builds()
    rows = []
    for prefix, path, text, log, g, version, r in _replanned(builds, lambda p: {"vllm_version": builds[p][0]}):
        measured = _measured_gib(prefix, path.name, log, r)
        est = r.memory.available_kv_cache_gib
        rows.append({"log": path.name, "printed": version, "as": builds[prefix][0], "measured_gib": measured,
                     "kvplan_gib": round(est, 2), "error_gib": round(est - measured, 2),
                     "error_pct": round((est - measured) / (measured if measured >= 1.0 else g.memory_gib) * 100, 1),
                     "verdict_right": _verdict_right(r, log, text)})
    return rows


def _install_unsaid_what_if() -> list[dict]:
    rows = []
    for prefix, path, text, log, _g, _version, r in _replanned(INSTALL_FROM_LOG, lambda p: {}):
        measured = min(log.available_kv_gib)
        est = r.memory.available_kv_cache_gib
        rows.append({"log": path.name, "measured_gib": measured, "kvplan_gib": round(est, 2),
                     "error_gib": round(est - measured, 2), "verdict_right": _verdict_right(r, log, text),
                     "why": INSTALL_FROM_LOG[prefix]})
    return rows


if __name__ == "__main__":
    main()
