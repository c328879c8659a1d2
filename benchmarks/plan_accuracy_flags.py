"""Public start-up figures of vLLM runs with speculative decoding or LoRA, kept as figures.

plan_accuracy.py scores the logs in tests/fixtures/vllm_logs; the runs here were published as files
in repositories that name no licence (or as a JSON summary of the log), so only the figures vLLM
printed are kept, with the path and commit they were read at. Each becomes a row of plan_accuracy's
"flags" set, scored like a log: kvplan plans the start-up from the stated flags without the
measurement, and the error is its "Available KV cache memory" against the printed one (or, where
only a token count is printed, that count's blocks x kvplan's bytes per block, as plan_accuracy
does for the early V1 logs). A run may name ``control``: the same server started without the
flag, printed in the same source, so the flag's own effect on the KV cache (vLLM's difference and
kvplan's) is reported beside the absolute error. Nothing is fitted to these runs.
"""
from __future__ import annotations

from kvplan.hardware import GIB, custom_gpu, find_gpu
from kvplan.memory import PlanRequest, plan

VLLM_LAB = "https://github.com/yuanjuju/vllm-lab/blob"
SLO_LAB = "https://github.com/kuotunyu/vllm-single-gpu-slo-lab/blob"
EAGLE3_HW = "https://github.com/dcstang/eagle3-spec-dec/blob/097df086ddb44f061d86b48ecbac48ddc9407b54/logs/run_all_20260701_134859.log"
EAGLE3_0627 = "https://github.com/dcstang/eagle3-spec-dec/blob/73a1c9eed83e5b77e80d0a4fdebbe357bea3acc0/logs/run_all_20260627_171212.log"
_QWEN3_8B_LAB = dict(max_model_len=4096, gpu_memory_utilization=0.75, max_num_batched_tokens=4096, max_num_seqs=8,
                     enforce_eager=True)
_NGRAM4 = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
_SLO_LAB = dict(max_model_len=4096, gpu_memory_utilization=0.9, max_num_seqs=64)
# dcstang/eagle3-spec-dec: vLLM 0.24.0 on one Hopper GPU ("FlashAttention version 3"; 55.44 GiB of KV
# memory beside 15.27 GiB of weights at the default 0.9 is an 80 GB one), --performance-mode throughput
# (printed: "max_num_batched_tokens=16384"), max model len 40,960 from the config; the EAGLE-3 head is the
# repository's own (vllm-project/speculators, --draft-arch qwen3), whose config.json is not published:
# kvplan sizes it as its derived head (0.74 GiB), the log loads 0.51 GiB beside the target
_EAGLE3_HW = dict(max_num_batched_tokens=16384)


def _qwen3_8b_fp8_dynamic() -> dict:
    """Qwen3-8B-FP8-Dynamic as that repository's scripts/04_quantize_fp8.py writes it with llm-compressor's
    FP8_DYNAMIC scheme: per-channel fp8 weights, dynamic per-token activations, the LM head left in bf16
    (8.84 GiB logged, 8.80 planned)."""
    from kvplan.models import load_model

    return {**load_model("Qwen/Qwen3-8B").raw, "quantization_config": {
        "quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"],
                                      "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                                      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                                            "dynamic": True}}}}}

FLAG_RUNS = [
    {
        "name": "vllm-lab:spec_ngram_ngram_r570_v018",
        "source": f"{VLLM_LAB}/b71c05fae143b011899c3049419af61636f7d56d/phase3/results/spec_ngram_ngram_r570_v018_20261009.log",
        "model": "Qwen/Qwen3-8B", "vllm": "0.18.0", "family": "dense",
        # the 0.18 log prints no total; the same lab's 0.29 logs on its "RTX 4090 48GB" print
        # "Free memory on device (46.99/47.37 GiB)", and the 0.18 node's nvidia-smi showed 36,434 MiB
        # in use at 0.75 (docs/cloud-r570-workaround-20261008.md): 35.58 / 0.75 = 47.4 GiB
        "gpu_gib": 47.37,
        "flags": {**_QWEN3_8B_LAB, "speculative_config": _NGRAM4},
        "kv_gib": 19.76, "kv_tokens": 143872, "weights_gib": 15.27,
        # spec_ngram_baseline_r570_v018_20261009.log, the same flags without --speculative-config
        "control": {"source": f"{VLLM_LAB}/b71c05fae143b011899c3049419af61636f7d56d/phase3/results/"
                              "spec_ngram_baseline_r570_v018_20261009.log", "kv_gib": 19.76},
    },
    {
        "name": "vllm-lab:phase5_v029_ngram",
        "source": f"{VLLM_LAB}/d3cdc89a3904b04f575abbd873746af6a71f2e88/phase3/results/phase5_v029_ngram_20261009.log",
        "model": "Qwen/Qwen3-8B", "vllm": "0.29.0", "family": "dense",
        "gpu_gib": 47.37,  # printed: "Free memory on device (46.99/47.37 GiB) on startup"
        "flags": {**_QWEN3_8B_LAB, "speculative_config": _NGRAM4},
        "kv_gib": 19.71, "kv_tokens": 143536, "weights_gib": 15.27,
        # (phase5_v029_a3_ngram_20261010.log repeats this run to the digit; it is not counted twice)
    },
    {
        "name": "slo-lab:w1 q4b_eagle3",
        "source": f"{SLO_LAB}/2c7a3f72211c029d4c7fbf90f1e14ac452cb7a0a/evidence/raw/w1/matrix-load-check.jsonl",
        "model": "Qwen/Qwen3-4B", "vllm": "0.28.0", "family": "dense",
        # an RTX 4090 under WSL2 (the lab's ADR 0004 on this matrix: "4090／WSL2"); the record prints "v0.28.0"
        "gpu": "RTX-4090",
        "flags": {**_SLO_LAB, "speculative_config": {"method": "eagle3", "model": "AngelSlim/Qwen3-4B_eagle3",
                                                     "num_speculative_tokens": 3}},
        "kv_tokens": 83952, "weights_gib": 7.97,
        # the same matrix's q4b row: Qwen3-4B alone, same flags, same card, minutes earlier
        "control": {"source": "the same file, label q4b", "kv_tokens": 90480, "weights_gib": 7.56},
    },
    {
        "name": "eagle3-spec-dec:05b bench_spec_dec",
        "source": EAGLE3_HW + " (step 05b)",
        "model": "Qwen/Qwen3-8B", "vllm": "0.24.0", "family": "dense", "gpu": "H100",
        "flags": {**_EAGLE3_HW, "speculative_config": {"method": "eagle3", "model": "output/checkpoints/4",
                                                       "num_speculative_tokens": 2}},
        "kv_gib": 54.23, "kv_tokens": 384176, "weights_gib": 15.78,
        "control": {"source": "the same log, step 05a bench_baseline", "kv_gib": 55.44, "weights_gib": 15.27},
    },
    {
        "name": "eagle3-spec-dec:05b util 0.88, fp8 KV",
        "source": EAGLE3_HW.replace("run_all_20260701_134859", "run_all_20260701_141721") + " (step 05b)",
        "model": "Qwen/Qwen3-8B", "vllm": "0.24.0", "family": "dense", "gpu": "H100",
        "flags": {**_EAGLE3_HW, "gpu_memory_utilization": 0.88, "kv_cache_dtype": "fp8",
                  "speculative_config": {"method": "eagle3", "model": "output/checkpoints/4",
                                         "num_speculative_tokens": 2}},
        "kv_gib": 51.03, "kv_tokens": 723040, "weights_gib": 15.81,
    },
    {
        # the same repository's run of 27 June on vLLM 0.20.0 (the V1 model runner): defaults but the head
        "name": "eagle3-spec-dec:0.20 bench_spec_dec",
        "source": EAGLE3_0627 + " (step 05b)",
        "model": "Qwen/Qwen3-8B", "vllm": "0.20.0", "family": "dense", "gpu": "H100",
        "flags": {"speculative_config": {"method": "eagle3", "model": "output/checkpoints/4", "num_speculative_tokens": 2}},
        "kv_gib": 51.73, "kv_tokens": 366480, "weights_gib": 15.78,
    },
    {
        "name": "eagle3-spec-dec:0.20 bench_fp8_spec",
        "source": EAGLE3_0627 + " (step 05d)",
        "model": _qwen3_8b_fp8_dynamic, "vllm": "0.20.0", "family": "quantized", "gpu": "H100",
        "flags": {"speculative_config": {"method": "eagle3", "model": "output/checkpoints/4", "num_speculative_tokens": 1}},
        "kv_gib": 58.18, "kv_tokens": 412192, "weights_gib": 9.32,
        "control": {"source": "the same log, step 05c bench_fp8", "kv_gib": 61.04, "weights_gib": 8.80},
    },
    {
        "name": "eagle3-spec-dec:05d bench_fp8_spec",
        "source": EAGLE3_HW + " (step 05d)",
        "model": _qwen3_8b_fp8_dynamic, "vllm": "0.24.0", "family": "quantized", "gpu": "H100",
        "flags": {**_EAGLE3_HW, "speculative_config": {"method": "eagle3", "model": "output/checkpoints/4",
                                                       "num_speculative_tokens": 1}},
        "kv_gib": 60.66, "kv_tokens": 429744, "weights_gib": 9.35,
        "control": {"source": "the same log, step 05c bench_fp8", "kv_gib": 61.87, "weights_gib": 8.84},
    },
]


def _gpu(run: dict):
    return custom_gpu(int(run["gpu_gib"] * GIB), f"{run['gpu_gib']} GiB") if "gpu_gib" in run else find_gpu(run["gpu"])


def _measured(figures: dict, r) -> float:
    if "kv_gib" in figures:
        return figures["kv_gib"]
    return round(figures["kv_tokens"] // r.kv.block_size * r.kv.bytes_per_block / GIB, 2)


def flag_rows() -> list[dict]:
    """plan_accuracy rows (set "flags") for FLAG_RUNS, with the control's difference where there is one."""
    from kvplan.models import load_model, spec_from_config

    rows = []
    for run in FLAG_RUNS:
        model = run["model"]
        spec = spec_from_config(model(), "benchmark", name=model.__name__) if callable(model) else load_model(model)
        gpu = _gpu(run)
        r = plan(PlanRequest(spec, gpu, vllm_version=run["vllm"], **run["flags"]), what_ifs=False)
        measured, est = _measured(run, r), r.memory.available_kv_cache_gib
        row = {"log": run["name"], "vllm": run["vllm"], "family": run["family"], "set": "flags",
               "excluded_because": None, "model": r.model.id, "gpu_gib": round(gpu.memory_gib, 2),
               "tp": r.parallel.tensor_parallel_size, "measured_gib": measured, "kvplan_gib": round(est, 2),
               "error_gib": round(est - measured, 2), "error_pct": round((est - measured) / measured * 100, 2),
               "verdict_right": bool(r.startup.ok), "weights_gib": round(r.memory.loaded_gib, 2),
               "log_weights_gib": run.get("weights_gib"), "source": run["source"]}
        control = run.get("control")
        if control:
            flags = {k: v for k, v in run["flags"].items() if k not in ("speculative_config", "enable_lora")}
            base = plan(PlanRequest(spec, gpu, vllm_version=run["vllm"], **flags), what_ifs=False)
            row["flag_effect_logged_gib"] = round(measured - _measured(control, base), 2)
            row["flag_effect_kvplan_gib"] = round(est - base.memory.available_kv_cache_gib, 2)
        rows.append(row)
    return rows
