"""How fast can the load generator itself go? kvplan bench vs `vllm bench serve` vs GuideLLM.

All three drive the same FAKE streaming server (kvplan.bench.fake_server, its own process, on
127.0.0.1: 10 output tokens per request, written at once), open loop at a constant rate, for
``--duration`` seconds per trial. For each tool the rate climbs 50, 100, 200, … until a trial
fails, then bisects. A trial is *sustained* when:

* strict (kvplan's own bar): median schedule lag < 1 ms, achieved rate ≥ 99% of requested, no
  failed request. kvplan reports its lag; GuideLLM reports it as ``request_dispatch_delay``;
  ``vllm bench serve`` does not measure it, so for vLLM the strict bar is not available;
* rate only: achieved ≥ 99% of requested and no failed request (comparable for all three).

Also measures the HTTP client choice: closed-loop streaming throughput of aiohttp vs httpx.

    .venv/bin/python benchmarks/loadgen_capacity.py [--duration 5] [--tools kvplan,vllm,guidellm]
        [--guidellm /tmp/guidellm-venv/bin/guidellm] [--vllm-python .venv-vllm/bin/python] [--json out.json]

Every trial is bounded (duration + timeout); servers are started and stopped here, by PID.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[1]
OUT_TOKENS, IN_TOKENS = 10, 16
MAX_RATE = 12_800.0


def start_fake() -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, "-m", "kvplan.bench.fake_server", "--port", "0", "--max-lifetime", "3600"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    if not line.startswith("LISTENING"):
        raise SystemExit(f"fake server failed to start: {line!r}")
    return p, int(line.split()[1])


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.kill(p.pid, signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)


def _run(cmd: list[str], timeout: float, cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)


# --------------------------------------------------------------------------- one trial per tool
def trial_kvplan(url: str, rate: float, dur: float, workers: int = 1) -> dict:
    p = _run([sys.executable, "-m", "kvplan.cli.main", "bench", "--url", url, "--rate", str(rate), "--arrival",
              "constant", "--duration", f"{dur}s", "--endpoint", "completions", "--output-len", str(OUT_TOKENS),
              "--input-len", str(IN_TOKENS), "--format", "json", "--no-progress", "--workers", str(workers),
              "--timeout", "30s"], timeout=dur + 90)
    try:
        d = json.loads(p.stdout)
    except ValueError:
        return {"ok": False, "note": (p.stderr or p.stdout)[-300:]}
    achieved = d["rate"]["achieved"] or 0.0
    return {"achieved": achieved, "lag_p50": d["schedule_lag_s"]["p50"], "failed": d["requests"]["failed"],
            "sent": d["requests"]["total"], "client_bound": d["client_bound"]}


def trial_vllm(url: str, rate: float, dur: float, vllm_python: str, tokenizer: str) -> dict:
    script = ("import sys\nfrom vllm.utils.argparse_utils import FlexibleArgumentParser\n"
              "from vllm.benchmarks.serve import add_cli_args, main\n"
              "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n")
    with tempfile.TemporaryDirectory() as tmp:
        n = max(10, int(rate * dur))
        p = _run([vllm_python, "-c", script, "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
                  "--model", tokenizer, "--served-model-name", "fake-model", "--dataset-name", "random",
                  "--random-input-len", str(IN_TOKENS), "--random-output-len", str(OUT_TOKENS), "--num-prompts", str(n),
                  "--request-rate", str(rate), "--burstiness", "1000000", "--save-result", "--result-dir", tmp,
                  "--result-filename", "r.json", "--disable-tqdm", "--ready-check-timeout-sec", "0"],
                 timeout=dur * 4 + 180)
        try:
            d = json.loads((Path(tmp) / "r.json").read_text())
        except (OSError, ValueError):
            return {"ok": False, "note": p.stderr[-300:]}
    # vLLM rescales its gaps so that N arrivals span N / rate; its duration ends at the last completion
    return {"achieved": d["request_throughput"], "lag_p50": None, "failed": d["failed"], "sent": d["completed"] + d["failed"]}


def trial_guidellm(url: str, rate: float, dur: float, guidellm: str, tokenizer: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "g.json"
        p = _run([guidellm, "run", "--backend", f"kind=openai_http,target={url}", "--profile",
                  f"kind=constant,rate={rate}", "--data",
                  f"kind=synthetic_text,prompt_tokens={IN_TOKENS},output_tokens={OUT_TOKENS}",
                  "--constraint", f"kind=max_duration,seconds={dur}", "--tokenizer", f"kind=hf_auto,model={tokenizer}",
                  "--output", f"kind=json,path={out}", "--disable-console"], timeout=dur * 4 + 240, cwd=tmp)
        try:
            b = json.loads(out.read_text())["benchmarks"][0]
        except (OSError, ValueError, KeyError, IndexError):
            return {"ok": False, "note": p.stderr[-300:]}
    m = b["metrics"]
    ok = m["request_totals"]["successful"]
    # GuideLLM cancels the requests still in flight at max_duration ("incomplete"): those are not
    # failures of the tool, so only "errored" counts (kvplan instead waits for them to finish).
    failed = m["request_totals"].get("errored", 0)
    lag = m["request_dispatch_delay"]["successful"].get("median")
    return {"achieved": ok / b["duration"], "lag_p50": lag, "failed": failed, "sent": m["request_totals"]["total"]}


# --------------------------------------------------------------------------- search
def passes(r: dict, rate: float, strict: bool) -> bool:
    if r.get("ok") is False or r.get("failed", 1) > 0 or (r.get("achieved") or 0) < 0.99 * rate:
        return False
    if strict:
        return r.get("lag_p50") is not None and r["lag_p50"] < 0.001
    return True


def search(name: str, run: Callable[[float], dict], log: list) -> dict:
    """Highest sustained rate for both bars (one set of trials serves both)."""
    results: dict[float, dict] = {}

    def at(rate: float) -> dict:
        rate = round(rate, 1)
        if rate not in results:
            t = time.monotonic()
            r = run(rate)
            r["wall_s"] = round(time.monotonic() - t, 1)
            results[rate] = r
            log.append({"tool": name, "rate": rate, **r})
            lag = "-" if r.get("lag_p50") is None else f"{r['lag_p50'] * 1e3:.2f} ms"
            print(f"  {name:>9} @ {rate:>8.1f}/s: achieved {r.get('achieved') or 0:>8.1f}/s, lag p50 {lag}, "
                  f"failed {r.get('failed')}, strict {'PASS' if passes(r, rate, True) else 'fail'}, "
                  f"rate {'PASS' if passes(r, rate, False) else 'fail'}", flush=True)
        return results[rate]

    best = {}
    for strict in (False, True):
        lo, hi, rate = 0.0, None, 50.0
        while rate <= MAX_RATE:
            if passes(at(rate), rate, strict):
                lo, rate = rate, rate * 2
            else:
                hi = rate
                break
        if hi is None:
            best["strict" if strict else "rate"] = lo
            continue
        for _ in range(3):  # bisect to within ~12%
            if lo == 0 or hi / lo < 1.15:
                break
            mid = (lo * hi) ** 0.5
            if passes(at(mid), mid, strict):
                lo = mid
            else:
                hi = mid
        best["strict" if strict else "rate"] = round(lo, 1)
    return best


# --------------------------------------------------------------------------- HTTP client choice
_CLIENT_BENCH = r'''
import asyncio, sys, time
kind, url, secs, conc = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
body = b'{"model":"m","prompt":"a b c","max_tokens":10,"stream":true}'
async def main():
    done = 0
    end = time.monotonic() + secs
    if kind == "aiohttp":
        import aiohttp
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            async def user():
                nonlocal done
                while time.monotonic() < end:
                    async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                        async for _ in r.content.iter_any():
                            pass
                    done += 1
            await asyncio.gather(*(user() for _ in range(conc)))
    else:
        import httpx
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=None)) as c:
            async def user():
                nonlocal done
                while time.monotonic() < end:
                    async with c.stream("POST", url, content=body, headers={"Content-Type": "application/json"}) as r:
                        async for _ in r.aiter_raw():
                            pass
                    done += 1
            await asyncio.gather(*(user() for _ in range(conc)))
    print(done / secs)
asyncio.run(main())
'''


def client_choice(url: str, secs: float) -> dict:
    out = {}
    for kind in ("aiohttp", "httpx"):
        p = _run([sys.executable, "-c", _CLIENT_BENCH, kind, url + "/v1/completions", str(secs), "32"],
                 timeout=secs + 60)
        try:
            out[kind] = round(float(p.stdout.strip()), 1)
        except ValueError:
            out[kind] = None
        print(f"  {kind}: {out[kind]} streamed requests/s (closed loop, 32 in flight)", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--tools", default="kvplan,vllm,guidellm")
    ap.add_argument("--guidellm", default="/tmp/guidellm-venv/bin/guidellm")
    ap.add_argument("--vllm-python", default=str(REPO / ".venv-vllm/bin/python"))
    ap.add_argument("--tokenizer", default=None, help="a local tokenizer folder (vLLM/GuideLLM need one)")
    ap.add_argument("--json", default=None, help="write every trial and the table here")
    args = ap.parse_args()
    tok = args.tokenizer or next((str(p) for p in sorted((REPO / ".cache/vllm-models").glob("tiny-llama-*"))), None)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    fake, port = start_fake()
    url = f"http://127.0.0.1:{port}"
    log: list = []
    best: dict = {}
    try:
        print("HTTP client choice:")
        clients = client_choice(url, args.duration)
        runners = {"kvplan": lambda r: trial_kvplan(url, r, args.duration),
                   "vllm": lambda r: trial_vllm(url, r, args.duration, args.vllm_python, tok),
                   "guidellm": lambda r: trial_guidellm(url, r, args.duration, args.guidellm, tok)}
        for name in tools:
            if name in ("vllm", "guidellm") and not tok:
                print(f"{name}: skipped (no tokenizer folder; build the test models or give --tokenizer)")
                continue
            if name == "guidellm" and not Path(args.guidellm).exists():
                print(f"guidellm: skipped ({args.guidellm} not found)")
                continue
            print(f"{name}:", flush=True)
            best[name] = search(name, runners[name], log)
    finally:
        stop(fake)
    k = best.get("kvplan", {})
    print("\n| tool | sustained rate, strict (lag p50 < 1 ms, ≥ 99%) | kvplan ÷ tool | sustained rate, rate only (≥ 99%) "
          "| kvplan ÷ tool |\n|---|---|---|---|---|")
    for name, b in best.items():
        def ratio(key: str) -> str:
            return "-" if not b.get(key) or not k.get(key) or name == "kvplan" or (name == "vllm" and key == "strict") \
                else f"{k[key] / b[key]:.2f}×"
        strict = "n/a (no lag metric)" if name == "vllm" else \
            (f"{b['strict']:,.0f}/s" if b.get("strict") else "none (fails at 50/s)")
        print(f"| {name} | {strict} | {ratio('strict')} | {b.get('rate', 0):,.0f}/s | {ratio('rate')} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"best": best, "clients": clients, "trials": log,
                                               "duration_s": args.duration, "cpus": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
