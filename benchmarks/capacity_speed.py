"""Issue 28's speed table, today's code beside this tree's in one run (each in its own process):

- the page's sizing answer for the README scenario (Llama-2-70B, 50 req/s, prompts 800-1,200, 512
  output tokens, TTFT P99 <= 2 s; A100 and H100, up to 128 GPUs): this tree's ``POST /api/tune``
  (``tune --gpus auto``) against what today's code needs for the same question (``tune --gpus
  4,8,...,128 --objective min_gpus``, no per-type answer), under a time limit;
- the 200-configuration sweep and 1,000,000 simulated requests of ``benchmarks/sim_speed.py`` (this
  tree as built: ``make native`` compiles the simulator, ``KVPLAN_NATIVE=0`` runs it interpreted).

    python benchmarks/capacity_speed.py --before <a source tree of today's main> [--limit 600]

Prints numbers; asserts nothing. Run it under the shared lock (minutes).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

SIZE_AFTER = r'''
import time
from kvplan.ui import api
t0 = time.perf_counter()
d = api.tune_json(["--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB,H100", "--gpus", "auto",
                   "--max-gpus", "128", "--rate", "50", "--input-len", "uniform:800,1200", "--output-len", "512",
                   "--slo", "ttft_p99=2s", "--max-num-seqs", "default", "--gpu-memory-utilization", "0.9",
                   "--load-balancer", LB])
print("RESULT", round(time.perf_counter() - t0, 2), [(s["gpu"], s["gpus"]) for s in d["per_gpu_type"]])
'''

SIZE_BEFORE = r'''
import time, subprocess, sys, json
t0 = time.perf_counter()
p = subprocess.run([sys.executable, "-m", "kvplan.cli.main", "tune", "--model", "meta-llama/Llama-2-70b-chat-hf",
                    "--gpu", "A100-80GB,H100", "--gpus", ",".join(str(4 * k) for k in range(1, 33)),
                    "--rate", "50", "--input-len", "uniform:800,1200", "--output-len", "512", "--slo", "ttft_p99=2s",
                    "--max-num-seqs", "default", "--gpu-memory-utilization", "0.9", "--objective", "min_gpus",
                    "--format", "json"], capture_output=True, text=True)
w = json.loads(p.stdout).get("winner") or {}
print("RESULT", round(time.perf_counter() - t0, 2), [(w.get("flags", {}).get("gpu"), w.get("gpus"))])
'''

SWEEP = r'''
import time, sys
sys.path.insert(0, "benchmarks")
import sim_speed
t0 = time.perf_counter()
sim_speed.sweep(1000, 2.0)
print("RESULT", round(time.perf_counter() - t0, 2), "")
'''

MILLION = r'''
import time, sys
sys.path.insert(0, "benchmarks")
import sim_speed
from kvplan.sim import simulate
req, pr = sim_speed._setup()
tr = sim_speed._trace(1_000_000, 50.0)
t0 = time.perf_counter()
res = simulate(req, tr, plan_result=pr)
wall = round(time.perf_counter() - t0, 2)
try:
    from kvplan._native import STATE
except ImportError:  # a tree from before the native build
    STATE = "interpreted"
print("RESULT", wall, res.engine["steps"], "steps,", STATE)
'''


def run(tree: Path, code: str, limit: float) -> tuple[str, str]:
    """(wall seconds of the measured part, what it answered + the whole process's CPU seconds: on a
    shared machine the CPU time is the steadier figure)."""
    import resource

    env = dict(os.environ, PYTHONPATH=str(tree / "src"), KVPLAN_OFFLINE="1")
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        p = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                           timeout=limit)
    except subprocess.TimeoutExpired:
        return f"> {limit:.0f}", "timed out"
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")), None)
    if line is None:
        return f"{time.perf_counter() - t0:.1f} (failed)", (p.stderr.strip().splitlines() or ["?"])[-1][:100]
    _, wall, rest = line.split(" ", 2)
    return wall, f"{rest} (process CPU {cpu:.1f} s)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a checkout of today's code (its src/ is used)")
    ap.add_argument("--limit", type=float, default=600.0, help="seconds per measurement")
    ap.add_argument("--load-balancer", default="vllm")
    ap.add_argument("--skip", default="", help="comma list of: sizing,sweep,million")
    args = ap.parse_args()
    before, after = Path(args.before).resolve(), HERE
    skip = set(filter(None, args.skip.split(",")))
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    rows = []
    if "sizing" not in skip:
        rows.append(("sizing answer (A100 + H100, <= 128 GPUs)", run(before, SIZE_BEFORE, args.limit),
                     run(after, SIZE_AFTER.replace("LB", repr(args.load_balancer)), args.limit)))
    if "sweep" not in skip:
        rows.append(("200-configuration sweep", run(before, SWEEP, args.limit), run(after, SWEEP, args.limit)))
    if "million" not in skip:
        rows.append(("1,000,000 requests", run(before, MILLION, args.limit), run(after, MILLION, args.limit)))
    print(f"{'':44} {'today (s)':>12} {'this tree (s)':>14} {'ratio':>7}")
    for name, (b, bi), (a, ai) in rows:
        try:
            ratio = f"{float(b.split()[-1]) / float(a.split()[0]):.2f}x"
        except ValueError:
            ratio = "-"
        print(f"{name:44} {b:>12} {a:>14} {ratio:>7}   today: {bi}; this tree: {ai}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
