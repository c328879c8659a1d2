"""How close `kvplan simulate` comes to published real-GPU `vllm bench serve` runs.

For every case of the development set (/work/shared/perf/dev_cases.json, or --cases FILE) that
has enough configuration, type the `kvplan simulate` command a user would type for that run (the
model, GPU, TP, serve flags and the bench traffic as published), run it as a subprocess, and
compare its output throughput, TTFT and TPOT (median when published, else mean) with the measured
numbers. Prints per case, per GPU and overall median |error| per metric, a held-out split (the
constants' fit half of the sources vs the other half), the cases that could not be expressed and
why, and a separate VALIDATION table on published results that are not in the dev set (never
fitted to).

    python benchmarks/gpu_fidelity.py                 # everything (a few minutes)
    python benchmarks/gpu_fidelity.py --only dennislee-t4 --show-argv
    python benchmarks/gpu_fidelity.py --json out.json

Run it under the shared lock on a shared machine: `flock /tmp/kvplan-heavy.lock python ...`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
DEV_CASES = Path(os.environ.get("KVPLAN_DEV_CASES", "/work/shared/perf/dev_cases.json"))

#: Published names the catalog lacks -> a catalog model of identical architecture (layers, hidden
#: size, heads, KV heads, MLP width, vocabulary): same weights bytes, same kernels. Used only when
#: the published name does not load; the case says so.
SAME_SHAPE = {
    "Qwen/Qwen2-7B-Instruct": "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2-72B": "Qwen/Qwen2.5-72B-Instruct",
    "Qwen/Qwen2.5-32B": "Qwen/Qwen2.5-32B-Instruct",
    "meta-llama/Llama-3.1-8B (exact HF repo not stated; post says \"Llama-3.1-8B\")": "meta-llama/Llama-3.1-8B",
}
GPU_PATTERNS = [(r"A100-80GB|A100 80GB", "A100-80GB"), (r"A100-40GB", "A100-40GB"), (r"H100", "H100"),
                (r"H200", "H200"), (r"MI300X", "MI300X"), (r"L40S", "L40S"), (r"B200", "B200"),
                (r"RTX 3090", "RTX-3090"), (r"GB10", "GB10")]
#: Fit half of the development set's sources (the overhead constants in kvplan.sim.opmodel were
#: fitted on these only); the other half is the held-out score. Split by source series: the
#: dennislee22 runs come in test series t1..t9 of different configurations.
FIT_SERIES = ("dennislee-t2-", "dennislee-t4-", "dennislee-t6-", "dennislee-t8-", "vllmblog-fp8kv-llama31",
              "kvcached-h100-qwen3-0.6b-vanilla-inf")


class NotExpressible(Exception):
    pass


#: A case's source documents a warm prefix cache when its notes say the runs re-sent the same
#: seed's random prompts to one server, and the source's quoted server log names the server
#: (APIServer pid) and the time of each run (benchmarks/data/dennislee_servers.json, distilled
#: from the README by benchmarks/dennislee_servers.py): the earlier run is the latest run before
#: this one on the same server the same day. The README's order is not the order the runs ran.
WARM_EVIDENCE = re.compile(r"repeated runs reuse identical random prompts")
SERVER_RUNS = HERE / "data" / "dennislee_servers.json"


def earlier_run(case: dict, cases: list[dict]) -> dict | None:
    """The run that the same server served just before ``case``, when the source documents it."""
    if not WARM_EVIDENCE.search(case.get("notes") or "") or not SERVER_RUNS.exists():
        return None
    runs = json.loads(SERVER_RUNS.read_text(encoding="utf-8"))
    me = runs.get(case["id"])
    if me is None:
        return None
    # pids repeat across containers: the same server is also the same test (series) of the source
    series = re.match(r"(.*-t\d+-)", case["id"]).group(1)
    before = [(r["time"], cid) for cid, r in runs.items() if cid.startswith(series)
              and r["server_pid"] == me["server_pid"] and r["day"] == me["day"] and r["time"] < me["time"]]
    if not before:
        return None
    prev_id = max(before)[1]
    return next((c for c in cases if c["id"] == prev_id), None)


def kvplan_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("kvplan")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("kvplan")
    return [found] if found else [sys.executable, "-c", "from kvplan.cli.main import main; main()"]


def _num(text, what: str) -> float:
    if isinstance(text, (int, float)):
        return float(text)
    m = re.search(r"([0-9]+(?:\.[0-9]+)?)", str(text or ""))
    if not m:
        raise NotExpressible(f"{what} not published ({text!r})")
    return float(m.group(1))


def _model(name: str) -> tuple[str, list[str]]:
    from kvplan.models import load_model

    base = name.split(" (")[0]
    for cand in (base, SAME_SHAPE.get(name), SAME_SHAPE.get(base)):
        if not cand:
            continue
        try:
            load_model(cand)
        except Exception:  # noqa: BLE001, S112 - any load failure means: try the next name
            continue
        return cand, ([] if cand == base else [f"model {base} as {cand} (same architecture)"])
    raise NotExpressible(f"model {base} is not in the catalog (no config.json given)")


def _version_tuple(v) -> tuple:
    m = re.match(r"\s*(\d+)\.(\d+)", str(v or ""))
    return (int(m.group(1)), int(m.group(2))) if m else ()


def translate(case: dict, flags: set[str], prev: dict | None = None) -> tuple[list[str], list[str]]:
    """The `kvplan simulate` argv for a case, and what had to be approximated. ``prev``: the run
    the same server served just before (documented in the case data): its prompts are warm."""
    if case.get("completeness") != "full":
        raise NotExpressible(f"partial case: {case.get('partial_reason') or 'incomplete configuration'}")
    notes: list[str] = []
    model, mnotes = _model(case["model"])
    notes += mnotes
    gpu = next((g for pat, g in GPU_PATTERNS if re.search(pat, case["gpu"])), None)
    if gpu is None:
        raise NotExpressible(f"GPU {case['gpu'].split(' (')[0]} is not in kvplan's GPU catalog")
    b, s = case["benchmark"], case["serve"]
    argv = ["simulate", "--model", model, "--gpu", gpu, "-tp", str(case.get("tensor_parallel_size") or 1)]
    if (case.get("pipeline_parallel_size") or 1) > 1:
        argv += ["-pp", str(case["pipeline_parallel_size"])]
    ver = _version_tuple(case.get("vllm_version"))
    if (case.get("tensor_parallel_size") or 1) > 1 and re.search(r"GPU pods", case.get("notes", "")):
        # one GPU per Kubernetes pod (Ray across containers): no CUDA IPC, so no custom all-reduce
        argv += ["--gpus-per-node", "1"]
        notes.append("one GPU per pod: TP over the network (--gpus-per-node 1)")
    if s.get("max_model_len") and str(s["max_model_len"]).isdigit():
        argv += ["--max-model-len", str(s["max_model_len"])]
    elif case.get("source_group") == "dennislee22-vLLM-benchmarking":
        # tests 6-8 published no server log; every published log of the series sets 16384
        argv += ["--max-model-len", "16384"]
        notes.append("max_model_len 16384 as in the series' published logs (not stated for this test)")
    for key, flag in (("max_num_batched_tokens", "--max-num-batched-tokens"), ("max_num_seqs", "--max-num-seqs"),
                      ("gpu_memory_utilization", "--gpu-memory-utilization"), ("block_size", "--block-size")):
        if s.get(key) not in (None, ""):
            argv += [flag, str(s[key])]
    if s.get("kv_cache_gib_per_gpu_reported"):
        argv += ["--kv-cache-memory", f"{s['kv_cache_gib_per_gpu_reported']}GiB"]
    kvd = str(case.get("kv_cache_dtype") or "")
    if kvd.startswith("fp8"):
        argv += ["--kv-cache-dtype", "fp8"]
        if "skip-layers" in kvd:
            notes.append("--kv-cache-dtype-skip-layers sliding_window not modelled (all layers fp8)")
    if s.get("enable_prefix_caching") is False:
        argv.append("--no-enable-prefix-caching")
    if s.get("enforce_eager"):
        argv.append("--enforce-eager")
    # vLLM turned async scheduling on by default in 0.13 (PR #27614); older runs schedule in sync
    if ver and ver < (0, 13) and not s.get("async_scheduling"):
        argv.append("--no-async-scheduling")
    elif not ver and not s.get("async_scheduling"):
        notes.append("vLLM version not published: async scheduling assumed on (today's default)")
    # traffic
    if "random" not in str(b.get("dataset") or "random"):
        raise NotExpressible(f"dataset {b.get('dataset')!r}: only random traffic is expressible")
    n = int(_num(b.get("num_prompts"), "number of prompts"))
    ilen, olen = int(_num(b.get("input_len"), "input length")), int(_num(b.get("output_len"), "output length"))
    rr = b.get("random_range_ratio")
    ratio = 0.0
    if rr not in (None, "") and re.match(r"\s*0?\.\d+|\s*[01](\s|$)", str(rr)):
        ratio = _num(rr, "range ratio")
    rate_txt = str(b.get("request_rate") if b.get("request_rate") is not None else "inf")
    rate_inf = "inf" in rate_txt or rate_txt.strip() in ("None", "")
    conc = b.get("max_concurrency")
    conc = int(_num(conc, "max concurrency")) if conc not in (None, "") else None
    if "--request-rate" in flags:  # the traffic helper's vLLM-bench flags
        argv += ["--dataset-name", "random", "--num-prompts", str(n), "--random-input-len", str(ilen),
                 "--random-output-len", str(olen), "--request-rate", "inf" if rate_inf else str(_num(rate_txt, "rate"))]
        if ratio:
            argv += ["--random-range-ratio", str(ratio)]
        if conc:
            argv += ["--max-concurrency", str(conc)]
        argv.append("--ignore-eos")
        if prev is not None and not ratio:
            pn = int(_num(prev["benchmark"].get("num_prompts"), "number of prompts"))
            pl = int(_num(prev["benchmark"].get("input_len"), "input length"))
            argv += ["--warm-prompts", str(pn)] + (["--warm-prompt-len", str(pl)] if pl != ilen else [])
            notes.append(f"documented warm prefix cache: the server served {prev['id']} just before "
                         f"({pn} prompts of {pl} tokens, same seed)")
    else:
        if conc and conc < n:
            raise NotExpressible("--max-concurrency (closed loop) needs vLLM-bench traffic flags")
        lens = (lambda x: f"uniform:{int(x * (1 - ratio))},{int(x * (1 + ratio))}") if ratio else str
        argv += ["--num-requests", str(n), "--input-len", lens(ilen), "--output-len", lens(olen)]
        argv += ["--rate", "1e9", "--arrival", "constant"] if rate_inf else ["--rate", str(_num(rate_txt, "rate"))]
    if b.get("ignore_eos") is False:
        notes.append("outputs may stop early (no --ignore-eos); simulated at the full output length")
    argv += ["--format", "json"]
    return argv, notes


def measured(case: dict) -> dict:
    m = case["measured"]
    out = {}
    if m.get("output_throughput"):
        out["output_throughput"] = ("", float(m["output_throughput"]))
    elif m.get("request_throughput") and m.get("total_output_tokens") and m.get("completed"):
        out["output_throughput"] = ("", m["request_throughput"] * m["total_output_tokens"] / m["completed"])
    for metric in ("ttft", "tpot"):
        d = m.get(f"{metric}_ms") or {}
        if metric == "tpot" and not d:
            d = m.get("itl_ms") or {}
            metric_src = "itl"
        else:
            metric_src = metric
        for stat in ("median", "mean"):
            if d.get(stat) is not None:
                out[metric] = (stat if metric_src == metric else f"{stat} (ITL)", float(d[stat]) / 1000.0)
                break
        else:
            vals = [v for v in d.values() if isinstance(v, (int, float))]
            if vals:
                out[metric] = ("unlabelled", float(vals[0]) / 1000.0)
    return out


def predicted(d: dict, meas: dict) -> dict:
    out = {}
    if "output_throughput" in meas:
        out["output_throughput"] = d["throughput"]["output_tokens_per_s"]
    for metric in ("ttft", "tpot"):
        if metric in meas:
            stat = "p50" if meas[metric][0].startswith("median") else "mean"
            out[metric] = d["latency_s"][metric][stat]
    return out


def run_case(argv: list[str], timeout: float = 900) -> dict:
    p = subprocess.run(kvplan_cmd() + argv, capture_output=True, text=True, timeout=timeout)
    if p.returncode not in (0, 1) or not p.stdout.strip().startswith("{"):
        raise RuntimeError((p.stderr or p.stdout).strip().splitlines()[-1] if (p.stderr or p.stdout) else "no output")
    return json.loads(p.stdout)


def simulate_flags() -> set[str]:
    p = subprocess.run(kvplan_cmd() + ["simulate", "--help"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"})
    return set(re.findall(r"--[a-z][a-z0-9-]+", p.stdout))


def gpu_of(argv: list[str]) -> str:
    from kvplan.hardware import find_gpu

    return find_gpu(argv[argv.index("--gpu") + 1]).name


def med(xs):
    return statistics.median(xs) if xs else None


def fmt_pct(x):
    return "   -  " if x is None else f"{x * 100:+6.1f}%"


def summarize(rows: list[dict], title: str) -> dict:
    metrics = ("output_throughput", "ttft", "tpot")
    print(f"\n{title}: median |error| (cases)")
    groups: dict[str, list] = {"all": rows}
    for r in rows:
        groups.setdefault(r["gpu"], []).append(r)
    out = {}
    for g, rs in groups.items():
        vals = {m: [abs(r["err"][m]) for r in rs if m in r["err"]] for m in metrics}
        out[g] = {m: (round(med(v), 4) if v else None) for m, v in vals.items()} | {"cases": len(rs)}
        print(f"  {g:<16} " + "  ".join(f"{m} {('-' if not v else f'{med(v) * 100:5.1f}%'):>6} ({len(v)})"
                                        for m, v in vals.items()))
    return out


def write_validation(result: dict) -> None:
    import datetime

    out = {}
    for gpu, row in result["dev"].items():
        if gpu == "all":
            continue
        held = result["held_out"].get(gpu, {})
        out[gpu] = {"cases": row["cases"], "output_throughput": row["output_throughput"], "ttft": row["ttft"],
                    "tpot": row["tpot"], "held_out": {k: held.get(k) for k in ("cases", "output_throughput", "ttft", "tpot")},
                    "benchmark": "benchmarks/gpu_fidelity.py", "date": datetime.date.today().isoformat()}
    names = {"H100": "H100-SXM5-80GB", "H200": "H200-141GB", "A100-80GB": "A100-SXM4-80GB"}
    for key, row in (result.get("validation") or {}).items():
        source, gpu = key.split(" / ")
        entry = out.setdefault(names.get(gpu, gpu), {"cases": 0})
        entry.setdefault("validation", {})[source] = row
    path = HERE.parent / "src" / "kvplan" / "sim" / "validation.py"
    text = path.read_text(encoding="utf-8")
    head = text[:text.index("VALIDATION: dict = ")]
    path.write_text(head + "VALIDATION: dict = " + json.dumps(out, indent=4).replace("null", "None") + "\n",
                    encoding="utf-8")
    print(f"wrote {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, default=DEV_CASES)
    ap.add_argument("--only", default="", help="only case ids containing this")
    ap.add_argument("--show-argv", action="store_true")
    ap.add_argument("--json", type=Path, help="write every row here")
    ap.add_argument("--no-validation", action="store_true")
    ap.add_argument("--cold", action="store_true",
                    help="simulate every case with a cold prefix cache (ignore documented earlier runs)")
    ap.add_argument("--write-validation", action="store_true",
                    help="rewrite src/kvplan/sim/validation.py with the per-GPU errors (the clock every result quotes)")
    args = ap.parse_args(argv)
    cases = json.loads(args.cases.read_text(encoding="utf-8"))
    flags = simulate_flags()
    print(f"{len(cases)} cases from {args.cases}; traffic flags: "
          f"{'vLLM bench (--request-rate, --max-concurrency)' if '--request-rate' in flags else 'legacy (--rate)'}")
    rows, skipped = [], []
    for case in cases:
        if args.only and args.only not in case["id"]:
            continue
        prev = earlier_run(case, cases) if not args.cold else None
        try:
            sim_argv, notes = translate(case, flags, prev)
        except NotExpressible as exc:
            skipped.append((case["id"], str(exc)))
            continue
        meas = measured(case)
        try:
            d = run_case(sim_argv)
        except Exception as exc:  # noqa: BLE001 - reported as a failed case
            skipped.append((case["id"], f"kvplan simulate failed: {exc}"))
            continue
        pred = predicted(d, meas)
        err = {m: (pred[m] / meas[m][1] - 1.0) for m in pred if pred[m] and meas[m][1]}
        held = not case["id"].startswith(FIT_SERIES)
        row = {"id": case["id"], "gpu": gpu_of(sim_argv), "held_out": held, "warm": "--warm-prompts" in sim_argv,
               "argv": sim_argv, "notes": notes,
               "measured": {m: v[1] for m, v in meas.items()}, "stat": {m: v[0] for m, v in meas.items()},
               "predicted": pred, "err": err, "clock": d.get("profile", {}).get("clock", {}).get("kernel_tables"),
               "own_tables": bool(d.get("profile", {}).get("clock", {}).get("kernel_tables_exact"))}
        rows.append(row)
        line = (f"{case['id'][:44]:<44} {row['gpu'][:14]:<14} {'H' if held else 'F'}{'W' if row['warm'] else ' '} "
                + "  ".join(f"{m[:6]} {pred.get(m) or 0:9.3f}/{meas[m][1]:9.3f} {fmt_pct(err.get(m))}"
                            for m in ("output_throughput", "ttft", "tpot") if m in meas))
        print(line, flush=True)
        if args.show_argv:
            print("    kvplan " + " ".join(sim_argv) + (f"   # {'; '.join(notes)}" if notes else ""))
    result = {"dev": summarize(rows, "DEV SET (every expressible case)"),
              "fit_half": summarize([r for r in rows if not r["held_out"]], "FIT HALF (constants fitted here)"),
              "held_out": summarize([r for r in rows if r["held_out"]], "HELD OUT (never fitted)"),
              # The clock's two regimes apart: a GPU with its own measured kernel tables, and one that
              # falls back to its catalog peaks with the nearest measured GPU's efficiencies.
              "held_out_own_tables": summarize([r for r in rows if r["held_out"] and r["own_tables"]],
                                               "HELD OUT, GPUs with their own measured kernel tables"),
              "held_out_fallback": summarize([r for r in rows if r["held_out"] and not r["own_tables"]],
                                             "HELD OUT, GPUs without kernel tables (roofline fallback)"),
              "cold": summarize([r for r in rows if not r["warm"]], "COLD CASES (no earlier run documented)"),
              "warm": summarize([r for r in rows if r["warm"]],
                                "DOCUMENTED-WARM CASES (--warm-prompts: the series' previous run on the same server)")}
    reasons: dict[str, int] = {}
    for _, why in skipped:
        key = re.sub(r"\d+(\.\d+)?", "N", why)[:110]
        reasons[key] = reasons.get(key, 0) + 1
    print(f"\nnot expressed: {len(skipped)} of {len(skipped) + len(rows)}")
    for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"  {n:3d}  {why}")
    if not args.no_validation and not args.only:
        from gpu_validation import run_validation

        result["validation"] = run_validation(flags, run_case)
    if args.write_validation and not args.only:
        write_validation(result)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "skipped": skipped, "summary": result}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
