"""VALIDATION for the GPU step-time model: published end-to-end vLLM results that are NOT in the
development set. Nothing here was used to fit anything; gpu_fidelity.py prints this table apart.

Sources:
- AIConfigurator's silicon corpus (github.com/ai-dynamo/aiconfigurator @095f58a51c4c,
  aic-core/src/aiconfigurator_core/systems/silicon_sample.csv, Apache-2.0): vLLM aggregated runs
  at fixed concurrency (isl, osl, concurrency, TP) with measured mean TTFT and TPOT; a deterministic
  subset of the H100/H200 rows whose models are in kvplan's catalog, in data/aic_silicon_vllm.csv.
  The rows do not state their traffic; it is taken from how AIConfigurator's own replay describes
  its measured points (an assumption, named in cases()).
- BLIS (github.com/inference-sim/inference-sim, commit a410740f, hypotheses/h-roofline/
  h1-bw-efficiency/FINDINGS.md, Apache-2.0): GuideLLM synchronous (concurrency 1) TPOTs on H100,
  as tabulated in /work/shared/reference/steptime-sources.md §2.3.
"""
from __future__ import annotations

import csv
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
GPU = {"h100_sxm": "H100", "h200_sxm": "H200"}
MODEL = {"Qwen/Qwen3-32B": ("Qwen/Qwen3-32B", []), "meta-llama/Llama-3.1-70B": ("meta-llama/Llama-3.1-70B", ["--quantization", "fp8"]),
         "nvidia/Llama-3.1-8B-Instruct-FP8": ("meta-llama/Llama-3.1-8B-Instruct", ["--quantization", "fp8"])}
#: The benchmark shape of the silicon rows (see cases()): InferenceMAX's client sends 10 x
#: concurrency prompts with lengths drawn in [0.8 L, L].
AIC_PROMPTS_PER_CONCURRENCY, AIC_RANGE_RATIO = 10, 0.8
#: (model, TP, mean context, measured TPOT s) - BLIS h1 FINDINGS, GuideLLM sync on H100
BLIS_SYNC = [("meta-llama/Llama-2-7b-hf", 1, 354, 0.0062), ("meta-llama/Llama-2-7b-hf", 1, 2076, 0.0081),
             ("meta-llama/Llama-2-7b-hf", 2, 354, 0.0044), ("meta-llama/Llama-2-7b-hf", 4, 354, 0.0032),
             ("codellama/CodeLlama-34b-hf", 2, 354, 0.0142), ("meta-llama/Llama-2-70b-hf", 4, 354, 0.0158),
             ("Qwen/Qwen3-14B", 1, 2076, 0.0143)]


def _rows():
    with open(HERE / "data" / "aic_silicon_vllm.csv", encoding="utf-8") as f:
        yield from csv.DictReader(line for line in f if not line.startswith("#"))


def cases() -> list[tuple[str, str, list, dict]]:
    out = []
    for r in _rows():
        model, extra = MODEL[r["model_path"]]
        c, isl, osl = int(r["batch_size"]), int(r["isl"]), int(r["osl"])
        argv = ["simulate", "--model", model, "--gpu", GPU[r["system"]], "-tp", r["tp_size"], *extra]
        if r["backend_version"]:
            argv += ["--vllm-version", r["backend_version"]]
        # The traffic of these runs as InferenceMAX's client sends it (its README: bench_serving/
        # benchmark_serving.py --random-range-ratio 0.8 --num-prompts CONC*10 --max-concurrency
        # CONC --request-rate inf --ignore-eos; server --max-num-batched-tokens 8192
        # --no-enable-prefix-caching), which AIConfigurator's replay of its measured points also
        # assumes (ai-dynamo/aisimulate scripts/e2e_accuracy: request_count 10 x concurrency,
        # random_range_ratio 0.8, seed 0). The Llama-3.1-70B rows are InferenceMAX's grid
        # (isl/osl 1024/1024, 1024/8192, 8192/1024); for the others it is an assumption. That
        # client draws lengths uniform in [0.8 L, L] (np.random.randint(int(L * 0.8), L + 1)),
        # vLLM's bench in [c(1 - r), c(1 + r)]: the same range with c = 0.9 L, r = 0.1 / 0.9.
        # Unequal lengths de-synchronise the closed loop: later requests arrive staggered.
        lo = AIC_RANGE_RATIO
        center_in, center_out = round(isl * (1 + lo) / 2), round(osl * (1 + lo) / 2)
        ratio = round((1 - lo) / (1 + lo), 4)
        argv += ["--dataset-name", "random", "--random-input-len", str(center_in), "--random-output-len",
                 str(center_out), "--random-range-ratio", str(ratio), "--seed", "0", "--max-concurrency", str(c),
                 "--num-prompts", str(AIC_PROMPTS_PER_CONCURRENCY * c), "--request-rate", "inf", "--ignore-eos",
                 "--max-num-batched-tokens", "8192", "--no-enable-prefix-caching"]
        out.append(("AIC silicon", f"{r['model_path']} {r['system']} TP{r['tp_size']} {isl}/{osl} c{c}",
                    argv + ["--format", "json"],
                    {"ttft": float(r["silicon_ttft_ms"]) / 1e3, "tpot": float(r["silicon_tpot_ms"]) / 1e3}))
    for model, tp, ctx, tpot in BLIS_SYNC:
        isl, osl = max(16, ctx - 128), 256
        argv = ["simulate", "--model", model, "--gpu", "H100", "-tp", str(tp)]
        argv += ["--dataset-name", "random", "--random-input-len", str(isl), "--random-output-len", str(osl),
                 "--max-concurrency", "1", "--num-prompts", "4", "--request-rate", "inf", "--ignore-eos"]
        out.append(("BLIS GuideLLM sync", f"{model} H100 TP{tp} ctx~{ctx} c1", argv + ["--format", "json"],
                    {"tpot": tpot}))
    return out


def run_validation(run_case) -> dict:
    print("\nVALIDATION (published results outside the dev set; never fitted)")
    errs: dict = {}
    for source, label, argv, meas in cases():
        try:
            d = run_case(argv)
        except Exception as exc:  # noqa: BLE001
            print(f"  {source:<19} {label:<58} failed: {exc}")
            continue
        parts = []
        gpu = argv[argv.index("--gpu") + 1]
        for m, v in meas.items():
            p = d["latency_s"][m]["mean"]
            e = p / v - 1.0
            errs.setdefault((source, gpu, m), []).append(abs(e))
            parts.append(f"{m} {p * 1e3:8.1f}/{v * 1e3:8.1f} ms {e * 100:+6.1f}%")
        print(f"  {source:<19} {label:<58} " + "  ".join(parts), flush=True)
    summary = {}
    print("  median |error|:")
    for (source, gpu, m), v in sorted(errs.items()):
        summary.setdefault(f"{source} / {gpu}", {})[m] = round(statistics.median(v), 4)
        summary[f"{source} / {gpu}"]["cases"] = len(v)
        print(f"    {source:<19} {gpu:<5} {m:<5} {statistics.median(v) * 100:5.1f}% ({len(v)})")
    return summary
