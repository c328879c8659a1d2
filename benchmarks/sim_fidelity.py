"""Latency fidelity of ``kvplan.sim.simulate`` against the real vLLM CPU server on this machine.

1. Start the tiny-Llama CPU server (the test harness's model and launcher, stopped by PID at the end)
   with ``--max-num-seqs 16``, so that overload shows as a growing queue, as on a GPU server.
2. Measured saturation point: a closed-loop ``kvplan bench`` run with 32 users (always more than the
   16 the engine runs) — its steady completion rate is the server's capacity in req/s.
3. Calibrate (A): ONE ``kvplan bench`` run at 0.7 × the capacity (``--calibration-fraction``), its
   rate ramped up over the first half of the run (so one run sees batches from 1 to its peak), then
   ``kvplan calibrate``.
   Also (B): the same run plus the capacity run (full batches), to show what a second run buys.
4. Predict and measure at three other rates (below, near and above saturation): the simulator gets
   the plan of the served flags, the profile, and the measured run's own arrivals and lengths (the
   bench's send times; ``synthetic_trace`` with the same seed draws the same schedule).
5. Print predicted vs measured P50/P99 TTFT and E2E and throughput with the error per metric, and the
   predicted saturation point (``find_saturation``: the highest rate whose queue stays bounded) vs
   the measured capacity.

Not a test: it prints numbers (and writes every run, the profiles and summary.json to --out-dir).
About 6-8 minutes. Run from the repo root:

    .venv/bin/python benchmarks/sim_fidelity.py [--out-dir DIR] [--duration 40]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kvplan.bench.config import BenchConfig, parse_length  # noqa: E402
from kvplan.bench.io import write_records, write_result  # noqa: E402
from kvplan.bench.run import run_bench  # noqa: E402
from kvplan.hardware import custom_gpu, parse_size  # noqa: E402
from kvplan.memory import PlanRequest, plan  # noqa: E402
from kvplan.models import load_model  # noqa: E402
from kvplan.sim import find_saturation, simulate  # noqa: E402
from kvplan.sim.calibrate import calibrate  # noqa: E402
from kvplan.traffic.trace import SimRequest, Trace  # noqa: E402
from kvplan.traffic.trace import synthetic_trace  # noqa: E402
from tests.vllm_server import models, server  # noqa: E402

MAX_MODEL_LEN, MAX_NUM_SEQS = 2048, 16
SERVER_ARGS = ("--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(MAX_NUM_SEQS))
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
INPUT_LEN, OUTPUT_LEN = "uniform:200:400", "96"
CAPACITY_USERS, CAPACITY_S, CAPACITY_SKIP_S = 2 * MAX_NUM_SEQS, 40.0, 10.0
METRICS = (("ttft", "p50"), ("ttft", "p99"), ("e2e", "p50"), ("e2e", "p99"))


def bench(url: str, rate: Optional[float], duration: float, out_dir: Path, name: str, *, ramp: float = 0.0,
          seed: int = 0, concurrency: Optional[int] = None) -> tuple[dict, Path]:
    cfg = BenchConfig(url=url, endpoint="completions", rate=rate, concurrency=concurrency, arrival="poisson",
                      duration_s=duration, ramp_s=ramp,
                      input_len=parse_length(INPUT_LEN, "--input-len"), output_len=parse_length(OUTPUT_LEN, "--output-len"),
                      timeout_s=180, seed=seed)
    result, records = run_bench(cfg)
    d = result.to_dict()
    path = out_dir / f"{name}.json"
    rec_path = out_dir / f"{name}.records.jsonl"
    write_records(records, rec_path)
    d["records_file"] = rec_path.name
    write_result(d, path)
    return d, path


def replay_trace(result_path: Path) -> tuple[Trace, list[int]]:
    """The run's own requests: send time (from the first send), prompt and output tokens."""
    recs = [json.loads(line) for line in result_path.with_name(result_path.stem + ".records.jsonl").read_text().splitlines()]
    recs = [r for r in recs if r["sent"] is not None]
    t0 = min(r["sent"] for r in recs)
    reqs, measured = [], []
    for i, r in enumerate(sorted(recs, key=lambda r: r["sent"])):
        out = r["output_tokens"] if r["ok"] and r["output_tokens"] else r["max_tokens"]
        prompt = r["prompt_tokens"] if r["prompt_tokens"] else 300
        reqs.append(SimRequest(arrival_s=r["sent"] - t0, prompt_tokens=prompt, output_tokens=out, request_id=str(r["i"])))
        if not r["warmup"]:
            measured.append(i)
    return Trace(tuple(reqs), f"replay of {result_path.name}"), measured


def speed_probe(url: str, out_dir: Path, name: str) -> float:
    """The server's speed right now: TPOT p50 of 3 requests sent one at a time (the host is shared;
    this shows how much its speed drifts between the runs)."""
    cfg = BenchConfig(url=url, endpoint="completions", concurrency=1, max_requests=3, input_len=parse_length("300", "x"),
                      output_len=parse_length("32", "x"), timeout_s=60, scrape_metrics=False)
    result, _ = run_bench(cfg)
    return result.to_dict()["latency_s"]["tpot"]["p50"]


def steady_rate(result_path: Path, skip_s: float, end_s: float) -> float:
    """Completions per second between skip_s and end_s of a closed-loop run (no start-up, no drain)."""
    recs = [json.loads(line) for line in result_path.with_name(result_path.stem + ".records.jsonl").read_text().splitlines()]
    t0 = min(r["sent"] for r in recs if r["sent"] is not None)
    done = [r for r in recs if r["ok"] and r["end"] is not None and skip_s <= r["end"] - t0 <= end_s]
    return len(done) / (end_s - skip_s)


def predicted(req: PlanRequest, trace: Trace, profile) -> dict:
    """simulate()'s own figures (TTFT and E2E include the profile's request_overhead_s, the API
    server's latency that `kvplan calibrate` fits), in the shape of :func:`measured`."""
    d = simulate(req, trace, profile=profile, async_scheduling=False).to_dict()
    lat = d["latency_s"]
    return {"ttft": {k: lat["ttft"][k] for k in ("p50", "p99")}, "e2e": {k: lat["e2e"][k] for k in ("p50", "p99")},
            "throughput": d["throughput"]["requests_per_s"], "saturation": d["saturation"],
            "preemptions": d["preemptions"], "completed": d["requests"]["completed"], "total": d["requests"]["total"]}


def measured(d: dict) -> dict:
    lat = d["latency_s"]
    waiting = [s.get("requests_waiting") or 0 for s in d["server"].get("samples", [])]
    return {"ttft": {k: lat["ttft"][k] for k in ("p50", "p99")}, "e2e": {k: lat["e2e"][k] for k in ("p50", "p99")},
            "throughput": d["throughput"]["requests_per_s"], "max_waiting": max(waiting, default=0),
            "achieved": d["rate"]["achieved"], "completed": d["requests"]["ok"]}


def saturated_measured(d: dict, rate: float) -> bool:
    """The server could not keep up: vLLM's own waiting queue grew over the second half of the
    arrivals (the simulator's criterion too: kvplan.sim.simulate.saturation)."""
    dur = d["config"].get("duration_s") or 0
    samples = [s for s in d["server"].get("samples", []) if s["t"] <= dur + 0.5]
    tail = [s.get("requests_waiting") or 0 for s in samples[len(samples) // 2:]]
    return len(tail) >= 2 and tail[-1] >= 2 and tail[-1] > tail[0]


def err(p: float, m: float) -> str:
    return f"{(p - m) / m * 100:+.1f}%" if m else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default="/tmp/kvplan-sim-fidelity")
    ap.add_argument("--calibration-fraction", type=float, default=0.7,
                    help="calibration run's rate as a fraction of the measured capacity (ramped up over 20 s)")
    ap.add_argument("--duration", type=float, default=40.0, help="seconds per measured rate")
    args = ap.parse_args()
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    load = [os.getloadavg()]
    model = models.build_tiny_llama()
    srv = server.VllmServer(model.path, SERVER_ARGS, SERVER_ENV, label="sim-fidelity-benchmark")
    t_start = time.monotonic()
    try:
        srv.start()
        print(f"server up in {srv.startup_seconds:.0f} s: {srv.base_url} (pid {srv.pid}), log {srv.log_path}")
        req = PlanRequest(model=load_model(str(model.path)), gpu=custom_gpu(parse_size("16GiB"), "CPU"), device="cpu",
                          dtype="float32", vllm_version="0.32", max_model_len=MAX_MODEL_LEN, max_num_seqs=MAX_NUM_SEQS,
                          kv_cache_memory_bytes=parse_size("1GiB"))
        pr = plan(req, what_ifs=False)
        kv_line = next((ln for ln in srv.log_text().splitlines() if "KV cache size" in ln), "")
        print(f"plan: {pr.kv.num_gpu_blocks} blocks of {pr.kv.block_size}, max_num_batched_tokens "
              f"{pr.flags.max_num_batched_tokens}; server: {kv_line.split('] ')[-1]}")

        probes: dict[str, float] = {}
        probes["start"] = speed_probe(srv.base_url, out_dir, "probe_start")
        # 1. measured saturation point: closed loop, more users than the engine runs
        cap_d, cap_path = bench(srv.base_url, None, CAPACITY_S, out_dir, "capacity", concurrency=CAPACITY_USERS, seed=11)
        load.append(os.getloadavg())
        capacity = steady_rate(cap_path, CAPACITY_SKIP_S, CAPACITY_S)
        print(f"capacity run ({CAPACITY_USERS} users, {CAPACITY_S:g} s): {capacity:.2f} req/s completed "
              f"after {CAPACITY_SKIP_S:g} s, TPOT p50 {cap_d['latency_s']['tpot']['p50'] * 1e3:.0f} ms")

        # 2. one calibration run, ramped; and the same plus the capacity run
        cal_rate = round(args.calibration_fraction * capacity, 2)
        probes["calibration"] = speed_probe(srv.base_url, out_dir, "probe_calibration")
        cal_d, cal_path = bench(srv.base_url, cal_rate, 40.0, out_dir, "calibration", ramp=20.0, seed=21)
        load.append(os.getloadavg())
        config = {"model": "tiny-llama", "device": "cpu", "max_num_seqs": MAX_NUM_SEQS}
        profiles = {"A": calibrate([cal_path], device="CPU", config=config),
                    "B": calibrate([cal_path, cap_path], device="CPU", config=config)}
        for key, cal in profiles.items():
            prof = cal.profile
            prof.save(out_dir / f"profile_{key}.json")
            print(f"profile {key} ({prof.source}): overhead {prof.overhead_s * 1e3:.1f} ms, per seq "
                  f"{prof.per_seq_s * 1e3:.2f} ms, per token {prof.per_token_s * 1e6:.1f} us, per KV read "
                  f"{prof.per_kv_token_s * 1e9:.2f} ns, request overhead {prof.request_overhead_s * 1e3:.1f} ms; "
                  f"fit TPOT mean error {cal.fit['tpot']['mean_error']:+.1%}")
        # 3. three rates: below, near, above saturation
        rates = {"below": round(0.4 * capacity, 2), "near": round(0.9 * capacity, 2),
                 "above": round(1.25 * capacity, 2)}
        rows = []
        for label, rate in rates.items():
            probes[label] = speed_probe(srv.base_url, out_dir, f"probe_{label}")
            d, path = bench(srv.base_url, rate, args.duration, out_dir, f"eval_{label}", seed=31)
            load.append(os.getloadavg())
            trace, _ = replay_trace(path)
            preds = {k: predicted(req, trace, c.profile)
                     for k, c in profiles.items()}
            rows.append((label, rate, preds, measured(d), saturated_measured(d, rate)))
            print(f"{label} {rate:g} req/s: measured")

        # 4. predicted saturation point (synthetic traces with the bench's lengths)
        def make_trace(rate: float) -> Trace:
            return synthetic_trace(rate, duration_s=120.0, input_len=parse_length(INPUT_LEN, "x"),
                                   output_len=parse_length(OUTPUT_LEN, "x"), seed=11)

        sim_sat = {k: find_saturation(req, make_trace, lo=0.2, profile=c.profile, async_scheduling=False)["max_rate"]
                   for k, c in profiles.items()}
    finally:
        srv.stop()
        print(f"server stopped (pid {srv.pid}); total {time.monotonic() - t_start:.0f} s")

    print()
    print(f"{'rate':>12} {'metric':>9} {'pred A':>9} {'err A':>8} {'pred B':>9} {'err B':>8} {'measured':>9}")
    for label, rate, preds, m, sat in rows:
        name = f"{label} {rate:g}"
        for metric, stat in METRICS:
            mv = m[metric][stat]
            pa, pb = preds["A"][metric][stat], preds["B"][metric][stat]
            print(f"{name:>12} {metric + ' ' + stat:>9} {pa * 1e3:>7.0f}ms {err(pa, mv):>8} {pb * 1e3:>7.0f}ms "
                  f"{err(pb, mv):>8} {mv * 1e3:>7.0f}ms")
        pa, pb, mv = preds["A"]["throughput"], preds["B"]["throughput"], m["throughput"]
        print(f"{name:>12} {'req/s':>9} {pa:>9.2f} {err(pa, mv):>8} {pb:>9.2f} {err(pb, mv):>8} {mv:>9.2f}")
        print(f"{'':>12} {'saturated':>9} {str(preds['A']['saturation']['saturated']):>9} {'':>8} "
              f"{str(preds['B']['saturation']['saturated']):>9} {'':>8} {str(sat):>9}")
    print()
    print(f"saturation point: predicted A {sim_sat['A']} req/s ({err(sim_sat['A'] or 0, capacity)}), "
          f"B {sim_sat['B']} req/s ({err(sim_sat['B'] or 0, capacity)}), measured capacity {capacity:.2f} req/s")
    print(f"load average during the run (1 min): {', '.join(f'{x[0]:.1f}' for x in load)}; simulate adds each profile's request_overhead_s to TTFT and E2E")
    print("server speed before each run (TPOT p50 of 3 lone requests): "
          + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in probes.items()))
    summary = {"rows": [{"label": lb, "rate": r, "predicted": p, "measured": m, "measured_saturated": s}
                        for lb, r, p, m, s in rows],
               "saturation_point": {"predicted": sim_sat, "measured_capacity": capacity},
               "profiles": {k: c.profile.to_dict() for k, c in profiles.items()},
               "load_1min": [x[0] for x in load],
               "speed_probe_tpot_p50_s": probes}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"files: {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
