"""The traffic flags of ``kvplan simulate`` and ``kvplan tune``, declared once (:data:`TRAFFIC_FLAGS`):
``vllm bench serve``'s own (``--request-rate``, ``--burstiness``, ``--max-concurrency``,
``--num-prompts``, ``--dataset-name``, ``--random-*``, ``--sharegpt-output-len``, ``--ignore-eos``,
``--num-warmups``), the pasted commands (``--from-bench-cmd``, ``--from-serve-cmd``), kvplan's
older traffic flags (``--rate``, ``--requests``, ``--num-requests``, ``--input-len``, ``--output-len``,
``--arrival``, ``--seed``, ...), and the rules that turn them into ``make_trace(rate)``
(:func:`traffic_maker`).

Which traffic: any of vLLM bench's flags (or ``--request-rate inf`` / ``--rate inf``) selects
vLLM bench's traffic, sampled as ``--vllm-version``'s bench samples it; then ``--rate`` is
``--request-rate``, ``--num-requests`` is ``--num-prompts`` and a plain ``--input-len N`` /
``--output-len N`` is ``--random-input-len`` / ``--random-output-len``. Otherwise the older flags
keep their meaning (kvplan bench's schedule). ``--max-concurrency`` closes the loop for both.
A flag given on kvplan's command line wins over the same flag in ``--from-bench-cmd``.

Only the standard library at module level (the CLI declares its options from this table).
"""
from __future__ import annotations

import math
from typing import Any, Optional

from ..errors import UsageError
from ..flags import Flag

#: vllm bench serve's flags, in their ``--help`` order
BENCH_FLAGS: tuple[Flag, ...] = (
    Flag("request_rate", ("--request-rate",), str, None,
         "vllm bench: requests/s, or inf (every request at t=0; bench's default)."),
    Flag("burstiness", ("--burstiness",), float, None,
         "vllm bench: gamma shape of the gaps (1 = Poisson, <1 burstier, inf = constant)."),
    Flag("max_concurrency", ("--max-concurrency",), int, None,
         "vllm bench: at most N requests in flight (closed loop; the rate still paces sends)."),
    Flag("num_prompts", ("--num-prompts",), int, None, "vllm bench: requests in the run (1000)."),
    Flag("dataset_name", ("--dataset-name",), str, None,
         "vllm bench: random (default) or sharegpt (kvplan's length model of it)."),
    Flag("random_input_len", ("--random-input-len",), int, None, "vllm bench: 1024."),
    Flag("random_output_len", ("--random-output-len",), int, None, "vllm bench: 128."),
    Flag("random_range_ratio", ("--random-range-ratio",), float, None,
         "vllm bench: lengths uniform in [L(1-r), L(1+r)] (0); before 0.9 in [L·r, L] (1.0)."),
    Flag("random_prefix_len", ("--random-prefix-len",), int, None, "vllm bench: tokens every prompt shares in front (0)."),
    Flag("sharegpt_output_len", ("--sharegpt-output-len",), int, None, "vllm bench: every ShareGPT request's max_tokens."),
    Flag("ignore_eos", ("--ignore-eos",), bool, None,
         "vllm bench: outputs run to max_tokens (random-token prompts do so anyway)."),
    Flag("num_warmups", ("--num-warmups",), int, None, "vllm bench: warm-up requests (0)."),
)

#: a scenario on top of vLLM bench's traffic (``kvplan simulate`` only)
WARM_FLAGS: tuple[Flag, ...] = (
    Flag("warm_prompts", ("--warm-prompts",), int, None,
         "Scenario: the server already served the first N prompts of this --seed's random dataset (an earlier "
         "run); they sit in its prefix cache at t=0, as far as the KV pool holds them."),
    Flag("warm_prompt_len", ("--warm-prompt-len",), int, None,
         "Scenario: the earlier run's --random-input-len (default: this run's); the first min(both) tokens of "
         "each warm prompt are cached."),
)

#: the pasted commands
FROM_BENCH_CMD = Flag("from_bench_cmd", ("--from-bench-cmd",), str, None,
                      'Paste the run: "vllm bench serve ..." or "python benchmarks/benchmark_serving.py ...".')
FROM_SERVE_CMD = Flag("from_serve_cmd", ("--from-serve-cmd",), str, None,
                      'Paste the server: "vllm serve MODEL ..." (its plan flags).')

#: kvplan's own traffic flags (aliases of vllm bench's when those are used)
KVPLAN_FLAGS: tuple[Flag, ...] = (
    Flag("rate", ("--rate",), float, None, "Requests per second (with --requests: replay at this rate)."),
    Flag("requests", ("--requests",), str, None, "A request log to replay (its timestamps unless --rate)."),
    Flag("tokenizer", ("--tokenizer",), str, None, "With --requests: count prompts with this tokenizer."),
    Flag("num_requests", ("--num-requests",), int, None, "How many requests (default 1000 with --rate)."),
    Flag("duration", ("--duration",), str, None, "Arrivals for this long, e.g. 60s, 5m."),
    Flag("input_len", ("--input-len",), str, None, "N, uniform:LO,HI, normal:MEAN,STD (colon forms too) [1024]."),
    Flag("output_len", ("--output-len",), str, None, "Tokens generated per request, same syntax [256]."),
    Flag("arrival", ("--arrival",), str, None, "constant, poisson or gamma:K [poisson]."),
    Flag("seed", ("--seed",), int, None, "[0]"),
)

#: every traffic flag, in ``kvplan simulate --help``'s order
TRAFFIC_FLAGS: tuple[Flag, ...] = (*BENCH_FLAGS, *WARM_FLAGS, FROM_BENCH_CMD, FROM_SERVE_CMD, *KVPLAN_FLAGS)

#: the bench flags' BenchTraffic field names
BENCH_KEYS = tuple(f.field for f in (*BENCH_FLAGS, *WARM_FLAGS))


def parse_rate(text: Optional[str], flag: str = "--request-rate") -> Optional[float]:
    if text is None:
        return None
    raw = str(text).strip().lower()
    try:
        v = float(raw)
    except ValueError:
        raise UsageError(f"{flag}: cannot read {text!r} (a number of requests/s, or inf)") from None
    if not v > 0 or math.isnan(v):
        raise UsageError(f"{flag} must be positive or inf, got {text!r}")
    return v


def apply_serve_cmd(text: Optional[str], values: dict[str, Any]) -> tuple[str, ...]:
    """``--from-serve-cmd``: fill the serve flags the command line did not give (``values``, by
    field, in place) from the pasted ``vllm serve`` line. Returns the notes."""
    if not text:
        return ()
    from .bench_cmd import parse_serve_cmd

    ps = parse_serve_cmd(text)
    for key, value in ps.plan.items():
        values.setdefault(key, value)
    return tuple(ps.notes)


def _num_or_none(value: Any) -> Optional[float]:
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def traffic_maker(*, flags: dict[str, Any], model_spec=None, vllm_version: Optional[str] = None,
                  notes: tuple = ()):
    """The ``make_trace(rate)`` of the traffic flags (``flags``: the command's locals). Also returns
    the model named by ``--from-bench-cmd`` (used when ``--model`` is not given)."""
    from ..memory.semantics import parse_version
    from .trace import trace_maker

    given = {k: flags.get(k) for k in BENCH_KEYS}
    given["request_rate"] = parse_rate(flags.get("request_rate"))
    notes = tuple(notes)
    seed = flags.get("seed")
    bench_model = None
    tokenizer = flags.get("tokenizer")
    if flags.get("from_bench_cmd"):
        from .bench_cmd import parse_bench_cmd

        pb = parse_bench_cmd(flags["from_bench_cmd"])
        for key, value in pb.traffic.items():
            if key in given and given[key] is None:
                given[key] = value
            elif key == "endpoint":
                given[key] = value
        if seed is None:
            seed = pb.traffic.get("seed")
        notes = notes + tuple(pb.notes)
        bench_model = pb.model
        tokenizer = tokenizer or pb.tokenizer
    rate = flags.get("rate")
    bench_mode = any(given[k] is not None for k in BENCH_KEYS) or (rate is not None and math.isinf(rate)) \
        or bool(flags.get("from_bench_cmd"))
    if bench_mode and flags.get("requests"):
        raise UsageError("--requests replays a log; vllm bench serve's traffic flags (--request-rate, "
                         "--num-prompts, --dataset-name, ...) describe synthetic traffic: give one or the other")
    if not bench_mode:
        return trace_maker(rate=rate, requests=flags.get("requests"), tokenizer=flags.get("tokenizer"),
                           num_requests=flags.get("num_requests"), duration=flags.get("duration"),
                           input_len=flags.get("input_len"), output_len=flags.get("output_len"),
                           arrival=flags.get("arrival") or "poisson", seed=seed or 0,
                           max_concurrency=given["max_concurrency"], notes=notes), bench_model
    # aliases: kvplan's older flags mean vLLM bench's in this mode; both given with different values
    # is a contradiction to refuse, not to settle silently
    for old, new, what in (("rate", "request_rate", "the request rate"),
                           ("num_requests", "num_prompts", "the request count"),
                           ("input_len", "random_input_len", "the input length"),
                           ("output_len", "random_output_len", "the output length")):
        a = rate if old == "rate" else flags.get(old)
        b = given[new]
        if a is not None and b is not None and str(a).strip() != str(b).strip() and _num_or_none(a) != _num_or_none(b):
            raise UsageError(f"--{old.replace('_', '-')} {a} and --{new.replace('_', '-')} {b} both give {what}: "
                             "give one of them")
    if given["request_rate"] is None and rate is not None:
        given["request_rate"] = rate
    if given["num_prompts"] is None and flags.get("num_requests") is not None:
        given["num_prompts"] = flags["num_requests"]
    for old, new in (("input_len", "random_input_len"), ("output_len", "random_output_len")):
        v = flags.get(old)
        if v is not None and given[new] is None:
            try:
                given[new] = int(str(v).strip())
            except ValueError:
                raise UsageError(f"--{old.replace('_', '-')} {v!r}: with vllm bench serve's traffic give one "
                                 f"length (--{new.replace('_', '-')}; --random-range-ratio spreads it)") from None
    if flags.get("duration"):
        raise UsageError("--duration is not a vllm bench serve flag: the run is --num-prompts requests")
    if (flags.get("arrival") or "poisson") != "poisson":
        raise UsageError("--arrival is kvplan bench's; with vllm bench serve's traffic use --burstiness")
    from .bench_traffic import (BenchTraffic, chat_template_tokens_for, random_prompt_reply_for, special_tokens_for,
                                tokenizer_facts)

    kw = {k: v for k, v in given.items() if v is not None}
    kw["seed"] = int(seed or 0)
    bench = BenchTraffic(**kw).validate()
    version = parse_version(vllm_version)
    from pathlib import Path

    if tokenizer and Path(tokenizer).expanduser().exists():
        num_special, vocab = tokenizer_facts(str(Path(tokenizer).expanduser()))
    else:
        if tokenizer:  # a hub id (vllm bench's --tokenizer): kvplan reads no tokenizer from the network here
            notes = tuple(notes) + (f"--tokenizer {tokenizer}: not a local tokenizer.json; the special-token "
                                    "count and vocab size come from the model's family and config.json",)
        mt = getattr(model_spec, "model_type", "") or ""
        num_special = special_tokens_for(mt)
        vocab = int(getattr(model_spec, "vocab_size", 0) or 32000)
        if not math.isinf(bench.request_rate) and version < (0, 10, 2) and bench.dataset_name == "random":
            notes = tuple(notes) + ("vLLM <= 0.10.1 draws the arrival gaps after the random dataset's token offsets, "
                                    "whose draws depend on the tokenizer's vocab size: without --tokenizer kvplan "
                                    "uses config.json's vocab_size, so the send times follow vLLM's law but not "
                                    "its exact draws",)
    model_type = getattr(model_spec, "model_type", "") or ""
    return trace_maker(rate=None, bench=bench, version=version, num_special=num_special, vocab_size=vocab,
                       notes=notes, chat_template_tokens=chat_template_tokens_for(model_type),
                       reply_len=random_prompt_reply_for(model_type)), bench_model
