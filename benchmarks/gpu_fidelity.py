"""How close `kvplan simulate` comes to published real-GPU `vllm bench serve` runs, measured as
generalization, not fit.

For every case of the development set (/work/shared/perf/dev_cases.json, or --cases FILE) type the
`kvplan simulate` command a user would type from what the case's source states (the USER VIEW:
model, GPU, vLLM version, TP, the serve flags and the benchmark's traffic as published; nothing the
product should know by itself, such as a version's defaults), run it in-process, and compare its
output throughput, TTFT and TPOT (median when published, else mean) with the measured numbers.
A second column, the SCENARIO VIEW, adds what the source documents about its setup that a user
would not type (a warm prefix cache from earlier runs on the same server, one GPU per Kubernetes
pod, the KV memory its start-up log printed, hardware the data set's curator flags).

Errors are reported three ways:
- FIT: the shipped constants (kvplan.sim.opmodel.Overheads), fitted to every case;
- LEAVE-ONE-SOURCE-OUT (LOSO): for each source group, the constants refitted on every other group
  (benchmarks/gpu_fit.py, in the scenario view) and that group scored in the user view;
- per source group, per GPU and per REGIME (burst / closed loop / request rate; ShareGPT / random;
  FP8 on Ampere; MoE), so a regime that fails is visible;
- per USER VIEW COMPLETENESS: the cases whose scenario view adds a setup the source documents (one
  GPU per pod, a warm prefix cache) or the curator's hardware flag, apart from the cases whose user
  view is complete, where the user view's error measures the clock alone.
Cases whose `data_warning` says they are a copy error or a duplicate are excluded (listed).

    python benchmarks/gpu_fidelity.py --no-loso            # score the shipped constants (~1 min)
    python benchmarks/gpu_fidelity.py                      # + LOSO refits, 2 rounds each as the shipped fit (~11 min)
    python benchmarks/gpu_fidelity.py --only gpustack-qwen3-14b --show-argv
    python benchmarks/gpu_fidelity.py --json out.json --write-validation
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
DEV_CASES = Path(os.environ.get("KVPLAN_DEV_CASES", "/work/shared/perf/dev_cases.json"))
METRICS = ("output_throughput", "ttft", "tpot")

#: Published names the catalog lacks -> a catalog model of identical architecture (layers, hidden
#: size, heads, KV heads, MLP width, vocabulary): same weights bytes, same kernels. Used only when
#: the published name does not load; the case says so.
SAME_SHAPE = {
    "Qwen/Qwen2-7B-Instruct": "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2-72B": "Qwen/Qwen2.5-72B-Instruct",
    "Qwen/Qwen2.5-32B": "Qwen/Qwen2.5-32B-Instruct",
    "meta-llama/Llama-3.1-8B (exact HF repo not stated; post says \"Llama-3.1-8B\")": "meta-llama/Llama-3.1-8B",
}
#: The GPU as the source words it -> kvplan's catalog name. Order matters (first match wins).
GPU_PATTERNS = [(r"A100-40GB", "A100-40GB", None),
                (r"A100-80GB|A100 80GB|A100-SXM4-80GB", "A100-80GB", None),
                (r"A100-SXM4", "A100-80GB", "A100-SXM4 memory not stated: 80GB, as the source's sibling pages say"),
                (r"H100", "H100", None), (r"H200", "H200", None), (r"MI300X", "MI300X", None),
                (r"L40S", "L40S", None), (r"B200", "B200", None), (r"RTX 3090", "RTX-3090", None),
                (r"RTX 4090", "RTX-4090", None), (r"GB10", "GB10", None)]
#: data_warning texts that take a case out of the score (the source's own error, not vLLM's behaviour)
EXCLUDE_WARNING = re.compile(r"copy error|duplicate of", re.IGNORECASE)
#: data_warning texts that say which hardware really ran: the scenario view types it
HARDWARE_WARNING = [(re.compile(r"behaves like H100 PCIe", re.IGNORECASE), "H100-PCIE-80GB")]


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


def _version(v) -> str | None:
    """The vLLM version a case states (the leading x.y[.z[.w]]), or None."""
    m = re.match(r"\s*(\d+\.\d+(?:\.\d+)*)", str(v or ""))
    return m.group(1) if m else None


def excluded(case: dict) -> str | None:
    """Why a case is not scored (its data_warning names a copy error or duplicate), or None."""
    w = case.get("data_warning") or ""
    return f"data_warning: {w[:90]}" if EXCLUDE_WARNING.search(w) else None


def gpu_name(case: dict) -> tuple[str, list[str]]:
    for pat, g, note in GPU_PATTERNS:
        if re.search(pat, case["gpu"]):
            return g, [note] if note else []
    raise NotExpressible(f"GPU {case['gpu'].split(' (')[0]} is not in kvplan's GPU catalog")


def translate(case: dict, prev: dict | None = None, *, view: str = "user") -> tuple[list[str], list[str]]:
    """The `kvplan simulate` argv for a case and what had to be approximated.

    ``view="user"``: what its source states (model, GPU, vLLM version, TP/PP, serve flags, traffic).
    ``view="scenario"``: also what the source documents about the setup that a user would not type:
    ``prev`` (the run the same server served just before: its prompts are warm), one GPU per pod,
    the KV memory the start-up log printed, a max_model_len the series' other logs state, and the
    hardware the data set's curator says really ran (data_warning)."""
    if case.get("completeness") != "full":
        raise NotExpressible(f"partial case: {case.get('partial_reason') or 'incomplete configuration'}")
    scenario = view == "scenario"
    notes: list[str] = []
    model, mnotes = _model(case["model"])
    notes += mnotes
    gpu, gnotes = gpu_name(case)
    notes += gnotes
    if scenario:
        for pat, hw in HARDWARE_WARNING:
            if pat.search(case.get("data_warning") or ""):
                gpu = hw
                notes.append(f"data_warning: the hardware behaves like {hw}")
    b, s = case["benchmark"], case["serve"]
    tp = int(case.get("tensor_parallel_size") or 1)
    argv = ["simulate", "--model", model, "--gpu", gpu, "-tp", str(tp)]
    if (case.get("pipeline_parallel_size") or 1) > 1:
        argv += ["-pp", str(case["pipeline_parallel_size"])]
    version = _version(case.get("vllm_version"))
    if version:
        argv += ["--vllm-version", version]
    else:
        notes.append("vLLM version not published: kvplan's default version")
    if scenario and tp > 1 and re.search(r"GPU pods", case.get("notes", "")):
        # one GPU per Kubernetes pod (Ray across containers): no CUDA IPC, so no custom all-reduce
        argv += ["--gpus-per-node", "1"]
        notes.append("one GPU per pod: TP over the network (--gpus-per-node 1)")
    if s.get("max_model_len") and str(s["max_model_len"]).isdigit():
        argv += ["--max-model-len", str(s["max_model_len"])]
    elif scenario and case.get("source_group") == "dennislee22-vLLM-benchmarking":
        # tests 6-8 published no server log; every published log of the series sets 16384
        argv += ["--max-model-len", "16384"]
        notes.append("max_model_len 16384 as in the series' published logs (not stated for this test)")
    for key, flag in (("max_num_batched_tokens", "--max-num-batched-tokens"), ("max_num_seqs", "--max-num-seqs"),
                      ("gpu_memory_utilization", "--gpu-memory-utilization"), ("block_size", "--block-size")):
        if s.get(key) not in (None, ""):
            argv += [flag, str(s[key])]
    if scenario and s.get("kv_cache_gib_per_gpu_reported"):
        argv += ["--kv-cache-memory", f"{s['kv_cache_gib_per_gpu_reported']}GiB"]
        notes.append("KV memory as the start-up log printed it")
    kvd = str(case.get("kv_cache_dtype") or "")
    if kvd.startswith("fp8"):
        argv += ["--kv-cache-dtype", "fp8"]
        if "skip-layers" in kvd:
            notes.append("--kv-cache-dtype-skip-layers sliding_window not modelled (all layers fp8)")
    if s.get("enable_prefix_caching") is False:
        argv.append("--no-enable-prefix-caching")
    if s.get("enforce_eager"):
        argv.append("--enforce-eager")
    if s.get("async_scheduling") is False:
        argv.append("--no-async-scheduling")
    elif s.get("async_scheduling") is True:
        argv.append("--async-scheduling")
    # traffic, as vllm bench serve was given it
    dataset = str(b.get("dataset") or "random")
    n = int(_num(b.get("num_prompts"), "number of prompts"))
    rate_txt = str(b.get("request_rate") if b.get("request_rate") is not None else "inf")
    rate_inf = "inf" in rate_txt or rate_txt.strip() in ("None", "")
    conc = b.get("max_concurrency")
    conc = int(_num(conc, "max concurrency")) if conc not in (None, "") else None
    argv += ["--num-prompts", str(n), "--request-rate", "inf" if rate_inf else str(_num(rate_txt, "rate"))]
    if conc:
        argv += ["--max-concurrency", str(conc)]
    if b.get("seed") is not None:
        argv += ["--seed", str(int(_num(b["seed"], "seed")))]
    if "sharegpt" in dataset.lower():
        argv += ["--dataset-name", "sharegpt"]
        if b.get("sharegpt_output_len"):
            argv += ["--sharegpt-output-len", str(int(_num(b["sharegpt_output_len"], "output length")))]
    elif "random" in dataset.lower():
        ilen, olen = int(_num(b.get("input_len"), "input length")), int(_num(b.get("output_len"), "output length"))
        argv += ["--dataset-name", "random", "--random-input-len", str(ilen), "--random-output-len", str(olen)]
        rr = b.get("random_range_ratio")
        ratio = 0.0
        if rr not in (None, "") and re.match(r"\s*0?\.\d+|\s*[01](\s|$)", str(rr)):
            ratio = _num(rr, "range ratio")
        if ratio:
            argv += ["--random-range-ratio", str(ratio)]
        if scenario and prev is not None and not ratio:
            pn = int(_num(prev["benchmark"].get("num_prompts"), "number of prompts"))
            pl = int(_num(prev["benchmark"].get("input_len"), "input length"))
            argv += ["--warm-prompts", str(pn)] + (["--warm-prompt-len", str(pl)] if pl != ilen else [])
            notes.append(f"documented warm prefix cache: the server served {prev['id']} just before "
                         f"({pn} prompts of {pl} tokens, same seed)")
    else:
        raise NotExpressible(f"dataset {dataset!r} is neither random nor sharegpt")
    if b.get("ignore_eos"):
        argv.append("--ignore-eos")
    endpoint = str(b.get("endpoint") or "")
    if "chat" in endpoint or "chat" in str(b.get("backend") or ""):
        # the bench flags kvplan simulate takes only inside a pasted command
        argv += ["--from-bench-cmd", "vllm bench serve --backend openai-chat --endpoint /v1/chat/completions"]
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


def errors(d: dict, meas: dict) -> dict:
    pred = predicted(d, meas)
    return {m: (pred[m] / meas[m][1] - 1.0) for m in pred if pred[m] and meas[m][1]}


# -- running kvplan simulate in-process ------------------------------------------------------------
_COMMAND = None


def run_case(argv: list[str]) -> dict:
    """`kvplan <argv>` in this process (the CLI's own code path) -> its JSON result."""
    global _COMMAND
    import click
    import typer

    if _COMMAND is None:
        from kvplan.cli.main import app

        _COMMAND = typer.main.get_command(app)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            _COMMAND.main(argv, standalone_mode=False)
        except (SystemExit, click.exceptions.Exit):
            pass
        except click.exceptions.ClickException as exc:
            raise RuntimeError(exc.format_message()) from None
    text = out.getvalue()
    if not text.strip().startswith("{"):
        lines = (err.getvalue() or text).strip().splitlines()
        raise RuntimeError(lines[-1][:300] if lines else "no output")
    return json.loads(text)


# -- classification ------------------------------------------------------------------------------
def regimes(case: dict, argv: list[str]) -> list[str]:
    """The regimes a case belongs to (traffic, dataset, weights on the GPU, model structure)."""
    from kvplan.hardware import find_gpu
    from kvplan.models import load_model
    from kvplan.models.params import MoEMLP

    out = []
    if "--max-concurrency" in argv:
        out.append("closed loop")
    elif argv[argv.index("--request-rate") + 1] == "inf":
        out.append("burst")
    else:
        out.append("request rate")
    out.append("sharegpt" if "sharegpt" in argv else "random")
    gpu = find_gpu(argv[argv.index("--gpu") + 1])
    model = argv[argv.index("--model") + 1]
    quant = (str(case.get("quantization") or "") + " " + model).lower()
    if "fp8" in quant and gpu.arch == "ampere":
        out.append("FP8 on Ampere")
    if "awq" in quant or "gptq" in quant:
        out.append("int4 (AWQ/GPTQ)")
    spec = load_model(model)
    if any(isinstance(layer.mlp, MoEMLP) for layer in spec.layers):
        out.append("MoE")
    out.append(f"TP {argv[argv.index('-tp') + 1]}")
    return out


# -- summaries ---------------------------------------------------------------------------------
def med(xs):
    return statistics.median(xs) if xs else None


def fmt_pct(x):
    return "   -  " if x is None else f"{x * 100:+6.1f}%"


def medians(rows: list[dict], key: str) -> dict:
    out = {}
    for m in METRICS:
        v = [abs(r[key][m]) for r in rows if r.get(key) and m in r[key]]
        out[m] = (round(med(v), 4) if v else None, len(v))
    return out


def table(title: str, groups: dict[str, list[dict]], columns: list[tuple[str, str]]) -> dict:
    """Print median |error| per group for each column (label, row key); return them."""
    print(f"\n{title}")
    head = "".join(f"  {label:^33}" for label, _ in columns)
    print(f"  {'':<26} {'cases':>5}{head}")
    print(f"  {'':<26} {'':>5}" + "".join(f"  {'thr':>9} {'TTFT':>10} {'TPOT':>10} " for _ in columns))
    out = {}
    for g, rs in groups.items():
        cells = []
        out[g] = {"cases": len(rs)}
        for label, key in columns:
            mm = medians(rs, key)
            out[g][key] = {m: v for m, (v, _) in mm.items()}
            cells.append("".join(f" {('-' if v is None else f'{v * 100:.1f}%'):>9}{'' if m == 'tpot' else ' '}"
                                 for m, (v, _) in mm.items()))
        print(f"  {g[:26]:<26} {len(rs):>5}" + "".join(f"  {c:<33}" for c in cells))
    return out


#: What a case's scenario view adds that its user view lacks, by the scenario note that says so
#: (translate): a setup its source documents, or hardware the data set's curator flags.
SETUP_NOTES = (("one GPU per pod", "setup: one GPU per pod"),
                ("documented warm prefix cache", "setup: warm prefix cache"),
                ("data_warning: the hardware behaves like", "curator: hardware flag"))
USER_VIEW_COMPLETE = "user view complete"


def completeness(row: dict) -> list[str]:
    """The groups of the USER VIEW COMPLETENESS table a case falls in: each setup its user view
    omits (a case may have two), else USER_VIEW_COMPLETE. The user view's error on a case with such
    a setup measures the setup as much as the clock; the complete cases measure the clock alone."""
    found = [label for marker, label in SETUP_NOTES if any(marker in note for note in row["notes"])]
    return found or [USER_VIEW_COMPLETE]


def complete_groups(rows: list[dict]) -> dict[str, dict]:
    """Per GPU, regime and source group, the LOSO medians of the cases whose user view is complete
    (the rows validation.json quotes as "complete"), computed without printing."""
    whole = [r for r in rows if completeness(r) == [USER_VIEW_COMPLETE]]
    keys = {"gpu": lambda r: [r["gpu"]], "regime": lambda r: r["regimes"], "source": lambda r: [r["source"]]}
    return {name: {g: {"cases": len(rs), "loso_err": {m: v for m, (v, _) in medians(rs, "loso_err").items()}}
                   for g, rs in by(whole, key).items()}
            for name, key in keys.items()}


def by(rows: list[dict], key) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {"all": rows}
    for r in rows:
        for k in key(r):
            groups.setdefault(k, []).append(r)
    return groups


VALIDATION_JSON = HERE.parent / "src" / "kvplan" / "sim" / "validation.json"
VALIDATION_DESCRIPTION = ("Median |relative error| of kvplan's GPU step-time model on the development set's "
                          "published real-GPU vLLM benchmark runs: leave-one-source-out, each case typed as a user "
                          "would type it (the user view), per GPU, per traffic regime and per source group; "
                          "'complete': the same over the group's cases whose user view is their whole setup (no "
                          "pod layout, warm cache or flagged hardware that only the source documents). Every "
                          "simulate/tune result quotes the rows of its GPU and its traffic regime.")


def write_validation(result: dict, cases_path: Path, rounds: int, path: Path = VALIDATION_JSON) -> Path:
    """src/kvplan/sim/validation.json (kvplan.sim.validation reads it): per GPU, per regime and per
    source group, the leave-one-source-out median |error| of the user view (what a new user's run
    should expect), with the fit's beside it; every simulate result quotes its GPU's and its traffic
    regime's. The file names what produced it: this command, the date and the development set's file
    (by name and content hash, never a machine's path)."""
    import datetime
    import hashlib

    from kvplan.sim import validation

    today = datetime.date.today().isoformat()

    complete = result.get("complete") or {}

    def row(entry: dict, whole: dict | None = None) -> dict:
        loso = entry.get("loso_err") or {}
        fit = entry.get("user_err") or {}
        out = {"cases": entry["cases"], "output_throughput": loso.get("output_throughput"), "ttft": loso.get("ttft"),
               "tpot": loso.get("tpot"), "fit": {m: fit.get(m) for m in METRICS},
               "benchmark": "benchmarks/gpu_fidelity.py (leave-one-source-out, user view)", "date": today}
        if whole and whole.get("cases"):
            # the same group's cases whose user view is complete (USER VIEW COMPLETENESS): the clock alone
            out["complete"] = {"cases": whole["cases"], **{m: (whole.get("loso_err") or {}).get(m) for m in METRICS}}
        return out

    data = {
        "format": validation.FORMAT,
        "description": VALIDATION_DESCRIPTION,
        "produced_by": {"command": f"python benchmarks/gpu_fidelity.py --rounds {rounds} --write-validation",
                        "date": today,
                        "dev_set": cases_path.name,
                        "dev_set_sha256": hashlib.sha256(cases_path.read_bytes()).hexdigest()},
        "by_gpu": {g: row(e, complete.get("gpu", {}).get(g)) for g, e in result["gpu"].items() if g != "all"},
        "by_regime": {g: row(e, complete.get("regime", {}).get(g)) for g, e in result["regime"].items()},
        "by_source": {g: row(e, complete.get("source", {}).get(g)) for g, e in result["source"].items()},
    }
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path.name}")
    return path


def prepare(cases: list[dict], only: str = "") -> tuple[list[dict], list[tuple[str, str]]]:
    """Each expressible case with its two argvs, measured numbers and regimes; and the rest, why."""
    prepared, skipped = [], []
    for case in cases:
        if only and only not in case["id"]:
            continue
        why = excluded(case)
        if why:
            skipped.append((case["id"], why))
            continue
        try:
            user, unotes = translate(case, view="user")
            scen, snotes = translate(case, earlier_run(case, cases), view="scenario")
        except NotExpressible as exc:
            skipped.append((case["id"], str(exc)))
            continue
        prepared.append({"id": case["id"], "source": case.get("source_group") or "?", "user_argv": user,
                         "scenario_argv": scen, "notes": snotes, "user_notes": unotes,
                         "meas": measured(case), "regimes": regimes(case, user)})
    return prepared, skipped


def score(prepared: list[dict], view: str, overheads=None) -> dict[str, dict]:
    """Case id -> {metric: relative error} (or {"failed": why}) with ``overheads`` (None: shipped)."""
    from kvplan.sim import opmodel

    saved = opmodel.DEFAULT_OVERHEADS
    if overheads is not None:
        opmodel.DEFAULT_OVERHEADS = overheads
    try:
        out = {}
        for p in prepared:
            try:
                out[p["id"]] = {"err": errors(run_case(p[f"{view}_argv"]), p["meas"])}
            except Exception as exc:  # noqa: BLE001 - reported as a failed case
                out[p["id"]] = {"failed": str(exc)}
        return out
    finally:
        opmodel.DEFAULT_OVERHEADS = saved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, default=DEV_CASES)
    ap.add_argument("--only", default="", help="only case ids containing this")
    ap.add_argument("--show-argv", action="store_true")
    ap.add_argument("--json", type=Path, help="write every row here")
    ap.add_argument("--no-validation", action="store_true", help="skip the validation set (published runs "
                    "outside the dev set)")
    ap.add_argument("--no-loso", action="store_true", help="skip the leave-one-source-out refits")
    ap.add_argument("--rounds", type=int, default=2, help="coordinate-search rounds per LOSO refit (the shipped fit runs 2)")
    ap.add_argument("--write-validation", action="store_true",
                    help="rewrite src/kvplan/sim/validation.json with the LOSO errors (the clock every result quotes)")
    args = ap.parse_args(argv)
    t0 = time.time()
    cases = json.loads(args.cases.read_text(encoding="utf-8"))
    prepared, skipped = prepare(cases, args.only)
    print(f"{len(cases)} cases from {args.cases}: {len(prepared)} expressed")
    user = score(prepared, "user")
    scen = score(prepared, "scenario")
    loso: dict[str, dict] = {}
    fits: dict[str, dict] = {}
    if not args.no_loso and not args.only:
        import gpu_fit

        for source in sorted({p["source"] for p in prepared}):
            train = [p for p in prepared if p["source"] != source]
            held = [p for p in prepared if p["source"] == source]
            ov, info = gpu_fit.fit(train, rounds=args.rounds, log=lambda s: print("   ", s, flush=True))
            fits[source] = {"overheads": ov.to_dict(), **info}
            print(f"  LOSO {source}: fitted on {len(train)} cases of the other sources "
                  f"(objective {info['objective']:.3f})", flush=True)
            loso.update(score(held, "user", ov))
    rows = []
    for p in prepared:
        u, s = user[p["id"]], scen[p["id"]]
        if "failed" in u and "failed" in s:
            skipped.append((p["id"], f"kvplan simulate failed: {u['failed']}"))
            continue
        from kvplan.hardware import find_gpu

        row = {"id": p["id"], "source": p["source"], "regimes": p["regimes"],
               "gpu": find_gpu(p["user_argv"][p["user_argv"].index("--gpu") + 1]).name,
               "user_argv": p["user_argv"], "scenario_argv": p["scenario_argv"], "notes": p["notes"],
               "measured": {m: v[1] for m, v in p["meas"].items()}, "stat": {m: v[0] for m, v in p["meas"].items()},
               "user_err": u.get("err"), "scenario_err": s.get("err"),
               "loso_err": (loso.get(p["id"]) or {}).get("err") if loso else None,
               "failed": {k: v["failed"] for k, v in (("user", u), ("scenario", s)) if "failed" in v}}
        rows.append(row)
        line = (f"{p['id'][:44]:<44} {row['gpu'][:14]:<14} "
                + "  ".join(f"{m[:3]} {fmt_pct((row['user_err'] or {}).get(m))}/{fmt_pct((row['scenario_err'] or {}).get(m))}"
                            + (f"/{fmt_pct((row['loso_err'] or {}).get(m))}" if loso else "")
                            for m in METRICS if m in p["meas"]))
        print(line, flush=True)
        if args.show_argv:
            print("    user:     kvplan " + " ".join(p["user_argv"]))
            print("    scenario: kvplan " + " ".join(p["scenario_argv"]) + (f"   # {'; '.join(p['notes'])}" if p["notes"] else ""))
    cols = [("fit, user view", "user_err"), ("fit, scenario view", "scenario_err")]
    if loso:
        cols.append(("LOSO, user view", "loso_err"))
    print("\nmedian |error|: output throughput, TTFT, TPOT (median, else mean, as published)")
    result = {"source": table("PER SOURCE GROUP", by(rows, lambda r: [r["source"]]), cols),
              "gpu": table("PER GPU", by(rows, lambda r: [r["gpu"]]), cols),
              "regime": table("PER REGIME", by(rows, lambda r: r["regimes"]), cols),
              "own_tables": table("KERNEL TABLES", by(rows, lambda r: [_table_kind(r["gpu"])]), cols),
              "completeness": table("USER VIEW COMPLETENESS (what the scenario view adds)", by(rows, completeness),
                                    cols)}
    if fits:
        result["loso_fits"] = fits
    if loso:
        result["complete"] = complete_groups(rows)
    print(f"\nnot expressed or excluded: {len(skipped)} of {len(skipped) + len(rows)}")
    reasons: dict[str, int] = {}
    for _, why in skipped:
        key = re.sub(r"\d+(\.\d+)?", "N", why)[:110]
        reasons[key] = reasons.get(key, 0) + 1
    for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"  {n:3d}  {why}")
    if not args.no_validation and not args.only:
        from gpu_validation import run_validation

        result["validation"] = run_validation(run_case)
    if args.write_validation and not args.only and loso:
        write_validation(result, args.cases, args.rounds)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "skipped": skipped, "summary": result}, indent=1) + "\n")
    print(f"\n({time.time() - t0:.0f} s)")
    return 0


def _table_kind(gpu: str) -> str:
    """How the clock times a GPU: its own kernel tables, another GPU's scaled to its published kernel
    measurements (kvplan.sim.kernel_transfer), or another GPU's efficiencies at its own peaks."""
    from kvplan.sim.kernel_transfer import transfer_for

    if gpu in _own():
        return "GPU with its own tables"
    return "borrowed, scaled to its kernels" if transfer_for(gpu) else "roofline fallback"


def _own() -> set:
    from kvplan.sim import kernels

    return set(kernels.available())


if __name__ == "__main__":
    sys.exit(main())
