"""Cold-start time of `kvplan plan --format json` (issue #2: aim under 0.3 s).

Runs the installed console script 10 times in fresh processes and prints the median, min and
max wall time, plus Python's own start-up on this machine for scale. Usage:

    .venv/bin/python benchmarks/plan_startup.py [--runs 10]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ARGS = ["plan", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4",
        "--max-model-len", "2048", "--format", "json"]


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    exe = shutil.which("kvplan", path=str(Path(sys.executable).parent)) or "kvplan"
    timed([exe, *ARGS])  # warm the page cache: "cold" means a new process, not a cold disk
    samples = [timed([exe, *ARGS]) for _ in range(runs)]
    bare = statistics.median(timed([sys.executable, "-c", "pass"]) for _ in range(runs))
    print(f"kvplan plan --format json: median {statistics.median(samples) * 1000:.0f} ms "
          f"(min {min(samples) * 1000:.0f}, max {max(samples) * 1000:.0f}) over {runs} runs; "
          f"python -c pass: {bare * 1000:.0f} ms; target 300 ms")


if __name__ == "__main__":
    main()
