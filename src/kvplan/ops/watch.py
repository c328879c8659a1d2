"""``kvplan watch URL``: a live view of a running vLLM server from its ``/metrics``.

Every ``interval`` the server is scraped (kvplan.bench.metrics parses it: the project's one
Prometheus parser). Rates and latency percentiles come from the *difference* between the newest
scrape and the oldest one inside the sliding ``window`` (histogram bucket deltas, as Prometheus'
``rate`` + ``histogram_quantile`` do), so they describe the last minute, not the server's life.

A server that restarts resets its counters: a counter that goes down (or a histogram whose count
does) starts a new window, and ``restarts`` counts it. A server that vanishes yields snapshots with
``up: false`` and the error; the watcher keeps polling until it comes back.
"""
from __future__ import annotations

import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

from ..bench import metrics as M
from .thresholds import Thresholds

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# process_start_time_seconds (prometheus_client's process collector, exported by vLLM's API
# server) changes when the server restarts, even if the new run's counters already passed the old.
_START = "process_start_time_seconds"
_PREFIXES = tuple(n for names in M.ALIASES.values() for n in names) + (_START,)
MAX_BODY = 32 << 20  # a /metrics body larger than this is not a vLLM server's


@dataclass(frozen=True)
class Snapshot:
    """One view of the server (JSON of ``--once --format json``). Rates and percentiles are over
    ``window_s`` seconds of scrapes (None until two scrapes of one server run exist)."""

    url: str
    up: bool
    error: Optional[str]
    scrapes: int
    restarts: int
    window_s: Optional[float]
    kv_cache_usage: Optional[float]
    requests_running: Optional[float]
    requests_waiting: Optional[float]
    preemptions_per_s: Optional[float]
    preemptions_in_window: Optional[float]
    prompt_tokens_per_s: Optional[float]
    generation_tokens_per_s: Optional[float]
    requests_per_s: Optional[float]
    ttft_p50_s: Optional[float]
    ttft_p99_s: Optional[float]
    e2e_p50_s: Optional[float]
    e2e_p99_s: Optional[float]
    queue_p50_s: Optional[float]
    queue_p99_s: Optional[float]
    gpu_memory_used_fraction: Optional[float]
    gpu: Optional[list] = None
    tripped: tuple[str, ...] = ()
    metric_names: dict = field(default_factory=dict)
    # counter increases inside the window (rates x window, unrounded): what a direct read compares
    prompt_tokens_in_window: Optional[float] = None
    generation_tokens_in_window: Optional[float] = None
    requests_in_window: Optional[float] = None
    #: with --prometheus: the scrape target (job, instance, model_names) and the source's notes
    #: (e.g. "GPU checks skipped: no DCGM exporter series ...")
    deployment: Optional[dict] = None
    notes: tuple[str, ...] = ()
    #: speculative decoding in the window (servers with --speculative-config): accepted / draft tokens, and
    #: 1 + accepted / drafts (V1's mean acceptance length: tokens per step per request)
    spec_acceptance_rate: Optional[float] = None
    spec_mean_acceptance_length: Optional[float] = None
    #: LoRA (servers with --enable-lora): the adapters vllm:lora_requests_info names as running / waiting
    lora_running_adapters: Optional[str] = None
    lora_waiting_adapters: Optional[str] = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tripped"] = list(self.tripped)
        d["notes"] = list(self.notes)
        return d


def fetch_metrics(url: str, timeout: float = 5.0) -> str:
    """GET ``url``/metrics (bounded time in all, and size; no redirect followed). Raises
    OSError/ValueError on failure, whatever the server did (a cut body, a bad status line)."""
    from ..bench.http import HttpError, get

    target = url.rstrip("/") + "/metrics"
    if urllib.parse.urlsplit(target).scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {url!r}")
    try:
        status, body = get(target, deadline_s=timeout, max_bytes=MAX_BODY)
    except HttpError as exc:
        if "larger than" in str(exc):
            raise ValueError("/metrics body too large") from None
        raise OSError(str(exc)) from None
    if status != 200:
        raise OSError(f"{target} answered HTTP {status}")
    return body.decode("utf-8", errors="replace")


def _restarted(old: M.MetricsSnapshot, new: M.MetricsSnapshot) -> bool:
    """A new process start time, or a lifetime counter that went down: the server restarted."""
    a, b = old.value(_START), new.value(_START)
    if a is not None and b is not None and a != b:
        return True
    for key in ("prompt_tokens", "generation_tokens", "request_success", "preemptions"):
        a, b = old.get(key), new.get(key)
        if a is not None and b is not None and b < a:
            return True
    for key in ("e2e", "ttft"):
        ha, hb = old.get_histogram(key), new.get_histogram(key)
        if ha is not None and hb is not None and hb.count < ha.count:
            return True
    return False


def _q(h: Optional[M.Histogram], q: float) -> Optional[float]:
    return None if h is None or h.count <= 0 else h.quantile(q)


class Watcher:
    """Keeps the sliding window of scrapes and turns it into :class:`Snapshot` s."""

    def __init__(self, url: str, window_s: float = 60.0, thresholds: Thresholds = Thresholds(),
                 fetch: Callable[[str], str] = fetch_metrics, clock: Callable[[], float] = time.monotonic,
                 gpu=None) -> None:
        self.url, self.window, self.th = url, window_s, thresholds
        self.fetch, self.clock, self.gpu = fetch, clock, gpu
        self.scrapes: deque[M.MetricsSnapshot] = deque()
        self.count = 0
        self.restarts = 0
        self.was_down = False

    def poll(self) -> Snapshot:
        t = self.clock()
        try:
            snap = M.parse_metrics(self.fetch(self.url), t=t, prefixes=_PREFIXES)
        except (OSError, ValueError, urllib.error.URLError) as exc:  # refused, timeout, reset, HTTP error
            self.was_down = True
            return self._down(f"{type(exc).__name__}: {exc}"[:300])
        return self.observe(snap)

    def observe(self, snap: M.MetricsSnapshot) -> Snapshot:
        """Add one scrape (fetched here, or read back from Prometheus) and return the view."""
        t = snap.t if snap.t is not None else self.clock()
        if not snap.series:
            self.was_down = True
            return self._down("no vLLM metrics in the /metrics answer")
        self.count += 1
        if self.scrapes and _restarted(self.scrapes[-1], snap):
            self.restarts += 1
            self.scrapes.clear()
        self.scrapes.append(snap)
        while len(self.scrapes) > 2 and t - self.scrapes[1].t >= self.window:
            self.scrapes.popleft()  # keep the newest scrape that is at least a window old
        self.was_down = False
        return self._snapshot()

    def _down(self, error: str) -> Snapshot:
        gpu = self.gpu.sample() if self.gpu is not None and self.gpu.active else None
        return Snapshot(self.url, False, error, self.count, self.restarts, None, *([None] * 14),
                        gpu=gpu, gpu_memory_used_fraction=_gpu_fraction(gpu), tripped=())

    def _snapshot(self) -> Snapshot:
        new = self.scrapes[-1]
        old = self.scrapes[0] if len(self.scrapes) > 1 else None
        span = (new.t - old.t) if old is not None else None
        rates: dict[str, Optional[float]] = {}
        deltas: dict[str, Optional[float]] = {}
        for key in ("preemptions", "prompt_tokens", "generation_tokens", "request_success"):
            if old is None or not span:
                rates[key] = deltas[key] = None
                continue
            d = deltas[key] = M.counter_delta(old.get(key), new.get(key))
            rates[key] = None if d is None else d / span
        lat: dict[str, Optional[float]] = {}
        for key in ("ttft", "e2e", "queue_time"):
            h = M.histogram_delta(old.get_histogram(key), new.get_histogram(key)) if old is not None else None
            lat[f"{key}_p50"], lat[f"{key}_p99"] = _q(h, 0.5), _q(h, 0.99)
        pre_window = deltas["preemptions"]
        spec = _spec_decode(old, new)
        lora = _lora_adapters(new)
        gpu = self.gpu.sample() if self.gpu is not None and self.gpu.active else None
        snap = Snapshot(
            self.url, True, None, self.count, self.restarts, round(span, 3) if span else None,
            new.get("kv_cache_usage"), new.get("requests_running"), new.get("requests_waiting"),
            rates["preemptions"], pre_window, rates["prompt_tokens"], rates["generation_tokens"], rates["request_success"],
            lat["ttft_p50"], lat["ttft_p99"], lat["e2e_p50"], lat["e2e_p99"], lat["queue_time_p50"], lat["queue_time_p99"],
            _gpu_fraction(gpu), gpu, (), {k: new.resolve(k) for k in ("kv_cache_usage", "ttft", "e2e", "queue_time", "itl")},
            deltas["prompt_tokens"], deltas["generation_tokens"], deltas["request_success"],
            spec_acceptance_rate=spec[0], spec_mean_acceptance_length=spec[1], lora_running_adapters=lora[0],
            lora_waiting_adapters=lora[1])
        return Snapshot(**{**asdict(snap), "tripped": tuple(tripped(snap, self.th))})


def _spec_decode(old: Optional[M.MetricsSnapshot], new: M.MetricsSnapshot) -> tuple[Optional[float], Optional[float]]:
    """Draft acceptance rate and mean acceptance length over the window (vLLM's SpecDecodingProm
    formulas, v1/spec_decode/metrics.py 0.19.0), from the counter deltas; (None, None) without them."""
    if old is None:
        return None, None
    accepted = M.counter_delta(old.get("spec_accepted_tokens"), new.get("spec_accepted_tokens"))
    drafted = M.counter_delta(old.get("spec_draft_tokens"), new.get("spec_draft_tokens"))
    drafts = M.counter_delta(old.get("spec_drafts"), new.get("spec_drafts"))
    rate = accepted / drafted if accepted is not None and drafted else None
    length = 1 + accepted / drafts if accepted is not None and drafts else None
    return (None if rate is None else round(rate, 4)), (None if length is None else round(length, 4))


def _lora_adapters(snap: M.MetricsSnapshot) -> tuple[Optional[str], Optional[str]]:
    """The newest vllm:lora_requests_info series (its value is the time it was set) names the adapters."""
    name = snap.resolve("lora_requests_info")
    if name is None:
        return None, None
    series = [(v, dict(lab)) for (n, lab), v in snap.series.items() if n == name]
    if not series:
        return None, None
    _, labels = max(series, key=lambda s: s[0])
    return labels.get("running_lora_adapters", ""), labels.get("waiting_lora_adapters", "")


def _gpu_fraction(gpu: Optional[list]) -> Optional[float]:
    fr = [g["memory_used_bytes"] / g["memory_total_bytes"] for g in gpu or ()
          if g.get("memory_used_bytes") is not None and g.get("memory_total_bytes")]
    return max(fr) if fr else None


def tripped(s: Snapshot, th: Thresholds) -> list[str]:
    """Names of the thresholds the snapshot is over (the same numbers ``kvplan alerts`` uses)."""
    out = []
    checks = [("gpu_memory", s.gpu_memory_used_fraction, th.gpu_memory), ("kv_cache_usage", s.kv_cache_usage, th.kv_cache_usage),
              ("e2e_p99", s.e2e_p99_s, th.e2e_p99), ("ttft_p99", s.ttft_p99_s, th.ttft_p99),
              ("waiting", s.requests_waiting, th.waiting), ("preemptions", s.preemptions_in_window, th.preemptions)]
    for name, value, limit in checks:
        if value is not None and limit is not None and not math.isnan(value) and value > limit:
            out.append(name)
    if s.spec_acceptance_rate is not None and s.spec_acceptance_rate < th.spec_acceptance:
        out.append("spec_acceptance")  # a floor, not a ceiling
    return out


def is_local(url: str) -> bool:
    return urllib.parse.urlsplit(url).hostname in LOOPBACK
