"""The API server's work per request and per streamed token, measured on the real vLLM CPU server
(the tests' tiny Llama, vLLM's own API server process): the structure behind kvplan.sim.frontend.

The API server is one process (an asyncio loop); the engine core is another. This benchmark reads
the API server process's own CPU time (/proc/<pid>/stat utime + stime, not its children) around
bursts of requests, so the numbers are the work it does, not how long requests waited for it (a
shared host's load changes the waits, much less the CPU time):

* ingest: bursts of N requests with max_tokens 1 to /v1/completions and to /v1/chat/completions
  (the tiny model's Jinja chat template), N = 100 and 400: the slope is CPU seconds per request;
* output: M streams of K tokens (``ignore_eos``), streamed and not streamed, K = 32 and 160: the
  slope per token of the streamed runs is the per-stream-per-step cost (detokenize + SSE chunk);
  the non-streamed slope is the detokenization alone.

    flock /work/wt/heavy.lock .venv/bin/python benchmarks/frontend_cost.py [--json out.json]

How the numbers carry to a GPU host: the same Python code runs there on a server CPU core; kvplan
keeps the measured ratios (chat over completions, streamed token over request) and scales them
together by one factor fitted to the development set (benchmarks/gpu_fit.py, ``api_cpu_scale``).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.vllm_server import models, server  # noqa: E402

SERVER_ARGS = ("--max-model-len", "2048", "--max-num-seqs", "256")
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "2"}
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def prompt(i: int, words: int) -> str:
    return " ".join(WORDS[(i + j) % len(WORDS)] for j in range(words))


async def one(session, url: str, i: int, *, chat: bool, max_tokens: int, stream: bool, words: int) -> int:
    body = {"model": server.DEFAULT_SERVED_NAME, "max_tokens": max_tokens, "temperature": 0.0, "stream": stream,
            "ignore_eos": True}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt(i, words)}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = prompt(i, words)
        path = "/v1/completions"
    chunks = 0
    async with session.post(url + path, json=body) as resp:
        resp.raise_for_status()
        if stream:
            async for line in resp.content:
                if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                    chunks += 1
        else:
            await resp.read()
    return chunks


async def burst(url: str, n: int, **kw) -> tuple[float, int]:
    import aiohttp

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as session:
        t0 = time.monotonic()
        chunks = await asyncio.gather(*(one(session, url, i, **kw) for i in range(n)))
        return time.monotonic() - t0, sum(chunks)


def measure(srv, n: int, repeats: int, **kw) -> dict:
    """API-server CPU seconds (and wall seconds) of a burst, the median of ``repeats``."""
    cpu, wall, chunks = [], [], 0
    for _ in range(repeats):
        c0 = cpu_seconds(srv.pid)
        w, chunks = asyncio.run(burst(srv.base_url, n, **kw))
        cpu.append(cpu_seconds(srv.pid) - c0)
        wall.append(w)
    return {"n": n, "cpu_s": statistics.median(cpu), "wall_s": statistics.median(wall), "chunks": chunks, **kw}


def slope(a: dict, b: dict, per: str) -> float:
    return (b["cpu_s"] - a["cpu_s"]) / (b[per] - a[per])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    model = models.build_tiny_llama()
    srv = server.VllmServer(model.path, SERVER_ARGS, SERVER_ENV, label="frontend-cost-benchmark")
    out: dict = {"load_average": [os.getloadavg()[0]]}
    try:
        srv.start()
        print(f"server up in {srv.startup_seconds:.0f} s (API server pid {srv.pid}), load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        asyncio.run(burst(srv.base_url, 20, chat=False, max_tokens=4, stream=True, words=16))  # warm up
        asyncio.run(burst(srv.base_url, 20, chat=True, max_tokens=4, stream=True, words=16))
        r = args.repeats
        ingest = {}
        for chat in (False, True):
            name = "chat" if chat else "completions"
            lo = measure(srv, 100, r, chat=chat, max_tokens=1, stream=False, words=48)
            hi = measure(srv, 400, r, chat=chat, max_tokens=1, stream=False, words=48)
            ingest[name] = {"per_request_cpu_s": slope(lo, hi, "n"), "runs": [lo, hi]}
            print(f"ingest {name:<11}: {ingest[name]['per_request_cpu_s'] * 1e3:.3f} ms CPU per request "
                  f"(bursts of 100 / 400: {lo['cpu_s']:.2f} / {hi['cpu_s']:.2f} s CPU, {lo['wall_s']:.2f} / "
                  f"{hi['wall_s']:.2f} s wall)", flush=True)
        output = {}
        m = 64
        for stream in (True, False):
            name = "streamed" if stream else "not streamed"
            lo = measure(srv, m, r, chat=False, max_tokens=32, stream=stream, words=16)
            hi = measure(srv, m, r, chat=False, max_tokens=160, stream=stream, words=16)
            lo["tokens"], hi["tokens"] = m * 32, m * 160
            output[name] = {"per_token_cpu_s": slope(lo, hi, "tokens"), "runs": [lo, hi]}
            print(f"output {name:<12}: {output[name]['per_token_cpu_s'] * 1e6:.1f} us CPU per token "
                  f"({m} streams of 32 / 160 tokens: {lo['cpu_s']:.2f} / {hi['cpu_s']:.2f} s CPU; chunks "
                  f"{lo['chunks']} / {hi['chunks']})", flush=True)
        out.update(ingest=ingest, output=output)
        comp, chat = ingest["completions"]["per_request_cpu_s"], ingest["chat"]["per_request_cpu_s"]
        tok = output["streamed"]["per_token_cpu_s"]
        out["ratios"] = {"chat_over_completions": chat / comp, "chat_extra_over_completions": (chat - comp) / comp,
                         "streamed_token_over_completion_request": tok / comp}
        print(f"ratios: chat / completions {chat / comp:.2f}; streamed token / completions request "
              f"{tok / comp:.4f}", flush=True)
    finally:
        srv.stop()
        out["load_average"].append(os.getloadavg()[0])
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
