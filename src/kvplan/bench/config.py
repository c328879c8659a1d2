"""The contract of one load test: :class:`BenchConfig` (frozen), plus the small parsers for the
CLI's value syntaxes (length distributions, SLO lists, durations). Everything that reaches the
load generator passed through here, so bad input becomes a :class:`UsageError` (exit 2) before
any traffic is sent.
"""
from __future__ import annotations

import math
import urllib.parse
from dataclasses import asdict, dataclass, field
from typing import Optional

from ..errors import UsageError
# the value syntaxes live in neutral modules (the simulator reads them too); re-exported here
from ..slo import SLO_METRICS, SLO_STATS, Slo, parse_seconds, parse_slo  # noqa: F401
from ..traffic.lengthdist import LengthDist, parse_length  # noqa: F401

ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
ARRIVALS = ("constant", "poisson", "gamma")
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True)
class BenchConfig:
    """Everything one run needs. ``api_key`` is excluded from ``repr`` and from :meth:`public`."""

    url: str
    model: Optional[str] = None
    endpoint: str = "chat"
    stream: bool = True
    # arrivals: exactly one of rate / concurrency / replay
    rate: Optional[float] = None
    concurrency: Optional[int] = None
    replay: bool = False
    replay_speed: float = 1.0
    arrival: str = "poisson"
    burstiness: float = 1.0  # gamma shape; 1 = Poisson
    ramp_s: float = 0.0
    duration_s: Optional[float] = None
    max_requests: Optional[int] = None
    warmup_s: float = 0.0
    # requests
    requests_log: Optional[str] = None
    input_len: LengthDist = LengthDist("fixed", 128)
    output_len: LengthDist = LengthDist("fixed", 64)
    ignore_eos: Optional[bool] = None  # None: send it when the server is vLLM / SGLang
    seed: int = 0
    prompt_length: str = "words"  # words: N one-token words (the template adds more); exact: N tokens as vLLM counts
    tokenizer: Optional[str] = None  # for prompt_length exact (default: the model's, found offline)
    timeout_s: float = 120.0
    max_inflight: int = 20000
    # trust
    unreachable_after_s: float = 3.0
    lag_p50_limit_s: float = 0.010
    lag_p99_limit_s: float = 0.050
    min_rate_ratio: float = 0.99
    # The client is saturated (client-bound) when a late schedule comes with its own CPU above this
    # share of a core per process; below it the lateness is host contention (another process took
    # the CPU, e.g. a vLLM server on the same host): reported, not blamed on the client.
    client_cpu_limit: float = 0.7
    # With no --slo error_rate given, a run fails when more than this share of requests failed.
    default_error_rate: float = 0.0
    # server side
    scrape_interval_s: float = 1.0
    scrape_metrics: bool = True
    # scale-out
    workers: int = 1
    ray_address: Optional[str] = None  # run the workers as Ray actors on this cluster ("local": a private one)
    slo: tuple[Slo, ...] = ()
    api_key: Optional[str] = field(default=None, repr=False)

    def validate(self) -> "BenchConfig":
        u = urllib.parse.urlsplit(self.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise UsageError(f"--url: expected http://HOST:PORT, got {self.url!r}")
        if self.endpoint not in ENDPOINTS:
            raise UsageError(f"--endpoint must be one of {', '.join(ENDPOINTS)}")
        modes = sum((self.rate is not None, self.concurrency is not None, self.replay))
        if modes != 1:
            raise UsageError("give exactly one of --rate / --target-qps, --concurrency, or --replay (with --requests)")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise UsageError(f"--rate must be a positive number, got {self.rate}")
        if self.concurrency is not None and self.concurrency < 1:
            raise UsageError(f"--concurrency must be at least 1, got {self.concurrency}")
        if self.replay and not self.requests_log:
            raise UsageError("--replay needs --requests LOG (its timestamps are replayed)")
        if self.replay_speed <= 0:
            raise UsageError("--factor must be positive")
        if self.arrival not in ARRIVALS:
            raise UsageError(f"--arrival must be one of {', '.join(ARRIVALS)}")
        if self.burstiness <= 0:
            raise UsageError("--burstiness must be positive")
        if self.duration_s is None and self.max_requests is None and not self.replay:
            raise UsageError("give --duration and/or --max-requests: a run must be bounded")
        if self.duration_s is not None and self.duration_s <= 0:
            raise UsageError("--duration must be positive")
        if self.max_requests is not None and self.max_requests < 1:
            raise UsageError("--max-requests must be at least 1")
        if self.warmup_s < 0 or self.ramp_s < 0:
            raise UsageError("--warmup and --ramp must not be negative")
        if self.timeout_s <= 0:
            raise UsageError("--timeout must be positive")
        if self.workers < 1:
            raise UsageError("--workers must be at least 1")
        if self.ray_address is not None:
            import importlib.util

            if importlib.util.find_spec("ray") is None:
                raise UsageError("--ray-address needs Ray: pip install 'kvplan[ray]'")
        if not (self.lag_p50_limit_s > 0 and self.lag_p99_limit_s > 0):
            raise UsageError("--max-lag-p50 / --max-lag-p99 must be positive")
        if not 0 < self.min_rate_ratio <= 1:
            raise UsageError(f"--min-rate-ratio must be in (0, 1], got {self.min_rate_ratio}")
        if not 0 < self.client_cpu_limit <= 1:
            raise UsageError(f"--client-cpu-limit must be in (0, 1], got {self.client_cpu_limit}")
        if self.prompt_length not in ("words", "exact"):
            raise UsageError(f"--prompt-length must be words or exact, got {self.prompt_length!r}")
        if self.scrape_interval_s <= 0:
            raise UsageError("--scrape-interval must be positive")
        if {"log", "empirical"} & {self.input_len.kind, self.output_len.kind} and not self.requests_log:
            raise UsageError("a 'log' or 'empirical' length needs --requests LOG")
        return self

    @property
    def base_url(self) -> str:
        return self.url.rstrip("/").removesuffix("/v1")

    @property
    def path(self) -> str:
        return ENDPOINTS[self.endpoint]

    @property
    def mode(self) -> str:
        return "replay" if self.replay else ("open" if self.rate is not None else "closed")

    @property
    def is_local(self) -> bool:
        return urllib.parse.urlsplit(self.url).hostname in LOOPBACK_HOSTS

    def public(self) -> dict:
        """The config as recorded in the result: the API key is never written, only whether one was used."""
        d = asdict(self)
        d.pop("api_key")
        d["api_key_set"] = bool(self.api_key)
        d["input_len"] = self.input_len.describe()
        d["output_len"] = self.output_len.describe()
        d["slo"] = {s.key: s.limit for s in self.slo}
        return d


def resolve_api_key(api_key: Optional[str], api_key_file: Optional[str]) -> Optional[str]:
    """The key a run sends: --api-key, else the first line of --api-key-file, else $OPENAI_API_KEY."""
    import os

    if api_key and api_key_file:
        raise UsageError("give --api-key or --api-key-file, not both")
    if api_key_file:
        try:
            with open(api_key_file, encoding="utf-8") as f:
                key = f.readline(65536).strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--api-key-file {api_key_file}: cannot read it ({getattr(exc, 'strerror', None) or exc})") \
                from None
        if not key:
            raise UsageError(f"--api-key-file {api_key_file}: the file's first line is empty")
        return key
    return api_key or os.environ.get("OPENAI_API_KEY") or None
