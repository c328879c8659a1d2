"""kvplan's estimate-only error on KV memory, against real vLLM start-up logs.

For every public log in tests/fixtures/vllm_logs whose GPU size, model and flags are known, kvplan
plans the start-up *without* the log's measurement and compares its "Available KV cache memory"
with the one vLLM printed. Usage:

    .venv/bin/python benchmarks/plan_accuracy.py [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from kvplan.hardware import GIB, custom_gpu, find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.memory.startup_log import parse_startup_log
from kvplan.models import load_model, spec_from_config

LOGS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "vllm_logs"

R1_DISTILL_1_5B = {  # deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B config.json (Qwen2 architecture)
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960,
    "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
    "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    "use_sliding_window": False, "sliding_window": 4096,
}


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


# (log prefix, model id or config, GPU name or total GiB, vLLM version, engine, plan flags)
CASES = [
    ("01", "meta-llama/Llama-3.1-8B-Instruct", 23.58, "0.6.4", None, dict(max_model_len=20000, gpu_memory_utilization=0.9)),
    ("02", "meta-llama/Llama-3.1-8B-Instruct", 23.58, "0.6.4", None, dict(max_model_len=29000, gpu_memory_utilization=0.9)),
    ("04", "meta-llama/Meta-Llama-3-8B", 79.22, "0.6.4", None, dict(gpu_memory_utilization=0.9)),
    ("05", _qwen72_gptq, 47.74, "0.6.4", None, dict(max_model_len=8192, gpu_memory_utilization=0.95)),
    ("06", R1_DISTILL_1_5B, 7.75, "0.7.3", "V0", dict(max_model_len=2000, gpu_memory_utilization=0.9)),
    ("10", _qwen3_30b_w4a16, 23.56, "0.8.5", "V0", dict(max_num_seqs=8, gpu_memory_utilization=0.9)),
    ("14", "deepseek-ai/DeepSeek-V2-Lite", "L4", "0.9.2", None,
     dict(tensor_parallel_size=2, pipeline_parallel_size=2, max_model_len=1024)),
    ("16", "openai/gpt-oss-120b", "H100", "0.10.1", None, dict()),
    ("19", "openai/gpt-oss-120b", "H100", "0.11", None,
     dict(gpu_memory_utilization=0.95, max_num_batched_tokens=1024, max_model_len=131072)),
]


def _spec(model):
    if callable(model):
        model = model()
    if isinstance(model, dict):
        return spec_from_config(model, "benchmark", name="benchmark-model")
    return load_model(model)


def run() -> list[dict]:
    rows = []
    for prefix, model, gpu, version, engine, flags in CASES:
        path = next(LOGS.glob(prefix + "-*.log"))
        log = parse_startup_log(path.read_text())
        measured = min(log.available_kv_gib)
        g = custom_gpu(int(gpu * GIB), f"{gpu} GiB") if isinstance(gpu, float) else find_gpu(gpu)
        r = plan(PlanRequest(_spec(model), g, vllm_version=version, engine=engine, **flags), what_ifs=False)
        est = r.memory.available_kv_cache_gib
        rows.append({"log": path.name, "vllm": version, "model": r.model.id, "gpu_gib": round(g.memory_gib, 2),
                     "measured_gib": measured, "kvplan_gib": round(est, 2), "error_gib": round(est - measured, 2),
                     "error_pct_of_gpu": round((est - measured) / g.memory_gib * 100, 2),
                     "weights_gib": round(r.memory.weights_gib_per_gpu, 2),
                     "log_weights_gib": log.model_loading_gib})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    rows = run()
    if parser.parse_args().json:
        json.dump(rows, sys.stdout, indent=2)
        return
    print(f"{'log':48s} {'vLLM':6s} {'GPU':>6s} {'vLLM KV':>8s} {'kvplan':>8s} {'error':>7s} {'%GPU':>6s} "
          f"{'weights':>8s} {'(log)':>7s}")
    for r in rows:
        lw = f"{r['log_weights_gib']:.2f}" if r["log_weights_gib"] else "-"
        print(f"{r['log']:48s} {r['vllm']:6s} {r['gpu_gib']:6.2f} {r['measured_gib']:8.2f} {r['kvplan_gib']:8.2f} "
              f"{r['error_gib']:+7.2f} {r['error_pct_of_gpu']:+6.2f} {r['weights_gib']:8.2f} {lw:>7s}")
    errs = [abs(r["error_gib"]) for r in rows]
    pct = [abs(r["error_pct_of_gpu"]) for r in rows]
    print(f"\n{len(rows)} logs: median |error| {statistics.median(errs):.2f} GiB, max {max(errs):.2f} GiB; "
          f"median {statistics.median(pct):.2f}% of GPU memory, max {max(pct):.2f}%")


if __name__ == "__main__":
    main()
