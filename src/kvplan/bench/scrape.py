"""The server's side of a run, on the client's time axis: ``/metrics`` every interval (and GPU
memory/utilisation through NVML when the server is on this host).

Two full scrapes bracket the run (their difference is ``server.deltas``: every counter and
histogram series); in between, each scrape is parsed only for the families kvplan reads (a line
filter first, so a 1 s scrape costs little CPU next to the load loop) and reduced to one sample:
gauges as read, counters and histograms as the increase since the previous scrape, i.e.
per-interval values, never lifetime averages.
"""
from __future__ import annotations

import asyncio
import time
from typing import Optional

import aiohttp

from . import metrics as M
from .client import read_capped

#: vLLM's /metrics is a few hundred KB; a larger answer is not read
MAX_METRICS_BYTES = 32 << 20

_PREFIXES = tuple(name for names in M.ALIASES.values() for name in names)
HIST_QUANTILES = (0.5, 0.9, 0.99)


def _round(x: Optional[float], nd: int = 6) -> Optional[float]:
    return None if x is None else round(x, nd)


class ServerScraper:
    def __init__(self, base_url: str, interval_s: float, headers: Optional[dict] = None):
        self.url = base_url.rstrip("/") + "/metrics"
        self.interval = interval_s
        self.headers = headers or {}
        self.available = True
        self.notice: Optional[str] = None
        self.errors = 0
        self.first: Optional[M.MetricsSnapshot] = None
        self.last_full: Optional[M.MetricsSnapshot] = None
        self.prev: Optional[M.MetricsSnapshot] = None
        self.samples: list[dict] = []
        self.gpu = None  # GpuSampler, set by the caller when the server is local

    async def _get(self, session: aiohttp.ClientSession, t0: float, full: bool) -> Optional[M.MetricsSnapshot]:
        sent = time.monotonic()
        try:
            async with session.get(self.url, headers=self.headers, timeout=aiohttp.ClientTimeout(total=5),
                                   allow_redirects=False) as r:  # the key goes nowhere else
                if r.status != 200:
                    self.errors += 1
                    if self.first is None:
                        self.notice = f"GET /metrics answered HTTP {r.status}: no server-side metrics"
                    return None
                raw = await read_capped(r, MAX_METRICS_BYTES)
                if raw is None:
                    self.errors += 1
                    if self.first is None:
                        self.notice = f"GET /metrics answered more than {MAX_METRICS_BYTES >> 20} MiB: no server-side metrics"
                    return None
                text = raw.decode("utf-8", "replace")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self.errors += 1
            if self.first is None:
                self.notice = f"GET /metrics failed ({type(exc).__name__}): no server-side metrics"
            return None
        t = (sent + time.monotonic()) / 2 - t0  # the midpoint is the best guess of when it was read
        snap = M.parse_metrics(text, t=t, prefixes=None if full else _PREFIXES)
        if full and not snap.series:
            self.notice = "/metrics is not Prometheus text: no server-side metrics"
            return None
        return snap

    async def baseline(self, session: aiohttp.ClientSession, t0: float) -> None:
        self.first = await self._get(session, t0, full=True)
        self.available = self.first is not None
        if self.available:
            self.notice = None
            self.prev = self.first
            self._sample_gpu(self.first.t)

    async def loop(self, session: aiohttp.ClientSession, t0: float, stop: asyncio.Event) -> None:
        """Scrape every interval until ``stop`` is set (aligned to the interval grid, no drift)."""
        if not self.available:
            return
        k = 1
        while not stop.is_set():
            target = t0 + k * self.interval
            k += 1
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, target - time.monotonic()))
                return
            except asyncio.TimeoutError:
                pass
            snap = await self._get(session, t0, full=False)
            if snap is not None:
                self._add_sample(snap)

    async def final(self, session: aiohttp.ClientSession, t0: float) -> None:
        if not self.available:
            return
        snap = await self._get(session, t0, full=True)
        if snap is not None:
            self.last_full = snap
            self._add_sample(snap)

    def _sample_gpu(self, t: Optional[float]) -> Optional[list]:
        return self.gpu.sample() if self.gpu is not None else None

    def _add_sample(self, snap: M.MetricsSnapshot) -> None:
        prev = self.prev
        s: dict = {"t": _round(snap.t, 4)}
        for key in M.GAUGE_KEYS:
            s[key] = snap.get(key)
        for key in M.COUNTER_KEYS:
            s[key] = M.counter_delta(prev.get(key) if prev else None, snap.get(key))
        for key in M.HISTOGRAM_KEYS:
            h = M.histogram_delta(prev.get_histogram(key) if prev else None, snap.get_histogram(key))
            s[key] = _hist_summary(h, with_buckets=False)
        gpu = self._sample_gpu(snap.t)
        if gpu is not None:
            s["gpu"] = gpu
        self.samples.append(s)
        self.prev = snap

    def to_dict(self) -> dict:
        first, last = self.first, self.last_full or self.prev
        out: dict = {"available": self.available, "notice": self.notice, "url": self.url,
                     "interval_s": self.interval, "scrape_errors": self.errors, "names_used": {}, "absent": [],
                     "samples": self.samples, "deltas": {}, "histograms": {}}
        if not self.available or first is None or last is None:
            return out
        out["names_used"] = {k: last.resolve(k) or first.resolve(k) for k in M.ALIASES
                             if last.resolve(k) or first.resolve(k)}
        out["absent"] = [k for k in M.ALIASES if k not in out["names_used"]]
        out["deltas"] = {k: _round(v, 9) for k, v in M.delta(first, last).items()}
        for key in M.HISTOGRAM_KEYS:
            h = M.histogram_delta(first.get_histogram(key), last.get_histogram(key))
            if h is not None:
                out["histograms"][key] = _hist_summary(h, with_buckets=True)
        return out


def _hist_summary(h: Optional[M.Histogram], with_buckets: bool) -> Optional[dict]:
    if h is None:
        return None
    d: dict = {"count": _round(h.count, 3), "sum": _round(h.sum), "mean": _round(h.mean())}
    for q in HIST_QUANTILES:
        d[f"p{int(q * 100)}"] = _round(h.quantile(q)) if h.count > 0 else None
    if with_buckets:
        d["buckets"] = [["+Inf" if le == float("inf") else le, _round(c, 3)] for le, c in h.buckets]
    return d


class GpuSampler:
    """GPU memory and utilisation through NVML (``nvidia-ml-py``, extra ``kvplan[nvml]``)."""

    def __init__(self) -> None:
        self.handles: list = []
        self.notice: Optional[str] = None
        try:
            import pynvml  # type: ignore[import-not-found]
        except ImportError:
            self.notice = "GPU telemetry skipped: nvidia-ml-py is not installed (pip install 'kvplan[nvml]')"
            return
        try:
            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
        except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, …
            self.notice = f"GPU telemetry skipped: no GPU visible to NVML ({type(exc).__name__})"
            self.handles = []
        if not self.handles and self.notice is None:
            self.notice = "GPU telemetry skipped: NVML sees no GPU"

    @property
    def active(self) -> bool:
        return bool(self.handles)

    def sample(self) -> Optional[list]:
        if not self.handles:
            return None
        out = []
        for i, h in enumerate(self.handles):
            try:
                mem = self._nvml.nvmlDeviceGetMemoryInfo(h)
                util = self._nvml.nvmlDeviceGetUtilizationRates(h)
                out.append({"index": i, "memory_used_bytes": int(mem.used), "memory_total_bytes": int(mem.total),
                            "utilization_pct": int(util.gpu)})
            except Exception:  # noqa: BLE001 - one failed read must not end the run
                out.append({"index": i, "memory_used_bytes": None, "memory_total_bytes": None,
                            "utilization_pct": None})
        return out
