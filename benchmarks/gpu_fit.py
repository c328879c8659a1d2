"""Fit the step-time model's overhead constants (kvplan.sim.opmodel.Overheads) to the FIT HALF of
the development set only (benchmarks/gpu_fidelity.FIT_SERIES), by coordinate search on a log
grid. The objective is the sum over output throughput, TTFT (weight 0.5) and TPOT of the median
|relative error|. The held-out half and the validation set are never read here.

    flock /tmp/kvplan-heavy.lock python benchmarks/gpu_fit.py [--rounds 2] [--stride 1]

Runs `kvplan simulate` in-process with the same argv gpu_fidelity.py types (the same code path,
without a subprocess per probe). Prints the fitted constants to paste into opmodel.Overheads.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_fidelity as gf  # noqa: E402

PARAMS = ("api_request_s", "cpu_step_s", "cpu_seq_s", "layer_s", "step_s", "seq_s", "net_bandwidth_gbs",
          "net_allreduce_latency_s", "request_s")


def run_inproc(argv: list[str]) -> dict:
    import click
    import typer

    from kvplan.cli.main import app

    cmd = typer.main.get_command(app)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            cmd.main(argv, standalone_mode=False)
        except (SystemExit, click.exceptions.Exit):
            pass
    return json.loads(buf.getvalue())


def score(cases, ov) -> tuple[float, dict]:
    from kvplan.sim import opmodel

    opmodel.DEFAULT_OVERHEADS = ov
    errs: dict[str, list] = {"output_throughput": [], "ttft": [], "tpot": []}
    for argv, meas in cases:
        d = run_inproc(argv)
        pred = gf.predicted(d, meas)
        for m, v in pred.items():
            if v and meas[m][1]:
                errs[m].append(abs(v / meas[m][1] - 1.0))
    med = {m: statistics.median(v) if v else 0.0 for m, v in errs.items()}
    return med["output_throughput"] + 0.5 * med["ttft"] + med["tpot"], med


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--stride", type=int, default=1, help="use every k-th fit case (speed)")
    ap.add_argument("--params", default=",".join(PARAMS))
    ap.add_argument("--step", type=float, default=2.0, help="first round's multiplicative step")
    args = ap.parse_args(argv)
    from kvplan.sim.opmodel import DEFAULT_OVERHEADS

    flags = gf.simulate_flags()
    cases = []
    all_cases = json.loads(gf.DEV_CASES.read_text())
    for case in all_cases:
        if not case["id"].startswith(gf.FIT_SERIES):
            continue  # held out: never seen by the fit
        try:
            # the same argv gpu_fidelity types, documented-warm prefix cache included
            a, _ = gf.translate(case, flags, gf.earlier_run(case, all_cases))
        except gf.NotExpressible:
            continue
        cases.append((a, gf.measured(case)))
    cases = cases[::args.stride]
    print(f"{len(cases)} fit cases")
    ov = DEFAULT_OVERHEADS
    best, med = score(cases, ov)
    print(f"start: {best:.4f} {med}", flush=True)
    for rnd in range(args.rounds):
        step = args.step if rnd == 0 else args.step ** 0.5
        for name in args.params.split(","):
            cur = getattr(ov, name)
            for f in (1 / step, step):
                cand = dataclasses.replace(ov, **{name: cur * f})
                s, m = score(cases, cand)
                if s < best - 1e-4:
                    best, med, ov = s, m, cand
                    print(f"  round {rnd} {name} -> {getattr(ov, name):.4g}: {best:.4f} {med}", flush=True)
                    break
    print("fitted:", json.dumps(ov.to_dict()))
    print(f"fit-half medians: {med}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
