"""Cold-start time of `kvplan plan --format json` (issue #2: aim under 0.3 s).

Runs the installed console script 10 times in fresh processes and prints the median, min and
max wall time and the median CPU time (user + sys of the child: what the machine's other jobs
do not inflate), plus Python's own start-up on this machine for scale. Usage:

    .venv/bin/python benchmarks/plan_startup.py [--runs 10]

Bytecode: an installed kvplan runs from compiled ``.pyc`` files (pip compiles at install time);
an editable checkout on a machine with ``PYTHONDONTWRITEBYTECODE=1`` (as this one) would compile
every module on every start (~50 ms). The benchmark compiles the package once and lets the runs
read the bytecode, so it measures what a user's install does.
"""
from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import kvplan

ARGS = ["plan", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4",
        "--max-model-len", "2048", "--format", "json"]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    compileall.compile_dir(str(Path(kvplan.__file__).parent), quiet=1)
    exe = shutil.which("kvplan", path=str(Path(sys.executable).parent)) or "kvplan"
    timed([exe, *ARGS])  # warm the page cache: "cold" means a new process, not a cold disk
    samples = [timed([exe, *ARGS]) for _ in range(runs)]
    walls = [w for w, _ in samples]
    bare = statistics.median(timed([sys.executable, "-c", "pass"])[0] for _ in range(runs))
    load = os.getloadavg()[0]
    print(f"kvplan plan --format json: median {statistics.median(walls) * 1000:.0f} ms "
          f"(min {min(walls) * 1000:.0f}, max {max(walls) * 1000:.0f}) over {runs} runs, "
          f"CPU {statistics.median(c for _, c in samples) * 1000:.0f} ms; python -c pass: {bare * 1000:.0f} ms; "
          f"load average {load:.1f}; target 300 ms")


if __name__ == "__main__":
    main()
