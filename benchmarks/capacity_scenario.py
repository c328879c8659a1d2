"""The README scenario's capacity answer from every front end, side by side (issue 28's must-show):
Llama-2-70B, 50 req/s, prompts 800-1,200 and 512 output tokens, TTFT P99 <= 2 s; per GPU type (A100,
H100) at TP 4 with vLLM's defaults (fp16 KV, gpu_memory_utilization 0.9), under one load balancer.

The four front ends read one request log (written here: the scenario's lengths as server-reported
usage, so ``preflight`` can read it too) and must give the same GPU count:

- ``kvplan simulate --requests LOG --rate 50 --find-saturation`` (replicas needed at --rate);
- ``kvplan tune --requests LOG --rate 50 --gpus auto --tp 4`` (per GPU type);
- ``kvplan preflight --requests LOG --target-qps 50 --dry-run`` (load_queue's sized fix, "for the target");
- the page's ``POST /api/tune`` (kvplan.ui.api.tune_json, the argv the sizing view sends).

Run (minutes; under the shared lock): ``python benchmarks/capacity_scenario.py [--load-balancer round_robin]``
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = "meta-llama/Llama-2-70b-chat-hf"
COMMON = ["--max-model-len", "2048", "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "auto"]


def write_log(path: Path, n: int = 1000, seed: int = 0) -> None:
    rng = random.Random(seed)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"timestamp": 1_700_000_000 + i * 0.02,
                                "usage": {"prompt_tokens": rng.randint(800, 1200), "completion_tokens": 512}}) + "\n")


def kvplan(*args: str) -> tuple[dict, float]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args, "--format", "json"], capture_output=True,
                       text=True, env=dict(os.environ, KVPLAN_OFFLINE="1"))
    if not p.stdout.strip():
        raise SystemExit(f"kvplan {' '.join(args)} failed: {p.stderr}")
    return json.loads(p.stdout), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--load-balancer", default="vllm")
    ap.add_argument("--rate", default="50")
    ap.add_argument("--gpus", default="A100-80GB,H100")
    args = ap.parse_args()
    lb = args.load_balancer
    tmp = Path(tempfile.mkdtemp(prefix="kvplan-capacity-"))
    log = tmp / "scenario.jsonl.gz"
    write_log(log)
    traffic = ["--requests", str(log), "--slo", "ttft_p99=2s"]
    rows = []
    for gpu in args.gpus.split(","):
        sim, t_sim = kvplan("simulate", "--model", MODEL, "--gpu", gpu, "-tp", "4", *COMMON, *traffic,
                            "--rate", args.rate, "--find-saturation", "--load-balancer", lb)
        tune, t_tune = kvplan("tune", "--model", MODEL, "--gpu", gpu, "--gpus", "auto", "--tp", "4", *COMMON,
                              "--max-num-seqs", "default", *traffic, "--rate", args.rate, "--load-balancer", lb,
                              "--coverage", "100")
        pre, t_pre = kvplan("preflight", "--model", MODEL, "--gpu", gpu, "-tp", "4", *COMMON, *traffic,
                            "--target-qps", args.rate, "--dry-run", "--load-balancer", lb, "--duration", "60s")
        from kvplan.ui import api

        t0 = time.perf_counter()
        page = api.tune_json(["--model", MODEL, "--gpu", gpu, "--gpus", "auto", "--tp", "4", *COMMON,
                              "--max-num-seqs", "default", "--requests", str(log), "--slo", "ttft_p99=2s",
                              "--rate", args.rate, "--load-balancer", lb, "--coverage", "100"])
        t_page = time.perf_counter() - t0
        fix = next((f for c in pre["checks"] for f in c.get("fixes", [])
                    if f.get("numbers", {}).get("gpus_for_target")), None)
        rows.append((gpu, sim.get("sizing", {}).get("gpus"), tune["per_gpu_type"][0]["gpus"],
                     fix["numbers"]["gpus_for_target"] if fix else None, page["per_gpu_type"][0]["gpus"],
                     (t_sim, t_tune, t_pre, t_page)))
    print(f"# {MODEL}, {args.rate} req/s, TTFT p99 <= 2 s, TP 4, load balancer {lb} (the same request log)")
    print(f"{'GPU type':16} {'simulate':>9} {'tune':>6} {'preflight':>10} {'page':>6}   seconds (sim/tune/preflight/page)")
    for gpu, a, b, c, d, ts in rows:
        print(f"{gpu:16} {a!s:>9} {b!s:>6} {c!s:>10} {d!s:>6}   " + " / ".join(f"{t:.1f}" for t in ts))


if __name__ == "__main__":
    main()
