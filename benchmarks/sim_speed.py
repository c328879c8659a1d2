"""How fast ``kvplan simulate`` runs: wall time for the seed scenario (Llama-2-70B, 4x A100-80GB
TP 4, prompts uniform 800-1,200 tokens, 512 output tokens) at 10,000 requests, how it grows with the
trace (10k / 100k / 1M), and a 200-configuration ``kvplan tune`` sweep when kvplan.tune.search exists.

    .venv/bin/python benchmarks/sim_speed.py              # 10k, 100k, 1M + the sweep
    .venv/bin/python benchmarks/sim_speed.py --quick      # 10k only, 3 repeats
    .venv/bin/python benchmarks/sim_speed.py --against /path/to/other/checkout/src   # side by side

Prints numbers; asserts nothing (performance lives here, never in timed tests). Trace generation
(7 us per request: each request draws its lengths from its own seeded RNG, exactly as kvplan
bench does) is timed apart from the simulation.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time


def _setup(mml: int = 2048, gpu: str = "A100-80GB"):
    from kvplan.hardware import find_gpu
    from kvplan.memory import PlanRequest, plan
    from kvplan.models import load_model

    req = PlanRequest(model=load_model("meta-llama/Llama-2-70b-chat-hf"), gpu=find_gpu(gpu),
                      tensor_parallel_size=4, max_model_len=mml)
    return req, plan(req, what_ifs=False)


def _trace(n: int, rate: float = 50.0, seed: int = 0):
    from kvplan.sim import synthetic_trace

    try:
        from kvplan.traffic.lengthdist import parse_length
    except ImportError:  # a tree from before the traffic package (compared with --against)
        from kvplan.workload.lengthdist import parse_length

    return synthetic_trace(rate, num_requests=n, input_len=parse_length("uniform:800,1200", "x"),
                           output_len=parse_length("512", "x"), seed=seed)


def one(n: int, rate: float, repeats: int) -> None:
    from kvplan.sim import simulate

    req, pr = _setup()
    t0 = time.perf_counter()
    tr = _trace(n, rate)
    gen = time.perf_counter() - t0
    walls = []
    res = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = simulate(req, tr, plan_result=pr)
        walls.append(time.perf_counter() - t0)
    e = res.engine
    best = min(walls)
    print(f"{n:>9,} requests @ {rate:g} req/s: simulate {best:7.3f} s (median {statistics.median(walls):.3f} s "
          f"of {repeats}), {e['steps']:,} steps ({best / e['steps'] * 1e6:.1f} us/step, "
          f"{best / n * 1e6:.1f} us/request); trace generation {gen:.3f} s; "
          f"simulated {e['simulated_s']:,.0f} s, {res.preemptions:,} preemptions", flush=True)


def sweep(n_requests: int, rate: float) -> None:
    try:
        from kvplan.tune.search import TuneSpace, tune
    except ImportError:
        print("kvplan.tune.search not available: no sweep")
        return
    from kvplan.slo import parse_slo

    # on an H100 (fp8 KV allowed; the default budget is 8,192) every one of the 5 x 5 x 4 x 2 = 200
    # combinations is a distinct configuration that starts
    req, _ = _setup(gpu="H100")
    space = TuneSpace(max_num_seqs=(32, 64, 128, 256, 512), max_num_batched_tokens=(None, 2048, 4096, 16384, 32768),
                      gpu_memory_utilization=(0.8, 0.85, 0.9, 0.95), kv_cache_dtype=("auto", "fp8"))
    tr = _trace(n_requests, rate)
    t0 = time.perf_counter()
    res = tune(req, tr, parse_slo("ttft_p99=2s,tpot_p99=100ms"), space=space, exhaustive=True)
    wall = time.perf_counter() - t0
    print(f"tune sweep: {res.combinations} combinations, {res.simulated} simulated, {res.pruned} pruned, "
          f"{n_requests:,} requests @ {rate:g} req/s each: {wall:.1f} s wall "
          f"({wall / max(1, res.simulated):.2f} s per configuration, backend {res.backend})", flush=True)


MEASURES = {"10k requests @ 50 req/s": (10_000, 50.0), "10k requests @ 2 req/s": (10_000, 2.0),
            "200-configuration tune sweep": None}


def measure(name: str) -> float:
    """Seconds of one measurement (simulate: this process's CPU time, best of 3; the sweep: wall
    time of its worker pool, once)."""
    spec = MEASURES[name]
    if spec is None:
        try:
            from kvplan.tune import TuneSpace, tune
        except ImportError:  # a tree from before the tune package (compared with --against)
            from kvplan.sim.tune import TuneSpace, tune
        from kvplan.slo import parse_slo

        req, _ = _setup(gpu="H100")
        space = TuneSpace(max_num_seqs=(32, 64, 128, 256, 512),
                          max_num_batched_tokens=(None, 2048, 4096, 16384, 32768),
                          gpu_memory_utilization=(0.8, 0.85, 0.9, 0.95), kv_cache_dtype=("auto", "fp8"))
        tr = _trace(1000, 2.0)
        t0 = time.perf_counter()
        tune(req, tr, parse_slo("ttft_p99=2s,tpot_p99=100ms"), space=space, exhaustive=True)
        return time.perf_counter() - t0
    from kvplan.sim import simulate

    n, rate = spec
    req, pr = _setup()
    tr = _trace(n, rate)
    cpu = []
    for _ in range(3):
        t0 = time.process_time()
        simulate(req, tr, plan_result=pr)
        cpu.append(time.process_time() - t0)
    return min(cpu)  # CPU seconds: on a shared machine wall time mostly measures the neighbours


def side_by_side(other_src: str, rounds: int) -> None:
    """Each measurement in a fresh process for both source trees, alternating, best of ``rounds``."""
    import json
    import subprocess
    from pathlib import Path

    here = str(Path(__file__).resolve().parents[1] / "src")
    print(f"{'':<32} {'against':>10} {'this':>10} {'this/against':>13}   (against: {other_src})")
    for name in MEASURES:
        best = {"against": float("inf"), "this": float("inf")}
        for _ in range(rounds):
            for side, src in (("against", other_src), ("this", here)):
                out = subprocess.run([sys.executable, __file__, "--measure", name], capture_output=True, text=True,
                                     env={**os.environ, "PYTHONPATH": src}, check=True).stdout
                best[side] = min(best[side], json.loads(out.strip().splitlines()[-1])["wall_s"])
        print(f"{name:<32} {best['against']:>9.3f}s {best['this']:>9.3f}s {best['this'] / best['against']:>12.2f}x",
              flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--against", metavar="SRC", help="another checkout's src/: print both side by side")
    ap.add_argument("--rounds", type=int, default=2, help="with --against: alternating rounds per measurement")
    ap.add_argument("--measure", choices=sorted(MEASURES), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.measure:
        import json

        print(json.dumps({"wall_s": measure(args.measure)}))
        return 0
    if args.against:
        print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f}")
        side_by_side(args.against, args.rounds)
        return 0
    from kvplan._native import STATE

    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; simulator {STATE} (make native / KVPLAN_NATIVE=0)")
    if args.quick:
        one(10_000, 50.0, 3)
        return 0
    for n in (int(x) for x in args.sizes.split(",")):
        one(n, 50.0, 3 if n <= 10_000 else 1)
    # below saturation too: the waiting queue stays short, most steps are decode-only
    one(10_000, 2.0, 3)
    if not args.no_sweep:
        sweep(1000, 2.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
