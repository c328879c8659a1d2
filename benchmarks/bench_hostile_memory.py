"""Peak memory of `kvplan bench` against the FAKE server's hostile modes, side by side with the same
run against a well-behaved fake (kvplan.bench.fake_server; 127.0.0.1, bounded, stops by itself).

    python benchmarks/bench_hostile_memory.py [--src DIR] [--concurrency 4] [--timeout 8s]

``--src`` runs the bench client of another checkout (e.g. an older main) against this checkout's
fake, to measure what the caps changed; the client runs under a 6 GiB address-space limit so an
uncapped one cannot take the machine. Prints one line per mode: peak resident memory (the bench
process's ru_maxrss), wall time, and the error classes of the result file.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "src"
MODES = [("normal", ()), ("endless_event", ()), ("endless_body", ("--no-stream",)), ("overlong", ())]


def measure(src: str, mode: str, extra: tuple, concurrency: int, timeout: str) -> str:
    fake = subprocess.Popen([sys.executable, "-m", "kvplan.bench.fake_server", "--port", "0", "--max-lifetime", "120",
                             "--mode", mode], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(HERE)))
    try:
        port = int(fake.stdout.readline().split()[1])
        env = dict(os.environ, PYTHONPATH=src)
        env.pop("OPENAI_API_KEY", None)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            t0 = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, "-m", "kvplan.cli.main", "bench", "--url", f"http://127.0.0.1:{port}", "--concurrency",
                 str(concurrency), "--max-requests", str(concurrency), "--output-len", "16", "--no-metrics",
                 "--timeout", timeout, "--no-progress", "--output", str(out), *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30)))
            _, _, usage = os.wait4(proc.pid, 0)
            took = time.monotonic() - t0
            err = proc.stderr.read()
            proc.stderr.close()
            errors = json.loads(out.read_text())["errors"] if out.exists() else f"no result: {err.strip()[-120:]}"
    finally:
        fake.kill()
        fake.wait()
        fake.stdout.close()
    return f"{mode:14s} peak RSS {usage.ru_maxrss / 1024:7.0f} MB  {took:5.1f} s  errors {errors}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=str(HERE), help="the src/ folder whose bench client runs")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--timeout", default="8s")
    args = ap.parse_args()
    print(f"kvplan bench from {args.src}, --concurrency {args.concurrency} --timeout {args.timeout}")
    for mode, extra in MODES:
        print(measure(args.src, mode, extra, args.concurrency, args.timeout), flush=True)


if __name__ == "__main__":
    main()
