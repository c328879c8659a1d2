"""Fit the step-time model's overhead constants (kvplan.sim.opmodel.Overheads) to development cases,
by coordinate search on a log grid. The objective is the sum over output throughput, TTFT (weight
0.5) and TPOT of the median |relative error| per source group (groups weighted by the square root
of their case counts), each case typed in its SCENARIO view
(benchmarks/gpu_fidelity.translate: what the source documents about its setup, warm caches
included), so that a constant measures vLLM, not a source's setup. gpu_fidelity.py calls
:func:`fit` once per left-out source group (leave-one-source-out); run alone, this fits every
development case and prints the constants to paste into opmodel.Overheads.

    python benchmarks/gpu_fit.py [--rounds 2] [--step 1.3] [--start shipped]
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

PARAMS = ("api_cpu_speed", "api_chat_jinja_s", "request_s", "cpu_step_s", "cpu_seq_s", "compute_sustain",
          "marlin_fp8_compute_share", "marlin_int4_compute_share", "marlin_mma_sync_share_sm90",
          "triton_attention_dram_share", "net_bandwidth_gbs")
#: Where every fit starts (the full fit and each leave-one-source-out fold alike), and why: the
#: constants before any fit to the development set.
PRIORS = {
    "cpu_step_s": 0.0015,  # Vidur's cpu_overheads.csv, A100, batch 8 (schedule + prepare + process outputs)
    "cpu_seq_s": 1.0e-5,  # Vidur ~45 us per sequence in vLLM v0; V1 moved most of it off the step
    "request_s": 0.005,  # HTTP round trip and first SSE chunk on an idle server
    "net_bandwidth_gbs": 5.0,  # TCP between pods
    "compute_sustain": 1.0,  # the kernel tables as measured
    "api_cpu_speed": 1.0,  # a GPU host's core as fast as the test host's
    "api_chat_jinja_s": 6.6e-5,  # the tiny test model's template, measured (benchmarks/frontend_cost.py)
    # Marlin W8A16 / W4A16 against cuBLAS fp16 on an A800, m >= 4,096: 0.80-0.81 / 0.88-0.90 (vLLM 0.18's
    # marlin_gemm, mgoin/humming benchmarks/results/a800 @ ff6442d, docs/sim.md)
    "marlin_fp8_compute_share": 0.8, "marlin_int4_compute_share": 0.9,
    # mma.sync on Hopper (FlashAttention-3, sec. 2.2); dense Marlin W4A16 on an H100 gives 0.69 (humming @ 1569726)
    "marlin_mma_sync_share_sm90": 2.0 / 3.0,
    "triton_attention_dram_share": 1.0,  # every per-query-block prefix read from DRAM (no L2 reuse)
}


def prior_overheads():
    """The shipped Overheads with every fitted constant back at its prior."""
    from kvplan.sim.opmodel import DEFAULT_OVERHEADS

    return dataclasses.replace(DEFAULT_OVERHEADS, **PRIORS)
WEIGHTS = {"output_throughput": 1.0, "ttft": 0.5, "tpot": 1.0}
#: shares that cannot exceed 1 (a coordinate step that would is clipped)
CAPPED = ("compute_sustain", "marlin_fp8_compute_share", "marlin_int4_compute_share", "marlin_mma_sync_share_sm90",
          "triton_attention_dram_share")


def objective(prepared: list[dict], ov) -> tuple[float, dict]:
    """Per source group the median |error| of each metric, the groups weighted by the square root
    of their case counts (the largest source does not set every constant alone), summed over the
    metrics with WEIGHTS."""
    scored = gf.score(prepared, "scenario", ov)
    errs: dict[str, dict[str, list]] = {}
    for p in prepared:
        for m, e in (scored[p["id"]].get("err") or {}).items():
            errs.setdefault(p["source"], {k: [] for k in gf.METRICS})[m].append(abs(e))
    med: dict[str, float] = {}
    for m in gf.METRICS:
        num = den = 0.0
        for groups in errs.values():
            if groups[m]:
                w = len(groups[m]) ** 0.5
                num += w * statistics.median(groups[m])
                den += w
        med[m] = num / den if den else 0.0
    return sum(WEIGHTS[m] * med[m] for m in gf.METRICS), med


def fit(prepared: list[dict], *, start=None, params=PARAMS, rounds: int = 1, step: float = 1.5,
        log=lambda s: None):
    """Coordinate search from ``start`` (default: the priors, PRIORS): per round, each constant
    is tried at ×1/step and ×step (the next round at √step) and the first improvement kept."""
    ov = start or prior_overheads()
    best, med = objective(prepared, ov)
    log(f"start: {best:.4f} " + " ".join(f"{m} {v:.3f}" for m, v in med.items()))
    for rnd in range(rounds):
        s = step ** (0.5 ** rnd)
        for name in params:
            cur = getattr(ov, name)
            for f in (1 / s, s):
                value_new = cur * f
                if name in CAPPED:
                    value_new = min(1.0, value_new)
                    if value_new == cur:
                        continue
                cand = dataclasses.replace(ov, **{name: value_new})
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
    ap.add_argument("--start", choices=("priors", "shipped"), default="priors",
                    help="where the search starts: the priors (PRIORS, as every leave-one-source-out fold "
                         "does) or the shipped constants (opmodel.DEFAULT_OVERHEADS: a refit)")
    args = ap.parse_args(argv)
    prepared, _ = gf.prepare(json.loads(gf.DEV_CASES.read_text()))
    print(f"{len(prepared)} development cases")
    from kvplan.sim.opmodel import DEFAULT_OVERHEADS

    start = DEFAULT_OVERHEADS if args.start == "shipped" else None
    ov, info = fit(prepared, start=start, params=tuple(args.params.split(",")), rounds=args.rounds, step=args.step,
                   log=lambda s: print(" ", s, flush=True))
    print("fitted:", json.dumps(ov.to_dict()))
    print(f"medians: {info['medians']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
