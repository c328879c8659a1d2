"""Regenerate the numbers README.md shows from the commands that produce them, or check them.

    python scripts/readme_numbers.py            # check: exit 1 and a diff when README.md is stale
    python scripts/readme_numbers.py --write    # rewrite README.md
    python scripts/readme_numbers.py --write --slow   # also re-run the two tune searches (minutes)

Two kinds of places in README.md:

* **blocks** between ``<!-- readme:NAME -->`` and ``<!-- /readme:NAME -->``: the scenario's plan
  output (the real ``kvplan plan`` text at 80 columns, the lines shown) and the simulated table;
* **facts**: one number in the prose, found by a pattern (:data:`FACTS`), e.g. the catalog's
  size or the tune search's answer.

Every value comes from running kvplan in this process (plan, simulate, catalog). The two tune
searches take minutes, so ``--slow`` runs them and stores their answers in
``scripts/readme_numbers.json`` beside the commands; without it (and in tests/test_readme_numbers.py)
their facts are rendered from that file. Timings (seconds per run) and the accuracy figures of
benchmarks/ are measurements, not outputs of a command: they stay as written, each with the
benchmark that measured it.
"""
from __future__ import annotations

import argparse
import difflib
import io
import json
import re
import sys
from contextlib import redirect_stdout
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
STORED = Path(__file__).with_name("readme_numbers.json")

MODEL = "meta-llama/Llama-2-70b-chat-hf"
SCENARIO = ["--model", MODEL, "--gpu", "A100-80GB", "-tp", "4"]
TRAFFIC = ["--rate", "50", "--input-len", "uniform:800,1200", "--output-len", "512"]
LONGEST_REQUEST = 1200 + 512  # the traffic's longest prompt + its output
TUNE_SCENARIO = ["tune", "--model", MODEL, "--gpu", "A100-80GB,H100", "--gpus", "4,8,16,32", *TRAFFIC,
                 "--slo", "ttft_p99=2s,tpot_p99=100ms", "--objective", "min_gpus"]
TUNE_WIDE = ["tune", "--model", MODEL, "--gpu", "A100-80GB,H100", "--gpus", "4,8,16,32,64,128",
             "--max-num-seqs", "64,128,256", "--num-requests", "5000", *TRAFFIC, "--slo",
             "ttft_p99=2s,tpot_p99=100ms", "--objective", "min_gpus"]


def kvplan(*args: str, columns: int = 80) -> tuple[int, str]:
    """(exit code, stdout) of ``kvplan ARGS`` in this process, at a fixed terminal width."""
    import os

    from typer.testing import CliRunner

    from kvplan.cli.main import app

    os.environ["KVPLAN_OFFLINE"] = "1"
    out = CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1", "KVPLAN_OFFLINE": "1"},
                             terminal_width=columns, catch_exceptions=False)
    return out.exit_code, out.stdout


@lru_cache(maxsize=None)
def run_json(*args: str) -> dict:
    code, text = kvplan(*args, "--format", "json")
    if code not in (0, 1):
        raise SystemExit(f"kvplan {' '.join(args)} exited {code}")
    return json.loads(text)


# --------------------------------------------------------------------------- the scenario's plan
def _pick(text: str, keep: Callable[[str], bool]) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if keep(line)]


def scenario_plan() -> str:
    cmd8 = ["plan", *SCENARIO, "--max-model-len", "8192"]
    cmd2 = ["plan", *SCENARIO, "--max-model-len", "2048"]
    _, t8 = kvplan(*cmd8)
    _, t2 = kvplan(*cmd2)
    lines = t8.splitlines()
    start = next(i for i, ln in enumerate(lines) if "verdict:" in ln)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("╰"))
    verdict = [ln.rstrip() for ln in lines[start:end + 1]]
    per_token = _pick(t8, lambda ln: ln.startswith("KV bytes per token"))
    blog = next(i for i, ln in enumerate(lines) if "batch × layers" in ln)
    blog_lines = [lines[blog].strip("│ ").rstrip(), lines[blog + 1].strip("│ ").rstrip()]
    first = next(i for i, ln in enumerate(lines) if "Grouped-query attention" in ln)
    gqa = [lines[first].strip("│ ").rstrip()]
    for ln in lines[first + 1:]:  # the bullet's wrapped lines, up to the next bullet or the panel's end
        text = ln.strip("│ ").rstrip()
        if not text or text.startswith("•") or ln.startswith("╰"):
            break
        gqa.append(text)
    kv_line = _pick(t2, lambda ln: "GPU KV cache size" in ln or ("request:" in ln and "x" in ln and "│" in ln))
    figures = _pick(t2, lambda ln: ln.startswith(("Available KV cache memory / GPU", "GPU blocks (usable)")))
    serve = run_json(*cmd2)["serve_command"]
    out = ["```text", "$ kvplan " + " ".join(cmd8), *verdict, *per_token, *blog_lines, *gqa, "",
           "$ kvplan " + " ".join(cmd2), *kv_line, *figures, serve, "```"]
    return "\n".join(out)


# --------------------------------------------------------------------------- the scenario, simulated
def sim(max_model_len: int, *extra: str) -> dict:
    return run_json("simulate", *SCENARIO, "--max-model-len", str(max_model_len), *TRAFFIC, "--num-requests", "10000",
                    *extra)


def capacity() -> dict:
    """The README's own command: max sustainable QPS under TTFT p99 ≤ 2 s per max_model_len."""
    return run_json("simulate", *SCENARIO, "--max-model-len", "2048", *TRAFFIC, "--find-saturation", "--slo",
                    "ttft_p99=2s", "--capacity")


def _max_qps(max_model_len: int) -> str:
    row = next((r for r in capacity().get("capacity_boundary") or () if r["max_model_len"] == max_model_len), None)
    rate = row.get("max_sustainable_qps") if row else None
    return "–" if rate is None else f"{rate:.2f}"


def scenario_sim() -> str:
    rows = []
    cols = []
    for L in (2048, 4096):
        d = sim(L)
        lat, thr = d["latency_s"], d["throughput"]
        cols.append({"starts": "yes", "blocks": f"{d['kv_cache']['num_gpu_blocks']:,}",
                     "throughput": f"{thr['requests_per_s']:.2f} req/s, {thr['output_tokens_per_s']:,.0f} output tok/s",
                     "ttft": f"{lat['ttft']['p50']:,.0f} s / {lat['ttft']['p99']:,.0f} s (the queue)",
                     "tpot": f"{lat['tpot']['p50'] * 1000:.0f} / {lat['tpot']['p99'] * 1000:.0f} ms",
                     "pre": f"{_preemptions(d):,}, {int(d['rejected']):,}, {d['kv_cache']['peak_usage']:.0%}",
                     "qps": _max_qps(L)})
    refused = run_json("plan", *SCENARIO, "--max-model-len", "8192")["startup"]
    why = "no: vLLM refuses (`max_position_embeddings` 4096)" if refused["error_kind"] == "max_model_len_above_derived" \
        else "no"
    same = [cols[1][k] == cols[0][k] for k in ("throughput", "ttft", "tpot", "pre")]
    label = {"starts": "starts", "blocks": "KV blocks", "throughput": "throughput", "ttft": "TTFT p50 / p99",
             "tpot": "TPOT p50 / p99", "pre": "preemptions, rejections, peak KV usage", "qps": "max QPS with TTFT p99 ≤ 2 s"}
    rows.append("| | `--max-model-len 2048` | `--max-model-len 4096` | `--max-model-len 8192` |")
    rows.append("|---|---|---|---|")
    for key, name in label.items():
        second = "same" if key in ("throughput", "ttft", "tpot", "pre") and same[("throughput", "ttft", "tpot",
                                                                                  "pre").index(key)] else cols[1][key]
        third = why if key == "starts" else "–"
        rows.append(f"| {name} | {cols[0][key]} | {second} | {third} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- tune (stored: minutes)
def tune_answers(slow: bool) -> dict:
    if slow:
        stored = {}
        for name, args in (("scenario", TUNE_SCENARIO), ("wide", TUNE_WIDE)):
            d = run_json(*args)
            w = d.get("winner") or {}
            if not w:  # the prose says "answers N GPUs": a search without a winner needs the text changed
                raise SystemExit(f"readme_numbers: `kvplan {' '.join(args)}` found no configuration that meets "
                                 "the SLO; README.md's tune prose needs rewriting before its numbers can be")
            f = w.get("flags") or {}
            stored[name] = {"command": "kvplan " + " ".join(args), "gpus": w.get("gpus"), "gpu": f.get("gpu"),
                            "tp": f.get("tensor_parallel_size"), "dp": f.get("data_parallel_size"),
                            "kv_cache_dtype": f.get("kv_cache_dtype"), "max_num_seqs": f.get("max_num_seqs"),
                            "ttft_p99_ms": round(w["latency_s"]["ttft"]["p99"] * 1000) if w else None,
                            "tpot_p99_ms": round(w["latency_s"]["tpot"]["p99"] * 1000) if w else None,
                            "trace_requests": (d.get("trace") or {}).get("requests"),
                            "combinations": d.get("combinations")}
        STORED.write_text(json.dumps(stored, indent=1) + "\n")
    return json.loads(STORED.read_text())


def _short_gpu(name: str) -> str:
    return "H100" if name and name.startswith("H100") else "A100" if name and name.startswith("A100") else name


# --------------------------------------------------------------------------- facts in the prose
@dataclass(frozen=True)
class Fact:
    name: str
    pattern: str  # one group: the number as the README writes it
    value: Callable[[bool], str]


def _catalog_size(_slow: bool) -> str:
    from kvplan.models import catalog

    return str(len(catalog.entries()))


def _concurrency(L: int) -> str:
    return f"{run_json('plan', *SCENARIO, '--max-model-len', str(L))['kv']['max_concurrency']:.0f}"


FACTS = (
    Fact("catalog size", r"the built-in catalog \((\d+) models, offline\)", _catalog_size),
    Fact("engine steps", r"10,000 requests of the scenario below take [0-9.]+ s \(([0-9,]+) engine steps\)",
         lambda s: f"{sim(2048)['engine']['steps']:,}"),
    Fact("naive formula", r"says one such request needs ([0-9.]+) GiB of KV cache",
         lambda s: f"{run_json('plan', *SCENARIO, '--max-model-len', '8192')['naive']['claimed_bytes'] / (1 << 30):g}"),
    Fact("prefill rate", r"prefills about ([0-9,]+) prompt tokens per second",
         lambda s: f"{round(sim(2048)['throughput']['input_tokens_per_s'], -2):,.0f}"),
    Fact("longest request", r"no request \(at most ([0-9,]+) tokens\)", lambda s: f"{LONGEST_REQUEST:,}"),
    Fact("concurrency 2048", r'"(\d+)× vs \d+× concurrency"', lambda s: _concurrency(2048)),
    Fact("concurrency 4096", r'"\d+× vs (\d+)× concurrency"', lambda s: _concurrency(4096)),
    Fact("completion rate", r"replica completes about ([0-9.]+) requests/s",
         lambda s: f"{sim(2048)['throughput']['requests_per_s']:.1f}"),
    Fact("overload", r"50 QPS overloads it (\d+)-fold", lambda s: f"{50 / sim(2048)['throughput']['requests_per_s']:.0f}"),
    Fact("512 seqs preemptions", r"`--max-num-seqs 512`: ([0-9,]+) preemptions",
         lambda s: f"{_preemptions(sim(2048, '--max-num-seqs', '512')):,}"),
    Fact("512 seqs rate", r"`--max-num-seqs 512`: [0-9,]+ preemptions, ([0-9.]+) req/s",
         lambda s: f"{sim(2048, '--max-num-seqs', '512')['throughput']['requests_per_s']:.2f}"),
    Fact("tune answer", r"and answers (\d+ H100s TP \d+ × DP \d+)", lambda s: _tune(s, "scenario", "{gpus} {gpu}s TP {tp} × DP {dp}")),
    Fact("tune trace", r"the command above runs 1,000 requests, then (\d{1,3}(?:,\d{3})*)",
         lambda s: _tune(s, "scenario", "{trace_requests:,}")),
    Fact("tune wide answer", r"still answers (\d+ H100s, TP \d+ × DP \d+)",
         lambda s: _tune(s, "wide", "{gpus} {gpu}s, TP {tp} × DP {dp}")),
    Fact("tune wide kv", r"\((fp8|auto|bfloat16|float16) KV cache, `--max-num-seqs", lambda s: _tune(s, "wide", "{kv_cache_dtype}")),
    Fact("tune wide seqs", r"KV cache, `--max-num-seqs\s+(\d+)`", lambda s: _tune(s, "wide", "{max_num_seqs}")),
    Fact("tune wide ttft", r"`\): TTFT p99 (\d+) ms, TPOT p99 \d+ ms", lambda s: _tune(s, "wide", "{ttft_p99_ms}")),
    Fact("tune wide tpot", r"`\): TTFT p99 \d+ ms, TPOT p99 (\d+) ms", lambda s: _tune(s, "wide", "{tpot_p99_ms}")),
    Fact("tune wide combinations", r"\(5,000 requests, ([0-9,]+) combinations", lambda s: _tune(s, "wide", "{combinations:,}")),
)


def _preemptions(d: dict) -> int:
    p = d["preemptions"]
    return int(p["total"] if isinstance(p, dict) else p)


def _tune(slow: bool, which: str, fmt: str) -> str:
    del slow  # the searches ran (--slow) before the facts are rendered: read their stored answers
    t = dict(tune_answers(False)[which])
    t["gpu"] = _short_gpu(t["gpu"])
    return fmt.format(**t)


BLOCKS: dict[str, Callable[[], str]] = {"scenario-plan": scenario_plan, "scenario-sim": scenario_sim}


def render(text: str, slow: bool = False) -> str:
    """README.md's text with every block and fact regenerated."""
    for name, make in BLOCKS.items():
        open_, close = f"<!-- readme:{name} -->", f"<!-- /readme:{name} -->"
        if open_ not in text or close not in text:
            raise SystemExit(f"README.md: the markers of block {name!r} are missing")
        head, rest = text.split(open_, 1)
        _, tail = rest.split(close, 1)
        text = f"{head}{open_}\n{make()}\n{close}{tail}"
    for fact in FACTS:
        matches = list(re.finditer(fact.pattern.replace(" ", r"\s+"), text))  # the prose wraps anywhere
        if not matches:
            raise SystemExit(f"README.md: no place matches fact {fact.name!r} ({fact.pattern})")
        value = fact.value(slow)
        for m in reversed(matches):
            text = text[:m.start(1)] + _keep_breaks(m.group(1), value) + text[m.end(1):]
    return text


def _keep_breaks(old: str, new: str) -> str:
    """``new`` with ``old``'s line breaks where both have the same words (a wrapped answer stays wrapped)."""
    gaps, words = re.findall(r"\s+", old), new.split(" ")
    if len(gaps) != len(words) - 1:
        return new
    return "".join(w + (gaps[i] if i < len(gaps) else "") for i, w in enumerate(words))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite README.md")
    ap.add_argument("--slow", action="store_true", help="re-run the tune searches (minutes) into readme_numbers.json")
    args = ap.parse_args(argv)
    current = README.read_text(encoding="utf-8")
    with redirect_stdout(io.StringIO()):
        if args.slow:
            tune_answers(True)  # once, into readme_numbers.json; the facts read it from there
        fresh = render(current)
    if args.write:
        README.write_text(fresh, encoding="utf-8")
        print("README.md regenerated" if fresh != current else "README.md already current")
        return 0
    if fresh != current:
        sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), fresh.splitlines(True), "README.md",
                                                   "README.md (regenerated)"))
        print("\nREADME.md is stale: run make readme (python scripts/readme_numbers.py --write)", file=sys.stderr)
        return 1
    print("README.md: every generated number is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
