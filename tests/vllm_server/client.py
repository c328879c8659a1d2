"""Stdlib-only clients for the test server: OpenAI-style requests, SSE streaming, /metrics, bursts.

Everything here talks to 127.0.0.1 only (asserted) and is bounded in count and time.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import http.client
import json
import random
import re
import time
import urllib.parse
from typing import Any, Iterator

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _conn(base_url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    u = urllib.parse.urlsplit(base_url)
    if u.scheme != "http" or u.hostname not in _LOOPBACK:
        raise ValueError(f"refusing non-loopback URL {base_url!r}")
    return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout), u.path.rstrip("/")


def get_text(base_url: str, path: str, timeout: float = 10.0) -> tuple[int, str]:
    conn, prefix = _conn(base_url, timeout)
    try:
        conn.request("GET", prefix + path)
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        conn.close()


def post_json(base_url: str, path: str, body: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    conn, prefix = _conn(base_url, timeout)
    try:
        conn.request("POST", prefix + path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read().decode("utf-8", "replace")
        if r.status != 200:
            raise RuntimeError(f"POST {path} -> {r.status}: {data[:2000]}")
        return json.loads(data)
    finally:
        conn.close()


def stream_sse(
    base_url: str, path: str, body: dict[str, Any], timeout: float = 120.0
) -> Iterator[dict[str, Any]]:
    """POST with ``stream: true`` and yield each SSE ``data:`` JSON event until ``[DONE]``.

    ``timeout`` bounds each socket read and the whole stream.
    """
    deadline = time.monotonic() + timeout
    conn, prefix = _conn(base_url, timeout)
    try:
        conn.request(
            "POST",
            prefix + path,
            body=json.dumps(dict(body, stream=True)),
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"POST {path} -> {r.status}: {r.read()[:2000]!r}")
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"stream {path} exceeded {timeout} s")
            line = r.readline()
            if not line:
                raise RuntimeError("stream ended without [DONE]")
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return
            yield json.loads(payload)
    finally:
        conn.close()


# --------------------------------------------------------------------------- metrics
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclasses.dataclass
class Metrics:
    """A parsed Prometheus text scrape."""

    text: str
    samples: list[tuple[str, dict[str, str], float]]

    @classmethod
    def parse(cls, text: str) -> "Metrics":
        samples = []
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = _SAMPLE.match(line)
            if not m:
                continue
            labels = dict(_LABEL.findall(m.group(3) or ""))
            samples.append((m.group(1), labels, float(m.group(4))))
        return cls(text, samples)

    def series(self, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        return [
            (lab, v)
            for n, lab, v in self.samples
            if n == name and all(lab.get(k) == str(val) for k, val in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float:
        """Sum over the series of ``name`` matching ``labels``; KeyError if there is none."""
        s = self.series(name, **labels)
        if not s:
            raise KeyError(f"metric {name}{labels or ''} not in scrape")
        return sum(v for _, v in s)

    def get(self, name: str, default: float = 0.0, **labels: str) -> float:
        try:
            return self.value(name, **labels)
        except KeyError:
            return default

    def names(self) -> set[str]:
        return {n for n, _, _ in self.samples}


def scrape_metrics(base_url: str, timeout: float = 10.0) -> Metrics:
    status, text = get_text(base_url, "/metrics", timeout)
    if status != 200:
        raise RuntimeError(f"/metrics -> {status}")
    return Metrics.parse(text)


# --------------------------------------------------------------------------- requests
def model_name(base_url: str, timeout: float = 10.0) -> str:
    status, text = get_text(base_url, "/v1/models", timeout)
    if status != 200:
        raise RuntimeError(f"/v1/models -> {status}: {text[:500]}")
    return json.loads(text)["data"][0]["id"]


def random_prompt_ids(n: int, seed: int, low: int = 1000, high: int = 100_000) -> list[int]:
    """``n`` deterministic pseudo-random token ids (distinct per seed, so no prefix-cache sharing)."""
    rng = random.Random(seed)
    return [rng.randrange(low, high) for _ in range(n)]


@dataclasses.dataclass
class StreamResult:
    index: int
    ok: bool
    chunks: int = 0
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    first_token_s: float | None = None
    seconds: float = 0.0
    max_gap_s: float = 0.0
    finish_reason: str | None = None
    error: str | None = None


def stream_completion(
    base_url: str,
    model: str,
    prompt: list[int] | str,
    max_tokens: int,
    *,
    index: int = 0,
    timeout: float = 180.0,
    ignore_eos: bool = True,
) -> StreamResult:
    """One streamed /v1/completions request with exactly ``max_tokens`` output tokens (ignore_eos + min_tokens)."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:
        body.update(ignore_eos=True, min_tokens=max_tokens)
    res = StreamResult(index=index, ok=False)
    t0 = last = time.monotonic()
    try:
        for ev in stream_sse(base_url, "/v1/completions", body, timeout=timeout):
            now = time.monotonic()
            if ev.get("choices"):
                ch = ev["choices"][0]
                if ch.get("text"):
                    res.chunks += 1
                    if res.first_token_s is None:
                        res.first_token_s = now - t0
                    else:
                        res.max_gap_s = max(res.max_gap_s, now - last)
                    last = now
                if ch.get("finish_reason"):
                    res.finish_reason = ch["finish_reason"]
            if ev.get("usage"):
                res.completion_tokens = ev["usage"].get("completion_tokens")
                res.prompt_tokens = ev["usage"].get("prompt_tokens")
        res.ok = True
    except Exception as e:  # noqa: BLE001 - reported in the result
        res.error = f"{type(e).__name__}: {e}"
    res.seconds = time.monotonic() - t0
    return res


@dataclasses.dataclass
class BurstResult:
    results: list[StreamResult]
    preemptions_before: float
    preemptions_after: float
    seconds: float
    metrics_after: Metrics

    @property
    def preemptions(self) -> float:
        return self.preemptions_after - self.preemptions_before

    @property
    def all_ok(self) -> bool:
        return all(r.ok for r in self.results)

    def summary(self) -> str:
        bad = [r for r in self.results if not r.ok]
        return (
            f"{len(self.results)} requests in {self.seconds:.1f} s, preemptions +{self.preemptions:g}, "
            f"failed {len(bad)}: {[r.error for r in bad][:3]}, "
            f"max stall {max((r.max_gap_s for r in self.results), default=0):.1f} s"
        )


def preemption_burst(
    base_url: str,
    n_requests: int,
    prompt_tokens: int,
    max_tokens: int,
    timeout: float = 300.0,
    *,
    model: str | None = None,
    seed: int = 1234,
) -> BurstResult:
    """Fire ``n_requests`` concurrent streamed completions (distinct random prompts of
    ``prompt_tokens`` ids, exactly ``max_tokens`` outputs) and measure the change of
    ``vllm:num_preemptions_total``. Bounded: one thread per request, ``timeout`` per stream and overall."""
    if not (1 <= n_requests <= 64):
        raise ValueError("n_requests must be within 1..64")
    model = model or model_name(base_url)
    before = scrape_metrics(base_url).get("vllm:num_preemptions_total")
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=n_requests) as pool:
        futs = [
            pool.submit(
                stream_completion,
                base_url,
                model,
                random_prompt_ids(prompt_tokens, seed + i),
                max_tokens,
                index=i,
                timeout=timeout,
            )
            for i in range(n_requests)
        ]
        done, not_done = concurrent.futures.wait(futs, timeout=timeout + 30)
        results = [f.result() for f in futs if f in done]
        for i, f in enumerate(futs):
            if f in not_done:
                results.append(StreamResult(index=i, ok=False, error="did not finish in time"))
    elapsed = time.monotonic() - t0
    after_m = scrape_metrics(base_url)
    return BurstResult(
        results=sorted(results, key=lambda r: r.index),
        preemptions_before=before,
        preemptions_after=after_m.get("vllm:num_preemptions_total"),
        seconds=elapsed,
        metrics_after=after_m,
    )


# --------------------------------------------------------------------------- log parsing
KV_LINE = re.compile(
    r"(?P<device>CPU|GPU) KV cache size: (?P<tokens>[\d,]+) tokens.*?"
    r"Maximum concurrency for (?P<max_len>[\d,]+) tokens per request: (?P<conc>[\d.,]+)x"
)


@dataclasses.dataclass(frozen=True)
class KvLine:
    device: str
    tokens: int
    max_model_len: int
    concurrency: float
    line: str


def parse_kv_lines(log_text: str) -> list[KvLine]:
    """Every ``CPU KV cache size: N tokens ... Maximum concurrency for L tokens per request: Xx`` line."""
    out = []
    for line in log_text.splitlines():
        m = KV_LINE.search(line)
        if m:
            out.append(
                KvLine(
                    m["device"],
                    int(m["tokens"].replace(",", "")),
                    int(m["max_len"].replace(",", "")),
                    float(m["conc"].replace(",", "")),
                    line.strip(),
                )
            )
    return out
