"""``kvplan profile``: measure a running vLLM against its plan.

What is measured, and from where (nothing is estimated here):

* the server's KV pool: ``vllm:cache_config_info`` on ``/metrics`` (``num_gpu_blocks``,
  ``block_size``, ``kv_cache_size_tokens``) and the start-up log's capacity line, read by the one
  vLLM log reader (kvplan.ops.doctor over kvplan.memory.startup_log);
* KV blocks a request holds while it runs: ``vllm:kv_cache_usage_perc`` (``gpu_cache_usage_perc``
  before 0.10; kvplan.bench.metrics knows the names) scraped while the request is in flight.
  vLLM computes it as ``1 - free / (num_gpu_blocks - 1)`` (v1/core/block_pool.py ``get_usage``:
  the null block is never free), so ``usage × (num_gpu_blocks - 1)`` is the number of blocks in use;
* running / waiting requests: ``vllm:num_requests_running`` / ``_waiting`` during a burst;
* GPU memory: NVML, when the server is on this host and nvidia-ml-py is installed (n/a on CPU).

Requests are sent as token ids to ``/v1/completions`` with ``ignore_eos`` so that their lengths are
exact without a tokenizer, and sized so that the whole request stays inside one block count:
``ceil(prompt / block_size) == ceil((prompt + max_tokens - 1) / block_size)`` (vLLM allocates slots
for the tokens it computes; the last sampled token is never fed back). A scrape at any moment of the
request then has one right answer. That answer is ``ceil(tokens / block_size)`` blocks, not the
``max_model_len / block_size`` a static reservation would take: vLLM allocates blocks as tokens arrive.
"""
from __future__ import annotations

import asyncio
import json
import math
import time
import urllib.parse
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from ..errors import KvplanError, UsageError
from .profile_checks import (GPU_MEMORY_LIMIT, MAX_BURST, ProfileCheck, ServerFacts, build_checks,
                             planned_figures)

__all__ = ["GPU_MEMORY_LIMIT", "MAX_BURST", "ProfileCheck", "ProfileError", "ProfileResult", "ProfileStep",
           "ServerFacts", "profile_server"]

SCRAPE_INTERVAL_S = 0.1
TOKEN_ID_BASE = 10  # prompts are token ids from here on (ids 0-9 are often special tokens)
TOKEN_ID_SPAN = 1000
#: counters that tell one engine step from the next in two scrapes (see _Watch._note_waiting)
_STEP_CLOCK = ("generation_tokens", "prompt_tokens")
STEP_ATTEMPTS = 3  # a request faster than the scrape interval is sent again (at most this often, scraped 4x as often)
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
#: the largest answer read from the server (/metrics, a completion, /v1/models): a bigger one is not read
MAX_ANSWER_BYTES = 16 << 20


async def read_capped(resp, limit: int) -> Optional[bytes]:
    from ..bench.client import read_capped as read

    return await read(resp, limit)


class ProfileError(KvplanError):
    """The server could not be profiled (it does not answer, or is not a vLLM OpenAI server)."""


# --------------------------------------------------------------------------- result
@dataclass(frozen=True)
class ProfileStep:
    """One probe (short prompt, long prompt, burst) and what the server showed while it ran."""

    name: str
    requests: int
    prompt_tokens: int  # per request, as the server counted them (usage.prompt_tokens)
    max_tokens: int
    completed: int
    errors: tuple[str, ...]
    seconds: float
    scrapes: int  # scrapes taken while requests were in flight
    attempts: int
    baseline_kv_usage: Optional[float]
    peak_kv_usage: Optional[float]
    peak_running: Optional[int]
    peak_waiting: Optional[int]
    measured_kv_blocks: Optional[int]  # (peak usage - baseline) × (num_gpu_blocks - 1), rounded
    expected_kv_blocks_per_request: int  # ceil(tokens / block_size)
    max_model_len_blocks: int  # what reserving max_model_len per request would take
    peak_gpu_memory_bytes: Optional[int]
    after: dict  # kv usage, running, waiting once the step's requests finished
    # two scrapes between which an engine step generated tokens and admitted no prompt while requests
    # waited: the server held them back (max_num_seqs or KV), not its token budget; None: never seen
    held_back: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["errors"] = list(self.errors)
        return d


@dataclass(frozen=True)
class ProfileResult:
    base_url: str
    model: str
    vllm_version: Optional[str]
    server: dict  # what the live server reports: block_size, num_gpu_blocks, kv tokens, max_model_len
    planned: Optional[dict]  # the plan's figures, when a plan was given
    startup: dict  # the start-up log as the doctor reads it ({} without a log)
    steps: tuple[ProfileStep, ...]
    checks: tuple[ProfileCheck, ...]
    gpu: dict  # {"available": bool, "notice": str|None, "total_bytes": int|None}
    notes: tuple[str, ...] = ()
    launched: Optional[dict] = None  # {argv, pid, log_path, startup_seconds} with --launch

    @property
    def ok(self) -> bool:
        return not any(c.status == "fail" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": 1, "ok": self.ok, "base_url": self.base_url, "model": self.model,
                "vllm_version": self.vllm_version, "server": dict(self.server),
                "planned": None if self.planned is None else dict(self.planned), "startup": dict(self.startup),
                "steps": [s.to_dict() for s in self.steps], "checks": [c.to_dict() for c in self.checks],
                "gpu": dict(self.gpu), "notes": list(self.notes), "launched": self.launched}

    def with_launch(self, launched: dict) -> "ProfileResult":
        return replace(self, launched=dict(launched))


# --------------------------------------------------------------------------- request shapes
@dataclass(frozen=True)
class Shape:
    prompt_tokens: int
    max_tokens: int

    def block_range(self, block_size: int) -> tuple[int, int]:
        """Blocks held at the first and the last step of the request."""
        return (math.ceil(self.prompt_tokens / block_size),
                math.ceil((self.prompt_tokens + self.max_tokens - 1) / block_size))


def short_shape(block_size: int, max_model_len: int) -> Shape:
    """A one-block request: as many output tokens as fit in the block with a short prompt."""
    max_tokens = max(1, min(64, block_size // 2, max_model_len // 2))
    prompt = max(1, min(block_size - max_tokens + 1, 16, max_model_len - max_tokens))
    return Shape(prompt, max_tokens)


def long_shape(block_size: int, max_model_len: int, prompt_tokens: Optional[int] = None) -> Shape:
    """A prompt near ``max_model_len - max_tokens`` whose request stays within one block count."""
    max_tokens = max(1, min(64, block_size, max_model_len // 2))
    if prompt_tokens is not None:
        if prompt_tokens < 1 or prompt_tokens + max_tokens > max_model_len:
            raise UsageError(f"--long-prompt-tokens {prompt_tokens}: must be 1 to max_model_len - {max_tokens} "
                             f"= {max_model_len - max_tokens}")
        return Shape(prompt_tokens, max_tokens)
    k = math.ceil((max_model_len - max_tokens) / block_size)
    return Shape(min(k * block_size - max_tokens + 1, max_model_len - max_tokens), max_tokens)


def burst_shape(block_size: int, max_model_len: int) -> Shape:
    """Burst requests: one block each, with enough output tokens to all be running at once."""
    max_tokens = max(1, min(32, block_size, max_model_len // 2))
    return Shape(max(1, min(block_size - max_tokens + 1, max_model_len - max_tokens)), max_tokens)


def prompt_ids(index: int, length: int) -> list[int]:
    """Distinct prompts (the first token differs per request), so prefix caching shares nothing."""
    return [TOKEN_ID_BASE + (index * 7 + j) % TOKEN_ID_SPAN for j in range(length)]


# --------------------------------------------------------------------------- server discovery
def check_url(base_url: str) -> str:
    """``base_url`` without a trailing slash, or a UsageError saying what is wrong with it."""
    parsed = urllib.parse.urlparse(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UsageError(f"--url {base_url!r}: expected http://HOST:PORT (the vLLM server's base URL)")
    if parsed.path.rstrip("/") not in ("", "/v1") or parsed.query or parsed.fragment:
        raise UsageError(f"--url {base_url!r}: give the server's base URL, e.g. http://127.0.0.1:8000")
    return f"{parsed.scheme}://{parsed.netloc}"


def is_local(base_url: str) -> bool:
    return (urllib.parse.urlparse(base_url).hostname or "") in LOCAL_HOSTS


def cache_config(snap) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` (block size, blocks, KV tokens; vLLM 0.6+)."""
    for (name, labels), _ in snap.series.items():
        if name == "vllm:cache_config_info":
            return dict(labels)
    return {}


def _int(text: Any) -> Optional[int]:
    try:
        return int(float(text))
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------- measuring
@dataclass
class _Watch:
    """What the scrapes showed while a step's requests were in flight."""

    scrapes: int = 0
    peak_usage: Optional[float] = None
    peak_running: Optional[int] = None
    peak_waiting: Optional[int] = None
    peak_gpu: Optional[int] = None
    usage_at_full: list[float] = field(default_factory=list)  # usage when every request was running
    # (running, waiting, generation tokens, prompt tokens) of each scrape that saw requests waiting
    waiting_scrapes: list[tuple] = field(default_factory=list)
    held_back: Optional[str] = None

    def add(self, snap, gpu_sample: Optional[list], expect_running: int) -> None:
        self.scrapes += 1
        usage, running, waiting = snap.get("kv_cache_usage"), snap.get("requests_running"), snap.get("requests_waiting")
        if usage is not None:
            self.peak_usage = usage if self.peak_usage is None else max(self.peak_usage, usage)
        if running is not None:
            self.peak_running = int(running) if self.peak_running is None else max(self.peak_running, int(running))
            if usage is not None and int(running) >= expect_running:
                self.usage_at_full.append(usage)
        if waiting is not None:
            self.peak_waiting = int(waiting) if self.peak_waiting is None else max(self.peak_waiting, int(waiting))
            if waiting and running is not None and int(running) < expect_running:
                self._note_waiting(int(running), int(waiting), snap.get("generation_tokens"), snap.get("prompt_tokens"))
        used = [g["memory_used_bytes"] for g in gpu_sample or () if g.get("memory_used_bytes") is not None]
        if used:
            self.peak_gpu = max(used) if self.peak_gpu is None else max(self.peak_gpu, max(used))

    def _note_waiting(self, running: int, waiting: int, generated, prompted) -> None:
        """Requests waiting is not by itself the server holding them back: vLLM V1 admits a burst
        within its token budget (max_num_batched_tokens), so the rest wait a step or two while
        every step prefills. A step that generated tokens and finished no prefill while requests
        still waited had budget left and did not admit them: a max_num_seqs or KV-cache limit."""
        if generated is None or prompted is None:
            return
        if self.held_back is None:
            earlier = next(((r0, w0, g0) for r0, w0, g0, p0 in self.waiting_scrapes
                            if generated > g0 and prompted == p0), None)
            if earlier is not None:
                r0, w0, g0 = earlier
                self.held_back = (f"{running} running and {waiting} waiting after engine steps that generated "
                                  f"{generated - g0:.0f} tokens and prefilled none (before: {r0} running, {w0} waiting)")
        self.waiting_scrapes.append((running, waiting, generated, prompted))


class _Client:
    def __init__(self, session, base_url: str, model: str, headers: dict, timeout_s: float, gpu) -> None:
        self.session, self.base_url, self.model, self.headers = session, base_url, model, headers
        self.timeout_s, self.gpu = timeout_s, gpu

    async def scrape(self, full: bool = False):
        import aiohttp

        from ..bench import metrics as M

        prefixes = None if full else tuple(n for k in (*M.GAUGE_KEYS, *_STEP_CLOCK) for n in M.ALIASES[k])
        try:
            async with self.session.get(self.base_url + "/metrics", headers=self.headers, allow_redirects=False,
                                        timeout=aiohttp.ClientTimeout(total=10)) as r:
                if r.status != 200:
                    return None
                raw = await read_capped(r, MAX_ANSWER_BYTES)
                if raw is None:
                    return None
                text = raw.decode("utf-8", "replace")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return None
        return M.parse_metrics(text, prefixes=prefixes)

    async def complete(self, ids: list[int], max_tokens: int) -> dict:
        import aiohttp

        body = {"model": self.model, "prompt": ids, "max_tokens": max_tokens, "min_tokens": max_tokens,
                "ignore_eos": True, "temperature": 0.0, "stream": False}
        try:
            async with self.session.post(self.base_url + "/v1/completions", json=body, headers=self.headers,
                                         allow_redirects=False,
                                         timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as r:
                raw = await read_capped(r, MAX_ANSWER_BYTES)
                if raw is None:
                    return {"error": f"an answer larger than {MAX_ANSWER_BYTES >> 20} MiB"}
                text = raw.decode("utf-8", "replace")
                if r.status != 200:
                    return {"error": f"HTTP {r.status}: {text[:300]}"}
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"[:300]}
        try:
            usage = json.loads(text).get("usage") or {}
        except ValueError:
            return {"error": "response is not JSON"}
        return {"prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens")}

    async def run(self, shape: Shape, n: int, first_index: int,
                  interval_s: float = SCRAPE_INTERVAL_S) -> tuple[list[dict], _Watch, float, dict]:
        """Send ``n`` requests at once and scrape every ``interval_s`` until they finish.
        (results, watch, seconds, after)"""
        watch = _Watch()
        t0 = time.monotonic()
        tasks = [asyncio.create_task(self.complete(prompt_ids(first_index + i, shape.prompt_tokens), shape.max_tokens))
                 for i in range(n)]
        while not all(t.done() for t in tasks):
            snap = await self.scrape()
            if snap is not None and not all(t.done() for t in tasks):
                watch.add(snap, self.gpu.sample() if self.gpu is not None else None, n)
            await asyncio.wait(tasks, timeout=interval_s)
        seconds = time.monotonic() - t0
        results = [t.result() for t in tasks]
        after_snap = await self.scrape()
        after = {} if after_snap is None else {"kv_cache_usage": after_snap.get("kv_cache_usage"),
                                               "requests_running": after_snap.get("requests_running"),
                                               "requests_waiting": after_snap.get("requests_waiting")}
        return results, watch, seconds, after


def server_vllm_version(base_url: str, timeout_s: float = 5.0) -> Optional[str]:
    """The vLLM version a running server reports on ``GET /version`` (vLLM's OpenAI server has it
    in every version kvplan follows), or None when it does not answer. Synchronous and stdlib-only:
    it runs before any plan is made."""
    import http.client
    import json
    import urllib.error
    import urllib.request

    url = base_url.rstrip("/") + "/version"
    if not url.startswith(("http://", "https://")):
        return None
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 - http(s) only, checked above
            data = json.loads(r.read(65536).decode("utf-8", errors="replace"))
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return str(version) if version else None


async def _discover(client: _Client, plan_result, startup_log, model_name: Optional[str]) -> ServerFacts:
    import aiohttp

    try:
        async with client.session.get(client.base_url + "/v1/models", headers=client.headers, allow_redirects=False,
                                      timeout=aiohttp.ClientTimeout(total=15)) as r:
            if r.status != 200:
                raise ProfileError(f"{client.base_url}/v1/models answered HTTP {r.status}: not a vLLM OpenAI server "
                                   "(or it needs --api-key)")
            raw = await read_capped(r, MAX_ANSWER_BYTES)
            if raw is None:
                raise ProfileError(f"{client.base_url}/v1/models answered more than {MAX_ANSWER_BYTES >> 20} MiB")
            data = json.loads(raw)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
        raise ProfileError(f"cannot reach {client.base_url}/v1/models: {type(exc).__name__}: {exc}") from None
    cards = [m for m in (data.get("data") or []) if isinstance(m, dict)] if isinstance(data, dict) else []
    if not cards:
        raise ProfileError(f"{client.base_url}/v1/models lists no model")
    card = next((m for m in cards if m.get("id") == model_name), None) if model_name else cards[0]
    if card is None:
        raise UsageError(f"--model-name {model_name!r}: the server serves {[m.get('id') for m in cards]}")
    snap = await client.scrape(full=True)
    if snap is None:
        raise ProfileError(f"{client.base_url}/metrics did not answer with Prometheus text: nothing to measure")
    labels = cache_config(snap)
    block_size = _int(labels.get("block_size")) or (plan_result.kv.block_size if plan_result else None)
    blocks = _int(labels.get("num_gpu_blocks")) or (startup_log.num_gpu_blocks if startup_log else None)
    max_len = _int(card.get("max_model_len")) or (startup_log.max_model_len if startup_log else None) or \
        (plan_result.flags.max_model_len if plan_result else None)
    if not (block_size and blocks and max_len):
        raise ProfileError("the server does not expose its block size / KV blocks (vllm:cache_config_info) or its "
                           "max_model_len, and no plan or log gives them")
    version = None
    try:
        async with client.session.get(client.base_url + "/version", timeout=aiohttp.ClientTimeout(total=10),
                                      allow_redirects=False) as r:
            raw = await read_capped(r, MAX_ANSWER_BYTES) if r.status == 200 else None
            if raw is not None:
                version = json.loads(raw).get("version")
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, AttributeError):
        version = None
    conc = labels.get("kv_cache_max_concurrency")
    return ServerFacts(str(card["id"]), max_len, block_size, blocks, _int(labels.get("kv_cache_size_tokens")),
                   float(conc) if conc not in (None, "None") else None, labels,
                   version or (startup_log.vllm_version if startup_log else None))


def _step(name: str, shape: Shape, n: int, results: list[dict], watch: _Watch, seconds: float, after: dict,
          attempts: int, baseline: Optional[float], srv: ServerFacts) -> ProfileStep:
    usable = srv.num_gpu_blocks - 1
    counted = {r.get("prompt_tokens") for r in results if r.get("prompt_tokens") is not None}
    prompt = counted.pop() if len(counted) == 1 else shape.prompt_tokens
    measured = None
    peak = max(watch.usage_at_full) if watch.usage_at_full else None
    if peak is not None:
        measured = int(round((peak - (baseline or 0.0)) * usable))
    lo, hi = Shape(prompt, shape.max_tokens).block_range(srv.block_size)
    return ProfileStep(
        name=name, requests=n, prompt_tokens=prompt, max_tokens=shape.max_tokens,
        completed=sum(1 for r in results if "error" not in r),
        errors=tuple(sorted({r["error"] for r in results if "error" in r})), seconds=round(seconds, 3),
        scrapes=watch.scrapes, attempts=attempts, baseline_kv_usage=baseline, peak_kv_usage=watch.peak_usage,
        peak_running=watch.peak_running, peak_waiting=watch.peak_waiting, measured_kv_blocks=measured,
        expected_kv_blocks_per_request=lo if lo == hi else hi,
        max_model_len_blocks=math.ceil(srv.max_model_len / srv.block_size), peak_gpu_memory_bytes=watch.peak_gpu,
        after=after, held_back=watch.held_back)


async def _probe(client: _Client, name: str, shape: Shape, n: int, first_index: int, srv: ServerFacts,
                 deadline: float) -> ProfileStep:
    """Run one step; a step whose requests all ran between two scrapes is sent again (new prompts,
    the same shape: its block count is what is measured), scraped four times as often each time."""
    attempt = 0
    while True:
        attempt += 1
        base = await client.scrape()
        baseline = base.get("kv_cache_usage") if base is not None else None
        interval = SCRAPE_INTERVAL_S / 4 ** (attempt - 1)
        results, watch, seconds, after = await asyncio.wait_for(client.run(shape, n, first_index + attempt * n, interval),
                                                                timeout=max(1.0, deadline - time.monotonic()))
        step = _step(name, shape, n, results, watch, seconds, after, attempt, baseline, srv)
        if step.measured_kv_blocks is not None or step.errors or attempt >= STEP_ATTEMPTS \
                or time.monotonic() > deadline:
            return step


def _startup(log_text: Optional[str]):
    """(StartupLog of the last server run, dict for the report) through the doctor's reader."""
    if not log_text:
        return None, {}
    from ..memory.startup_log import clean_line, parse_startup_log, split_runs
    from .doctor import diagnose

    report = diagnose([("vllm.log", log_text)])
    lines = [clean_line(ln) for ln in log_text.splitlines()]
    start, end = split_runs(lines)[-1]
    log = parse_startup_log("\n".join(lines[start:end]), "vllm.log")
    run = report.runs[-1].to_dict() if report.runs else {}
    run["kv_line"] = next((ln.split("] ", 1)[-1] for ln in lines[start:end] if "KV cache size:" in ln), None)
    run["findings"] = [{"id": f.id, "severity": f.severity, "title": f.title} for f in report.findings]
    return log, run


# --------------------------------------------------------------------------- entry point
def profile_server(base_url: str, *, plan_result=None, log_text: Optional[str] = None,
                   model_name: Optional[str] = None, long_prompt_tokens: Optional[int] = None,
                   burst_concurrency: Optional[int] = None, timeout_s: float = 300.0,
                   api_key: Optional[str] = None, gpu_memory_limit: Optional[float] = None) -> ProfileResult:
    """Profile the vLLM server at ``base_url`` (see the module docstring); compare with
    ``plan_result`` when given. Raises UsageError for a malformed URL or arguments, ProfileError
    when the server cannot be profiled."""
    base = check_url(base_url)
    if burst_concurrency is not None and not 1 <= burst_concurrency <= MAX_BURST:
        raise UsageError(f"--burst {burst_concurrency}: must be 1 to {MAX_BURST}")
    log, startup = _startup(log_text)
    return asyncio.run(_profile(base, plan_result, log, startup, model_name, long_prompt_tokens, burst_concurrency,
                                timeout_s, api_key, gpu_memory_limit))


async def _profile(base, plan_result, log, startup, model_name, long_prompt_tokens, burst_concurrency, timeout_s,
                   api_key, gpu_limit) -> ProfileResult:
    import aiohttp

    gpu = None
    gpu_info: dict = {"available": False, "notice": None, "total_bytes": None}
    if is_local(base):
        from ..bench.scrape import GpuSampler

        gpu = GpuSampler()
        gpu_info["notice"] = gpu.notice
        if gpu.active:
            first = gpu.sample() or []
            totals = [g["memory_total_bytes"] for g in first if g.get("memory_total_bytes")]
            gpu_info.update(available=True, total_bytes=max(totals) if totals else None)
        else:
            gpu = None
    else:
        gpu_info["notice"] = "GPU memory not read: the server is not on this host (NVML reads local GPUs only)"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    deadline = time.monotonic() + timeout_s
    notes: list[str] = []
    from ..bench.client import connector

    async with aiohttp.ClientSession(connector=connector()) as session:
        client = _Client(session, base, model_name or "", headers, timeout_s, gpu)
        srv = await _discover(client, plan_result, log, model_name)
        client.model = srv.model
        base_snap = await client.scrape()
        if base_snap is not None and (base_snap.get("requests_running") or base_snap.get("requests_waiting")):
            notes.append("the server was not idle when the profile started: per-request blocks subtract the usage "
                         "seen just before each step, other traffic during a step still counts")
        short = short_shape(srv.block_size, srv.max_model_len)
        long = long_shape(srv.block_size, srv.max_model_len, long_prompt_tokens)
        burst = burst_shape(srv.block_size, srv.max_model_len)
        per_burst = burst.block_range(srv.block_size)[1]
        max_num_seqs = plan_result.flags.max_num_seqs if plan_result else _int((log.args if log else {}).get(
            "max_num_seqs"))
        kv_limit = (srv.num_gpu_blocks - 1) // per_burst
        burst_planned = min(x for x in (max_num_seqs, kv_limit) if x is not None)
        if max_num_seqs is None:
            notes.append("max_num_seqs unknown (no plan, not in the log's non-default args): the burst assumes the "
                         "KV cache is the only limit")
        n_burst = burst_concurrency or min(burst_planned, MAX_BURST)
        steps: dict[str, ProfileStep] = {}
        steps["short"] = await _probe(client, "short", short, 1, 0, srv, deadline)
        steps["long"] = await _probe(client, "long", long, 1, 10, srv, deadline)
        steps["burst"] = await _probe(client, "burst", burst, n_burst, 100, srv, deadline)
    checks = build_checks(srv, plan_result, log, steps, burst_planned, gpu_info["total_bytes"], gpu_limit)
    server = {"block_size": srv.block_size, "num_gpu_blocks": srv.num_gpu_blocks,
              "usable_blocks": srv.num_gpu_blocks - 1, "kv_cache_tokens": srv.kv_cache_tokens,
              "max_concurrency": srv.max_concurrency, "max_model_len": srv.max_model_len,
              "kv_cache_memory_bytes": _int(srv.cache_labels.get("kv_cache_memory_bytes")),
              "gpu_memory_utilization": srv.cache_labels.get("gpu_memory_utilization"),
              "enable_prefix_caching": srv.cache_labels.get("enable_prefix_caching")}
    return ProfileResult(base, srv.model, srv.vllm_version, server, planned_figures(plan_result), startup,
                         tuple(steps.values()), tuple(checks), gpu_info, tuple(notes))
