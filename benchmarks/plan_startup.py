"""Cold-start time of `kvplan plan --format json` (issue #2: aim under 0.3 s).

Runs the installed console script 10 times in fresh processes and prints the median, min and
max wall time and the median CPU time (user + sys of the child: what the machine's other jobs
do not inflate), plus Python's own start-up on this machine for scale. Usage:

    .venv/bin/python benchmarks/plan_startup.py [--runs 10] [--against REV]

``--against REV`` measures a git revision's ``src/`` side by side with this checkout's, in one
run: both as ``python -m kvplan.cli.main`` with ``PYTHONPATH`` at each tree, the runs interleaved
(A, B, A, B, ...) so that the machine's load falls on both alike, and prints the ratio.

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


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """(wall s, CPU s of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=ENV if env is None else env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def side_by_side(rev: str, runs: int) -> None:
    """This checkout's src/ against ``rev``'s, interleaved."""
    import tempfile

    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="kvplan-startup-") as tmp:
        git, tar = shutil.which("git") or "/usr/bin/git", shutil.which("tar") or "/usr/bin/tar"
        data = subprocess.run([git, "-C", str(repo), "archive", rev, "src"], check=True, capture_output=True).stdout
        subprocess.run([tar, "-x", "-C", tmp], input=data, check=True)
        trees = {rev: Path(tmp) / "src", "this checkout": repo / "src"}
        cmds = {}
        for label, src in trees.items():
            compileall.compile_dir(str(src / "kvplan"), quiet=1)
            env = dict(ENV, PYTHONPATH=str(src))
            cmds[label] = ([sys.executable, "-m", "kvplan.cli.main", *ARGS], env)
        samples: dict[str, list] = {label: [] for label in trees}
        for label, (cmd, env) in cmds.items():  # warm the page cache
            timed(cmd, env)
        for _ in range(runs):
            for label, (cmd, env) in cmds.items():
                samples[label].append(timed(cmd, env))
    medians = {}
    for label, got in samples.items():
        walls = [w for w, _ in got]
        medians[label] = (statistics.median(walls), statistics.median(c for _, c in got))
        print(f"{label:>14}: kvplan plan --format json: median {medians[label][0] * 1000:.0f} ms "
              f"(min {min(walls) * 1000:.0f}, max {max(walls) * 1000:.0f}), CPU {medians[label][1] * 1000:.0f} ms")
    (wa, ca), (wb, cb) = medians[rev], medians["this checkout"]
    print(f"this checkout / {rev}: wall {wb / wa:.3f}, CPU {cb / ca:.3f} over {runs} interleaved runs each; "
          f"load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--against", metavar="REV", help="measure this git revision's src/ side by side")
    args = parser.parse_args()
    runs = args.runs
    if args.against:
        side_by_side(args.against, runs)
        return
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
