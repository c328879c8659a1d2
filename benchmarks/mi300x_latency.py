"""The MI300X clock against the development set's static-batch latency runs, with and without the
kernel transfer (kvplan/hardware/kernel_transfer.json), side by side.

The development set (dev_cases.json, or KVPLAN_DEV_CASES) carries ROCm's own dev-docker README
tables (source group ``rocm-dev-docker-mi300x``): ``benchmark_latency.py`` on 8 × MI300X at TP 8,
Llama-3.1-70B and 405B FP8, one static batch of 1-128 prompts of 128 or 2,048 tokens decoding 2,048
tokens each, images of vLLM 0.7.3 and 0.10.0. They are "partial" cases (no serve run, so
``gpu_fidelity.py`` leaves them out); each is typed here as the simulator's closed batch: every
prompt at once, ``--ignore-eos``, and the batch's latency is the run's duration. Nothing is fitted
to them: the transfer's shares come from kernel measurements only.

    python benchmarks/mi300x_latency.py [--json out.json]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_fidelity import DEV_CASES, run_case


def latency_cases(cases: list[dict]) -> list[dict]:
    return [c for c in cases if c.get("source_group") == "rocm-dev-docker-mi300x"
            and "avg_batch_latency_s" in c.get("measured", {})]


def argv_for(case: dict) -> list[str]:
    b = case["benchmark"]
    batch = str(b["batch_size"])
    return ["simulate", "--model", case["model"], "--gpu", "MI300X", "-tp", str(case["tensor_parallel_size"]),
            "--vllm-version", case["vllm_version"], "--num-prompts", batch, "--request-rate", "inf",
            "--max-concurrency", batch, "--dataset-name", "random", "--random-input-len", str(b["input_len"]),
            "--random-output-len", str(b["output_len"]), "--ignore-eos", "--format", "json"]


@contextlib.contextmanager
def without_transfer():
    """The clock as it was before the transfer: the borrowed table at the GPU's catalog peaks."""
    from kvplan.sim import kernel_transfer, opmodel

    saved = kernel_transfer.transfer_for, opmodel.transfer_for
    kernel_transfer.transfer_for = opmodel.transfer_for = lambda name: None
    try:
        yield
    finally:
        kernel_transfer.transfer_for, opmodel.transfer_for = saved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, default=DEV_CASES)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = []
    for case in latency_cases(json.loads(args.cases.read_text(encoding="utf-8"))):
        measured = case["measured"]["avg_batch_latency_s"]
        with_t = run_case(argv_for(case))["bench"]["duration"]
        with without_transfer():
            without = run_case(argv_for(case))["bench"]["duration"]
        rows.append({"id": case["id"], "version": case["vllm_version"], "measured_s": measured,
                     "kvplan_s": round(with_t, 3), "no_transfer_s": round(without, 3),
                     "error": with_t / measured - 1, "no_transfer_error": without / measured - 1})
    print(f"{'case':52s} {'measured':>9s} {'kvplan':>8s} {'error':>7s} {'before':>8s} {'error':>7s}")
    for r in rows:
        print(f"{r['id']:52s} {r['measured_s']:9.2f} {r['kvplan_s']:8.2f} {r['error']:+7.1%} "
              f"{r['no_transfer_s']:8.2f} {r['no_transfer_error']:+7.1%}")
    for version in sorted({r["version"] for r in rows}):
        sel = [r for r in rows if r["version"] == version]
        print(f"vLLM {version}: {len(sel)} runs, median |error| {statistics.median(abs(r['error']) for r in sel):.1%} "
              f"(without the transfer {statistics.median(abs(r['no_transfer_error']) for r in sel):.1%}), mean "
              f"{statistics.mean(r['error'] for r in sel):+.1%} ({statistics.mean(r['no_transfer_error'] for r in sel):+.1%})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
