"""Traffic for the simulator: a :class:`Trace` of :class:`SimRequest` (arrival offset, prompt and
output lengths, an optional shared prefix), built from parameters (:func:`synthetic_trace`) or from
a request log (:func:`trace_from_log`, in :mod:`kvplan.traffic.logtrace`).

Arrivals come from :mod:`kvplan.traffic.arrivals` and lengths from
:class:`kvplan.traffic.lengthdist.LengthDist`, the same code ``kvplan bench`` sends traffic with,
so a simulated and a measured run see the same schedule for the same seed.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..errors import UsageError
from .arrivals import rate_schedule
from .lengthdist import LengthDist

ARRIVALS = ("constant", "poisson", "gamma")


@dataclass(frozen=True)
class SimRequest:
    arrival_s: float  # offset from the trace start
    prompt_tokens: int
    output_tokens: int  # tokens the request generates (max_tokens with ignore_eos, or the log's count)
    prefix_id: Optional[str] = None  # requests with the same prefix_id share their first prefix_tokens
    prefix_tokens: int = 0
    request_id: Optional[str] = None
    root_id: Optional[str] = None  # a prefix shared across prefix_ids (e.g. one system prompt for every
    root_tokens: int = 0  # conversation); prefix_tokens then count from the request's start, root included
    client_prompt_tokens: Optional[int] = None  # the client's count when it differs (vllm bench's prompt_len)


@dataclass(frozen=True)
class Trace:
    requests: tuple[SimRequest, ...]  # sorted by arrival_s
    source: str
    skipped: tuple[tuple[str, int], ...] = ()  # records of a log that could not become requests
    # closed loop (vllm bench's --max-concurrency): at most this many requests in flight; a request
    # due at its arrival time is sent when one finishes (FIFO, as bench's asyncio.Semaphore)
    max_concurrency: Optional[int] = None
    # prompts in the prefix cache before t = 0 (vllm bench's test request and warm-ups send request
    # 0's prompt first): (prefix_id, tokens)
    warm_prefixes: tuple[tuple[str, int], ...] = ()
    bench: Optional[dict] = None  # the vllm bench serve parameters this trace follows
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.requests)

    def to_dict(self) -> dict:
        d = {"source": self.source, "requests": len(self.requests), "skipped": dict(self.skipped)}
        if self.max_concurrency is not None:
            d["max_concurrency"] = self.max_concurrency
        if self.bench is not None:
            d["bench"] = dict(self.bench)
        if self.notes:
            d["notes"] = list(self.notes)
        return d


def parse_arrival(text: str) -> tuple[str, float]:
    """``constant`` | ``poisson`` | ``gamma:K`` (K = shape; < 1 burstier than Poisson)."""
    raw = (text or "").strip().lower()
    kind, _, k = raw.partition(":")
    if kind in ("constant", "poisson") and not k:
        return kind, 1.0
    if kind == "gamma":
        try:
            shape = float(k) if k else 1.0
        except ValueError:
            shape = -1.0
        if shape > 0 and math.isfinite(shape):
            return "gamma", shape
        raise UsageError(f"--arrival gamma:K needs a positive shape K, got {text!r}")
    raise UsageError(f"--arrival must be constant, poisson or gamma:K, got {text!r}")


def synthetic_trace(rate: float, *, num_requests: Optional[int] = None, duration_s: Optional[float] = None,
                    input_len: LengthDist, output_len: LengthDist, arrival: str = "poisson",
                    burstiness: float = 1.0, seed: int = 0) -> Trace:
    """``num_requests`` (and/or until ``duration_s``) arrivals at ``rate`` req/s. ``arrival`` may
    carry the gamma shape (``gamma:0.5``), else ``burstiness`` is the shape. Deterministic in seed."""
    if not (rate > 0 and math.isfinite(rate)):
        raise UsageError(f"--rate must be a positive number, got {rate}")
    if num_requests is None and duration_s is None:
        raise UsageError("give --num-requests and/or --duration: a trace must be bounded")
    if num_requests is not None and num_requests < 1:
        raise UsageError("--num-requests must be at least 1")
    if duration_s is not None and not duration_s > 0:
        raise UsageError("--duration must be positive")
    kind, shape = parse_arrival(arrival)
    if kind == "gamma" and ":" not in arrival:
        shape = burstiness
    for what, dist in (("--input-len", input_len), ("--output-len", output_len)):
        if dist.kind not in ("fixed", "uniform", "normal"):
            raise UsageError(f"{what} {dist.kind!r} needs a request log (--requests)")
    times = list(rate_schedule(rate, kind, shape, 0.0, seed, end_s=duration_s, max_count=num_requests))
    reqs = []
    for i, t in enumerate(times):
        # request i draws its lengths exactly as kvplan bench's RequestSource.get(i) does (output
        # first, then prompt, from Random((seed << 32) ^ i)): the same seed is the same traffic
        rng = random.Random((seed << 32) ^ i)
        out = output_len.sample(rng)
        reqs.append(SimRequest(t, input_len.sample(rng), out))
    reqs = tuple(reqs)
    arr = kind if kind != "gamma" else f"gamma:{shape:g}"
    src = (f"{arr} {rate:g} req/s, {len(reqs)} requests, prompts {input_len.describe()}, "
           f"outputs {output_len.describe()}, seed {seed}")
    return Trace(reqs, src)


def trace_from_requests(requests, source: str) -> Trace:
    """A trace from any iterable of :class:`SimRequest` (sorted by arrival, stable)."""
    reqs = tuple(sorted(requests, key=lambda r: r.arrival_s))
    for r in reqs:
        if r.prompt_tokens < 0 or r.output_tokens < 0 or not math.isfinite(r.arrival_s):
            raise UsageError(f"invalid simulated request {r}")
    return Trace(reqs, source)


def bench_trace(traffic, *, version: tuple = (0, 33), num_special: int = 1, vocab_size: int = 32000,
                rate: Optional[float] = None, warm_up: bool = True, notes: tuple = (),
                chat_template_tokens: int = 0, reply_len: Optional[tuple] = None) -> Trace:
    """The requests ``vllm bench serve`` sends for ``traffic`` (a
    :class:`kvplan.traffic.bench_traffic.BenchTraffic`), as vLLM ``version`` samples them; ``rate``
    overrides ``--request-rate`` (a saturation search). The engine's prompt is the client's count
    plus the ``num_special`` tokens the server adds (BOS). Request 0's prompt is cached before
    t = 0: vLLM bench sends it once as its test request (and ``--num-warmups`` times more) before
    the run starts. On the chat endpoint the server renders the model's chat template instead:
    ``chat_template_tokens`` instead of the special tokens (the template's own text; shared by
    every request up to the user message, so they hit the prefix cache too). ``reply_len``
    (median tokens, log sigma): the model's own reply to a random-token prompt on the chat endpoint
    (:data:`kvplan.traffic.bench_traffic.RANDOM_PROMPT_REPLY`), which ends it before ``max_tokens``
    unless ``--ignore-eos``."""
    import dataclasses

    import functools

    from .bench_traffic import sample_bench
    from .sharegpt import early_stops, reply_stops, sample_pairs, tokenizer_scale

    t = traffic if rate is None else dataclasses.replace(traffic, request_rate=rate)
    smp = sample_bench(t, version=version, num_special=num_special, vocab_size=vocab_size,
                       sharegpt_pairs=functools.partial(sample_pairs, scale=tokenizer_scale(vocab_size)))
    if t.dataset_name == "sharegpt" and not t.ignore_eos and t.sharegpt_output_len is None:
        # the model answers and may end (EOS) before the reference reply's length
        smp = dataclasses.replace(smp, output_lens=tuple(early_stops(list(smp.output_lens), t.seed)))
    chat = "chat" in str(getattr(t, "endpoint", ""))
    replies = reply_len if (chat and reply_len and t.dataset_name == "random" and not t.ignore_eos) else None
    if replies:
        smp = dataclasses.replace(smp, output_lens=tuple(reply_stops(list(smp.output_lens), t.seed, *replies)))
    added = chat_template_tokens if chat else num_special
    # the template's text before the user message (all but its ~5 closing tokens) is every prompt's
    head = max(0, chat_template_tokens - 5) if chat else num_special
    shared = head + smp.prefix_len if (smp.prefix_len or (chat and head)) else 0
    reqs = []
    for i, (p, o, a) in enumerate(zip(smp.prompt_lens, smp.output_lens, smp.arrivals)):
        server = p + added
        kw = {}
        if shared:
            kw.update(root_id="bench-prefix", root_tokens=shared)
        if i == 0 and warm_up:
            kw.update(prefix_id="bench-warm-up", prefix_tokens=server)
        elif i < t.warm_prompts:
            kw.update(prefix_id=f"bench-prompt-{i}", prefix_tokens=min(server, (t.warm_prompt_len or p) + num_special))
        reqs.append(SimRequest(a, server, o, client_prompt_tokens=p, **kw))
    warm: tuple = ()
    if reqs and (warm_up or t.warm_prompts):
        warm = (("bench-prefix", shared, 0),) if shared else ()
        # the earlier run's prompts, oldest first (evicted first), then the test request (sent last)
        warm += tuple((r.prefix_id, r.prefix_tokens, shared) for r in reqs[1:t.warm_prompts])
        # an earlier run with more prompts: its later prompts were sent after these (newer in the LRU)
        tail = (t.warm_prompt_len or t.random_input_len) + num_special
        warm += tuple((f"bench-prompt-{i}", tail, shared) for i in range(max(len(reqs), 1), t.warm_prompts))
        if warm_up:
            warm += (("bench-warm-up", reqs[0].prompt_tokens, shared),)
    bench = {"request_rate": "inf" if math.isinf(t.request_rate) else t.request_rate, "burstiness": t.burstiness,
             "max_concurrency": t.max_concurrency, "num_prompts": t.num_prompts, "seed": t.seed,
             "dataset_name": t.dataset_name, "ignore_eos": t.ignore_eos, "num_special_tokens": num_special,
             "sampling": smp.rule, "exact_draws": smp.exact, "warm_up_cached": bool(warm),
             "warm_prompts": t.warm_prompts, "warm_prompt_len": t.warm_prompt_len, "endpoint": t.endpoint,
             "chat_template_tokens": chat_template_tokens if chat else 0}
    if t.dataset_name == "random":
        bench.update(random_input_len=t.random_input_len, random_output_len=t.random_output_len,
                     random_range_ratio=t.random_range_ratio if t.random_range_ratio is not None else
                     (1.0 if version < (0, 9) else 0.0), random_prefix_len=t.random_prefix_len)
    elif t.sharegpt_output_len is not None:
        bench["sharegpt_output_len"] = t.sharegpt_output_len
    if t.dataset_name == "sharegpt" and not t.ignore_eos and t.sharegpt_output_len is None:
        from .sharegpt import EARLY_STOP_SHARE

        bench["early_stop_share"] = EARLY_STOP_SHARE
        notes = tuple(notes) + (f"ShareGPT replies: the model ends {EARLY_STOP_SHARE:.0%} of them (EOS) before "
                                "bench's max_tokens (the reference reply's length), at a uniform point of it; "
                                "--ignore-eos runs them to max_tokens",)
    if replies:
        bench["reply_tokens_median"], bench["reply_tokens_sigma"] = replies
        notes = tuple(notes) + (f"random prompts on the chat endpoint: this model ends its own reply (EOS) at about "
                                f"{replies[0]:.0f} tokens (log-normal, sigma {replies[1]:g}; the dev set's token "
                                "counts) unless max_tokens comes first; --ignore-eos runs them to max_tokens",)
    return Trace(tuple(reqs), t.describe(), max_concurrency=t.max_concurrency, warm_prefixes=warm, bench=bench,
                 notes=tuple(notes) + tuple(t.notes))


def trace_maker(*, rate: Optional[float], requests: Optional[str] = None, tokenizer: Optional[str] = None,
                num_requests: Optional[int] = None, duration: Optional[str] = None,
                input_len: Optional[str] = None, output_len: Optional[str] = None, arrival: str = "poisson",
                seed: int = 0, bench=None, max_concurrency: Optional[int] = None,
                version: tuple = (0, 33), num_special: int = 1, vocab_size: int = 32000,
                notes: tuple = (), chat_template_tokens: int = 0,
                reply_len: Optional[tuple] = None) -> Callable[[Optional[float]], Trace]:
    """The traffic flags of ``kvplan simulate`` / ``kvplan tune`` -> ``make_trace(rate)``: a request
    log replayed (its timestamps unless a rate is given), ``vllm bench serve``'s traffic (``bench``,
    a :class:`BenchTraffic`), else synthetic arrivals at the rate (1,000 requests unless
    --num-requests or --duration; prompts 1024 and outputs 256 tokens unless given).
    ``max_concurrency`` closes the loop for any of them. Every flag is checked here, before
    anything is simulated; the same function builds the trace at each rate of a saturation search,
    with the same seed."""
    from ..limits import active as active_limits
    from ..slo import parse_seconds
    from .lengthdist import parse_length

    limits = active_limits()
    if max_concurrency is not None and max_concurrency < 1:
        raise UsageError(f"--max-concurrency must be at least 1, got {max_concurrency}")
    if bench is not None:
        bench.validate()
        limits.requests(bench.num_prompts, "--num-prompts")
        maker = TraceMaker(bench=bench, version=version, num_special=num_special, vocab_size=vocab_size,
                           notes=tuple(notes), chat_template_tokens=chat_template_tokens, reply_len=reply_len)
        maker(None)  # every flag checked now
        return maker
    if rate is None and not requests:
        raise UsageError("give --rate R (synthetic traffic), --request-rate / --num-prompts / --dataset-name "
                         "(vllm bench serve's traffic) or --requests LOG (replay)")
    if rate is not None and not rate > 0:
        raise UsageError(f"--rate must be positive, got {rate}")
    if num_requests is not None and num_requests < 1:
        raise UsageError("--num-requests must be at least 1")
    dur = parse_seconds(duration, "--duration") if duration else None
    in_dist = parse_length(input_len or "1024", "--input-len")
    out_dist = parse_length(output_len or "256", "--output-len")
    n = num_requests if num_requests is not None or dur is not None else 1000
    if n is not None and not requests:  # a log replayed stops at the cap (TraceMaker), and says so
        limits.requests(n, "--num-requests")
    return TraceMaker(requests=requests, tokenizer=tokenizer, num_requests=num_requests, count=n, duration_s=dur,
                      input_len=in_dist, output_len=out_dist, arrival=arrival, seed=seed,
                      max_concurrency=max_concurrency, notes=tuple(notes))


_LOG_CACHE: dict = {}  # a request log read once per process for the probes of a capacity search


@dataclass(frozen=True)
class TraceMaker:
    """``make_trace(rate, length=None)`` for the traffic flags (what :func:`trace_maker` returns): a
    plain object, so a sweep's worker processes can draw the same traffic. ``length`` requests
    instead of the flags' count (a capacity probe's; a log is cycled, its prefixes renamed per pass,
    when it has fewer)."""

    requests: Optional[str] = None
    tokenizer: Any = None
    num_requests: Optional[int] = None
    count: Optional[int] = 1000  # None: arrivals until duration_s
    duration_s: Optional[float] = None
    input_len: Any = None
    output_len: Any = None
    arrival: str = "poisson"
    seed: int = 0
    max_concurrency: Optional[int] = None
    bench: Any = None
    version: tuple = (0, 33)
    num_special: int = 1
    vocab_size: int = 32000
    notes: tuple = ()
    max_tokens: Optional[int] = None  # a log's records without an output length get this (preflight's --max-tokens)
    estimate: Optional[bool] = None  # a log without a tokenizer: estimated from characters (logtrace's rule)
    chat_template_tokens: int = 0  # vllm bench's chat endpoint: the template's tokens added to each prompt
    reply_len: Optional[tuple] = None  # the model's own reply to a random chat prompt (median, log sigma)

    def __call__(self, r: Optional[float], length: Optional[int] = None) -> Trace:
        import dataclasses

        from ..limits import active as active_limits

        if self.bench is not None:
            b = self.bench if length is None else dataclasses.replace(self.bench, num_prompts=length)
            return bench_trace(b, version=self.version, num_special=self.num_special, vocab_size=self.vocab_size,
                               rate=r, notes=self.notes, chat_template_tokens=self.chat_template_tokens,
                               reply_len=self.reply_len)
        if self.requests:
            from .logtrace import trace_from_log

            limits = active_limits()
            if length is None:  # a log longer than the cap is replayed up to it, and the trace says so
                cap = limits.max_requests + 1
                tr = trace_from_log([self.requests], tokenizer=self.tokenizer, rate=r, arrival=self.arrival,
                                    seed=self.seed, num_requests=min(self.num_requests or cap, cap),
                                    max_tokens=self.max_tokens, estimate=self.estimate)
                if len(tr.requests) > limits.max_requests:
                    tr = dataclasses.replace(tr, requests=tr.requests[:limits.max_requests], notes=tuple(tr.notes) + (
                        f"replayed the first {limits.max_requests:,} requests of the log: {limits.who}'s cap per run "
                        f"({limits.beyond})",))
            else:  # a probe: the log read once per process, its lengths cycled at the probe's rate
                key = (self.requests, self.tokenizer if isinstance(self.tokenizer, (str, type(None)))
                       else id(self.tokenizer), self.max_tokens, self.estimate)
                if key not in _LOG_CACHE:
                    _LOG_CACHE[key] = trace_from_log([self.requests], tokenizer=self.tokenizer, rate=1.0,
                                                     arrival=self.arrival, seed=self.seed, max_tokens=self.max_tokens,
                                                     estimate=self.estimate,
                                                     num_requests=limits.max_requests)
                tr = cycle_trace(_LOG_CACHE[key], length, r, arrival=self.arrival, seed=self.seed)
        else:
            if length is None and self.count is None and r is not None and self.duration_s is not None:
                active_limits().requests(r * self.duration_s, f"--rate {r:g} x --duration {self.duration_s:g}s")
            tr = synthetic_trace(r, num_requests=self.count if length is None else length,
                                 duration_s=self.duration_s if length is None else None, input_len=self.input_len,
                                 output_len=self.output_len, arrival=self.arrival, seed=self.seed)
        if self.max_concurrency is not None or self.notes:
            tr = dataclasses.replace(tr, max_concurrency=self.max_concurrency,
                                     notes=tuple(tr.notes) + tuple(self.notes))
        return tr


def cycle_trace(trace: Trace, n: int, rate: Optional[float], *, arrival: str = "poisson", seed: int = 0) -> Trace:
    """``n`` requests of ``trace``'s lengths, in order and again from the start when it has fewer
    (each pass's prefix ids their own), arriving at ``rate`` with ``arrival``'s law (its own
    timestamps, stretched by repetition, when ``rate`` is None)."""
    import dataclasses

    reqs = trace.requests
    if not reqs or n <= len(reqs) and rate is None:
        return dataclasses.replace(trace, requests=reqs[:n])
    if rate is not None:
        kind, shape = parse_arrival(arrival)
        times = list(rate_schedule(rate, kind, shape, 0.0, seed, max_count=n))
    else:
        span = reqs[-1].arrival_s - reqs[0].arrival_s
        step = span + (span / max(1, len(reqs) - 1))
        times = [reqs[i % len(reqs)].arrival_s + (i // len(reqs)) * step for i in range(n)]
    out = []
    for i in range(n):
        r = reqs[i % len(reqs)]
        k = i // len(reqs)
        if k and (r.prefix_id is not None or r.root_id is not None):
            r = dataclasses.replace(r, prefix_id=None if r.prefix_id is None else f"{r.prefix_id}#{k}",
                                    root_id=None if r.root_id is None else f"{r.root_id}#{k}")
        out.append(dataclasses.replace(r, arrival_s=times[i]))
    return dataclasses.replace(trace, requests=tuple(out))
