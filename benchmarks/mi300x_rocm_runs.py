"""The MI300X clock against the development set's offline runs of ROCm's dev-docker README, with and
without the kernel transfer (kvplan/hardware/kernel_transfer.json), side by side.

The development set (dev_cases.json, or KVPLAN_DEV_CASES) carries ROCm's own dev-docker README
tables (source group ``rocm-dev-docker-mi300x``), 8 x MI300X at TP 8, Llama-3.1-70B and 405B FP8,
images of vLLM 0.7.3 and 0.10.0, both of the offline entrypoint (``--entrypoint offline``: no API
server). They are "partial" cases, so ``gpu_fidelity.py`` leaves them out:

* latency: ``benchmark_latency.py``, one static batch of 1-128 prompts of 128 or 2,048 tokens
  decoding 2,048 tokens each: every prompt at once, ``--ignore-eos``; the batch's latency is the
  run's duration;
* throughput: ``benchmark_throughput.py``, 3,200 prompts at once for the 70B, 1,500 for the 405B
  (``--max-num-seqs`` the same, 131,072 batched tokens, fp8 KV cache); the README's "Throughput (tokens/s)" does not say output or total
  tokens, so both are printed.

Nothing is fitted to them: the transfer's shares come from kernel measurements only.

    python benchmarks/mi300x_rocm_runs.py [--json out.json]
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


def rocm_cases(cases: list[dict], metric: str) -> list[dict]:
    return [c for c in cases if c.get("source_group") == "rocm-dev-docker-mi300x" and metric in c.get("measured", {})]


def argv_for(case: dict) -> list[str]:
    """The offline run as ``kvplan simulate`` types it: its batch all at once, its serve flags."""
    b, serve = case["benchmark"], case.get("serve") or {}
    batch = str(b.get("batch_size") or b["num_prompts"])
    argv = ["simulate", "--model", case["model"], "--gpu", "MI300X", "-tp", str(case["tensor_parallel_size"]),
            "--vllm-version", case["vllm_version"], "--entrypoint", "offline", "--num-prompts", batch,
            "--request-rate", "inf", "--max-concurrency", batch, "--dataset-name", "random",
            "--random-input-len", str(b["input_len"]), "--random-output-len", str(b["output_len"]), "--ignore-eos",
            "--format", "json"]
    for flag, key in (("--max-model-len", "max_model_len"), ("--max-num-seqs", "max_num_seqs"),
                      ("--max-num-batched-tokens", "max_num_batched_tokens"),
                      ("--gpu-memory-utilization", "gpu_memory_utilization")):
        if serve.get(key):
            argv += [flag, str(serve[key])]
    if "--kv-cache-dtype fp8" in (serve.get("command") or ""):
        argv += ["--kv-cache-dtype", "fp8"]
    return argv


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
    cases = json.loads(args.cases.read_text(encoding="utf-8"))
    rows = []
    for case in rocm_cases(cases, "avg_batch_latency_s"):
        measured = case["measured"]["avg_batch_latency_s"]
        with_t = run_case(argv_for(case))["bench"]["duration"]
        with without_transfer():
            without = run_case(argv_for(case))["bench"]["duration"]
        rows.append({"id": case["id"], "version": case["vllm_version"], "measured_s": measured,
                     "kvplan_s": round(with_t, 3), "no_transfer_s": round(without, 3),
                     "error": with_t / measured - 1, "no_transfer_error": without / measured - 1})
    print("LATENCY (benchmark_latency: one static batch; seconds)")
    print(f"{'case':52s} {'measured':>9s} {'kvplan':>8s} {'error':>7s} {'H200 rates':>10s} {'error':>7s}")
    for r in rows:
        print(f"{r['id']:52s} {r['measured_s']:9.2f} {r['kvplan_s']:8.2f} {r['error']:+7.1%} "
              f"{r['no_transfer_s']:10.2f} {r['no_transfer_error']:+7.1%}")
    for version in sorted({r["version"] for r in rows}):
        sel = [r for r in rows if r["version"] == version]
        print(f"vLLM {version}: {len(sel)} runs, median |error| {statistics.median(abs(r['error']) for r in sel):.1%} "
              f"(without the transfer {statistics.median(abs(r['no_transfer_error']) for r in sel):.1%}), mean "
              f"{statistics.mean(r['error'] for r in sel):+.1%} ({statistics.mean(r['no_transfer_error'] for r in sel):+.1%})")
    print("\nTHROUGHPUT (benchmark_throughput: 3,200 (70B) or 1,500 (405B) prompts at once; tokens/s, output or "
          "total not stated)")
    print(f"{'case':52s} {'measured':>9s} {'output':>8s} {'error':>7s} {'total':>8s} {'error':>7s} "
          f"{'H200 rates: output':>19s} {'total':>8s}")
    for case in rocm_cases(cases, "throughput_tok_s_unspecified"):
        measured = case["measured"]["throughput_tok_s_unspecified"]
        bench = run_case(argv_for(case))["bench"]
        with without_transfer():
            before = run_case(argv_for(case))["bench"]
        row = {"id": case["id"], "version": case["vllm_version"], "measured_tok_s": measured,
               "output_tok_s": round(bench["output_throughput"], 1),
               "total_tok_s": round(bench["total_token_throughput"], 1),
               "output_error": bench["output_throughput"] / measured - 1,
               "total_error": bench["total_token_throughput"] / measured - 1,
               "no_transfer_output_error": before["output_throughput"] / measured - 1,
               "no_transfer_total_error": before["total_token_throughput"] / measured - 1}
        rows.append(row)
        print(f"{row['id']:52s} {measured:9.0f} {row['output_tok_s']:8.0f} {row['output_error']:+7.1%} "
              f"{row['total_tok_s']:8.0f} {row['total_error']:+7.1%} {row['no_transfer_output_error']:+19.1%} "
              f"{row['no_transfer_total_error']:+8.1%}")
    thr = [r for r in rows if "output_error" in r]
    for version in sorted({r["version"] for r in thr}):
        sel = [r for r in thr if r["version"] == version]
        print(f"vLLM {version}: {len(sel)} runs, median |error| read as output tokens/s "
              f"{statistics.median(abs(r['output_error']) for r in sel):.1%} (without the transfer "
              f"{statistics.median(abs(r['no_transfer_output_error']) for r in sel):.1%}), read as total tokens/s "
              f"{statistics.median(abs(r['total_error']) for r in sel):.1%}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
