"""The ``vllm bench serve`` result block of a simulated run, laid out as vLLM bench prints it
(``serve.py``: ``{:<40} {:<10}`` rows between ``=`` and ``-`` rules), so a prediction and a real
run's output read side by side."""
from __future__ import annotations

import math


def bench_block(d: dict) -> list[str]:
    b = d.get("bench") or {}
    if not b:
        return []
    out = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result (simulated) ", n=50, c="=")]

    def row(label, value, fmt="{:<10}"):
        out.append("{:<40} ".format(label) + fmt.format(value))

    row("Successful requests:", b["completed"])
    if b.get("failed"):
        row("Failed requests:", b["failed"])
    if b.get("max_concurrency") is not None:
        row("Maximum request concurrency:", b["max_concurrency"])
    rate = b.get("request_rate")
    if rate not in (None, "inf") and not (isinstance(rate, float) and math.isinf(rate)):
        row("Request rate configured (RPS):", float(rate), "{:<10.2f}")
    row("Benchmark duration (s):", b["duration"], "{:<10.2f}")
    row("Total input tokens:", b["total_input_tokens"])
    row("Total generated tokens:", b["total_output_tokens"])
    for label, key in (("Request throughput (req/s):", "request_throughput"),
                       ("Output token throughput (tok/s):", "output_throughput"),
                       ("Peak output token throughput (tok/s):", "max_output_tokens_per_s")):
        if b.get(key) is not None:
            row(label, b[key], "{:<10.2f}")
    row("Peak concurrent requests:", b.get("max_concurrent_requests"), "{:<10.2f}")
    if b.get("total_token_throughput") is not None:
        row("Total Token throughput (tok/s):", b["total_token_throughput"], "{:<10.2f}")
    for key, name, header in (("ttft", "TTFT", "Time to First Token"),
                              ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
                              ("itl", "ITL", "Inter-token Latency"), ("e2el", "E2EL", "End-to-end Latency")):
        out.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        row(f"Mean {name} (ms):", b[f"mean_{key}_ms"], "{:<10.2f}")
        row(f"Median {name} (ms):", b[f"median_{key}_ms"], "{:<10.2f}")
        row(f"P99 {name} (ms):", b[f"p99_{key}_ms"], "{:<10.2f}")
    out.append("=" * 50)
    return out
