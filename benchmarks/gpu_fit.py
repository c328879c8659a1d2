"""Fit the step-time model's overhead constants (kvplan.sim.opmodel.Overheads) to development cases,
by coordinate search on a log grid. The objective is the sum over output throughput, TTFT (weight
0.5) and TPOT of the median |relative error| over the cases, each typed in its SCENARIO view
(benchmarks/gpu_fidelity.translate: what the source documents about its setup, warm caches
included), so that a constant measures vLLM, not a source's setup. gpu_fidelity.py calls
:func:`fit` once per left-out source group (leave-one-source-out); run alone, this fits every
development case and prints the constants to paste into opmodel.Overheads.

    flock /work/wt/heavy.lock python benchmarks/gpu_fit.py [--rounds 2] [--step 1.3]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_fidelity as gf  # noqa: E402

PARAMS = ("api_request_s", "cpu_step_s", "cpu_seq_s", "layer_s", "step_s", "seq_s", "net_bandwidth_gbs",
          "request_s")
WEIGHTS = {"output_throughput": 1.0, "ttft": 0.5, "tpot": 1.0}


def objective(prepared: list[dict], ov) -> tuple[float, dict]:
    scored = gf.score(prepared, "scenario", ov)
    errs: dict[str, list] = {m: [] for m in gf.METRICS}
    for p in prepared:
        for m, e in (scored[p["id"]].get("err") or {}).items():
            errs[m].append(abs(e))
    med = {m: statistics.median(v) if v else 0.0 for m, v in errs.items()}
    return sum(WEIGHTS[m] * med[m] for m in gf.METRICS), med


def fit(prepared: list[dict], *, start=None, params=PARAMS, rounds: int = 1, step: float = 1.5,
        log=lambda s: None):
    """Coordinate search from ``start`` (default: the shipped constants): per round, each constant
    is tried at ×1/step and ×step (the next round at √step) and the first improvement kept."""
    from kvplan.sim.opmodel import DEFAULT_OVERHEADS

    ov = start or DEFAULT_OVERHEADS
    best, med = objective(prepared, ov)
    log(f"start: {best:.4f} " + " ".join(f"{m} {v:.3f}" for m, v in med.items()))
    for rnd in range(rounds):
        s = step ** (0.5 ** rnd)
        for name in params:
            cur = getattr(ov, name)
            for f in (1 / s, s):
                cand = dataclasses.replace(ov, **{name: cur * f})
                value, m = objective(prepared, cand)
                if value < best - 1e-4:
                    best, med, ov = value, m, cand
                    log(f"round {rnd} {name} -> {getattr(ov, name):.4g}: {best:.4f}")
                    break
    return ov, {"objective": best, "medians": med, "cases": len(prepared)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--params", default=",".join(PARAMS))
    ap.add_argument("--step", type=float, default=1.5, help="first round's multiplicative step")
    args = ap.parse_args(argv)
    prepared, _ = gf.prepare(json.loads(gf.DEV_CASES.read_text()))
    print(f"{len(prepared)} development cases")
    ov, info = fit(prepared, params=tuple(args.params.split(",")), rounds=args.rounds, step=args.step,
                   log=lambda s: print(" ", s, flush=True))
    print("fitted:", json.dumps(ov.to_dict()))
    print(f"medians: {info['medians']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
