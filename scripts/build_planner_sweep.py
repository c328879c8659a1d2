"""Rebuild benchmarks/data/llm_d_planner_h100.csv: the measured start-up figures of
llm-d-planner's own vLLM 0.19.0 sweep on one H100 80GB (59 runs that started, 34 models), with the
peer's own prediction of each, for benchmarks/plan_accuracy.py.

Source: llm-d-incubation/llm-d-planner (Apache-2.0), commit d3121e059da88662db39a926a3ead964be97359b
("Add logs", 2026-04-22, on a pull-request ref), files accuracy/results/v0.19.0/results_raw.csv (their
parser's reading of each log), results_predicted.csv (their planner's prediction) and logs/*.log (the
full DEBUG-level start-up logs). Every row's measured figures are checked here against its log's own
printed lines ("Available KV cache memory: X GiB", "Model loading took X GiB", the non-default args);
a row whose log disagrees stops the build. kv_cache_memory_gib is the first rank's printed figure;
kv_cache_memory_min_gib the smallest over all the run's workers, which vLLM sizes the blocks by (they
differ with pipeline parallelism, where the last stage also runs the sampler). Only figures are copied, no log text. The same commit's
accuracy/results/version-sweep/runs/*.json (Qwen3-14B on one H100 with vLLM 0.15.0-0.18.0, their
parser's figures; the logs are not in the repository) are added as rows with
checked_against_log = no.

Usage: python scripts/build_planner_sweep.py /path/to/llm-d-planner/git-dir
(for example the mirror the `fetch` tool made: /work/.mirror/llm-d-incubation+llm-d-planner/repo).
"""
from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

COMMIT = "d3121e059da88662db39a926a3ead964be97359b"
BASE = "accuracy/results/v0.19.0"
OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "llm_d_planner_h100.csv"
COLUMNS = ("log_file", "vllm_version", "checked_against_log", "model", "tp", "pp", "max_model_len", "dtype", "quantization", "kv_cache_dtype",
           "gpu_memory_utilization", "init_total_memory_gib", "weights_memory_gib", "activation_memory_gib",
           "non_torch_forward_gib", "kv_cache_memory_gib", "kv_cache_memory_min_gib", "kv_cache_tokens",
           "peer_pred_kv_cache_memory_gib")
KEY = ("model", "tp", "pp", "dp", "max_model_len", "dtype", "quantization", "kv_cache_dtype", "gpu_memory_utilization")


def _show(repo: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{COMMIT}:{path}"], check=True, capture_output=True,
                          text=True, errors="replace").stdout


def _min_over_workers(text: str, log_file: str, printed: float) -> float:
    """The smallest KV memory of the run's workers, which vLLM sizes every worker's blocks by
    (get_kv_cache_configs: the smallest num_blocks of all ranks). 0.19.0 prints "Available KV cache
    memory" on the first rank only, so with PP (or TP) the other workers' figure is their requested
    memory less their "Total non KV cache memory" (gpu_worker.py's DEBUG lines, both in GiB to two
    decimals); the first rank's computed figure must match its printed one."""
    requested = {float(x) for x in re.findall(r"worker requested memory: ([0-9.]+)GiB", text)}
    non_kv = [float(x) for x in re.findall(r"Total non KV cache memory: ([0-9.]+)GiB", text)]
    if len(requested) != 1 or not non_kv:
        raise SystemExit(f"{log_file}: no single requested memory ({requested}) or no non-KV lines")
    (budget,) = requested
    available = [round(budget - x, 2) for x in non_kv]
    if all(abs(a - printed) > 0.011 for a in available):
        raise SystemExit(f"{log_file}: no worker's requested - non-KV ({available}) is the printed {printed}")
    # the first rank's own line stands for its figure (the two-decimal inputs can round 0.01 apart)
    return min([printed] + [a for a in available if abs(a - printed) > 0.011])


def _check_against_log(repo: str, row: dict) -> None:
    text = _show(repo, f"{BASE}/logs/{row['log_file']}")
    row["kv_cache_memory_min_gib"] = _min_over_workers(text, row["log_file"], float(row["kv_cache_memory_gib"]))
    kv = [float(x) for x in re.findall(r"Available KV cache memory: (-?[0-9.]+) GiB", text)]
    loading = [float(x) for x in re.findall(r"Model loading took ([0-9.]+) GiB", text)]
    if not kv or abs(min(kv) - float(row["kv_cache_memory_gib"])) > 1e-9:
        raise SystemExit(f"{row['log_file']}: the log prints {kv}, the CSV {row['kv_cache_memory_gib']}")
    if not loading or abs(loading[0] - float(row["weight_memory_gib"])) > 1e-9:
        raise SystemExit(f"{row['log_file']}: the log loads {loading}, the CSV {row['weight_memory_gib']}")
    args = re.search(r"non-default args: (\{.*\})", text)
    if not args or f"'model': '{row['model']}'" not in args.group(1):
        raise SystemExit(f"{row['log_file']}: the non-default args do not name {row['model']}")
    if f"version {row['_version']}" not in text:
        raise SystemExit(f"{row['log_file']}: no 'version {row['_version']}' banner")


def _version_sweep(repo: str) -> list[dict]:
    listing = subprocess.run(["git", "-C", repo, "ls-tree", "--name-only", f"{COMMIT}:accuracy/results/version-sweep/runs"],
                             check=True, capture_output=True, text=True).stdout.split()
    rows = []
    for name in sorted(listing):
        run = json.loads(_show(repo, f"accuracy/results/version-sweep/runs/{name}"))
        version = re.search(r"vllm-v(\d+)-(\d+)-(\d+)", name)
        args = run["vllm_args"]
        if not version or args["dtype"] != "auto" or args["quantization"] or args["kv_cache_dtype"] != "auto":
            raise SystemExit(f"{name}: not the plain sweep this script expects")
        rows.append({"log_file": name.replace(".json", ".log"), "vllm_version": ".".join(version.groups()),
                     "checked_against_log": "no", "model": run["model"], "tp": args["tensor_parallel_size"],
                     "pp": args["pipeline_parallel_size"], "max_model_len": args["max_model_len"],
                     "dtype": "torch.bfloat16", "quantization": "None", "kv_cache_dtype": "auto",
                     "gpu_memory_utilization": args["gpu_memory_utilization"], "init_total_memory_gib": "79.19",
                     "weights_memory_gib": run["weight_memory_gib"],
                     "activation_memory_gib": run["activation_memory_gib"],
                     "non_torch_forward_gib": run["non_torch_forward_memory_gib"],
                     "kv_cache_memory_gib": run["kv_cache_memory_gib"],
                     "kv_cache_memory_min_gib": run["kv_cache_memory_gib"],  # one GPU
                     "kv_cache_tokens": run["kv_cache_tokens"],
                     "peer_pred_kv_cache_memory_gib": ""})
    return rows


def main(repo: str) -> None:
    raw = list(csv.DictReader(io.StringIO(_show(repo, f"{BASE}/results_raw.csv"))))
    pred = list(csv.DictReader(io.StringIO(_show(repo, f"{BASE}/results_predicted.csv"))))
    peer = {tuple(p[k] for k in KEY): p["pred_kv_cache_memory_gib"] for p in pred}
    out = []
    for row in raw:
        # "ok" runs only: a failed run's log may stop before or after its KV line
        if row["status"] != "ok" or not row["kv_cache_memory_gib"]:
            continue
        row["_version"] = "0.19.0"
        _check_against_log(repo, row)
        out.append({**{c: row.get(c, "") for c in COLUMNS}, "weights_memory_gib": row["weight_memory_gib"],
                    "vllm_version": "0.19.0", "checked_against_log": "yes",
                    "peer_pred_kv_cache_memory_gib": peer.get(tuple(row[k] for k in KEY), "")})
    out += _version_sweep(repo)
    with OUT.open("w", newline="") as f:
        f.write(f"# llm-d-incubation/llm-d-planner@{COMMIT} {BASE} (Apache-2.0); "
                "rebuilt by scripts/build_planner_sweep.py; checked against each run's log\n")
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(out)
    print(f"{OUT}: {len(out)} runs")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/llm-d-incubation+llm-d-planner/repo")
