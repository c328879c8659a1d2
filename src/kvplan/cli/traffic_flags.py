"""The traffic flags of ``kvplan simulate`` and ``kvplan tune``: ``vllm bench serve``'s own
(``--request-rate``, ``--burstiness``, ``--max-concurrency``, ``--num-prompts``, ``--dataset-name``,
``--random-*``, ``--sharegpt-output-len``, ``--ignore-eos``, ``--num-warmups``, ``--seed``), the
pasted commands (``--from-bench-cmd``, ``--from-serve-cmd``), and the rules that turn them, with
kvplan's older traffic flags (``--rate``, ``--num-requests``, ``--input-len``, ``--output-len``),
into ``make_trace(rate)``.

Which traffic: any of vLLM bench's flags (or ``--request-rate inf`` / ``--rate inf``) selects
vLLM bench's traffic, sampled as ``--vllm-version``'s bench samples it; then ``--rate`` is
``--request-rate``, ``--num-requests`` is ``--num-prompts`` and a plain ``--input-len N`` /
``--output-len N`` is ``--random-input-len`` / ``--random-output-len``. Otherwise the older flags
keep their meaning (kvplan bench's schedule). ``--max-concurrency`` closes the loop for both.
A flag given on kvplan's command line wins over the same flag in ``--from-bench-cmd``.
"""
from __future__ import annotations

import functools
import inspect
import math
from typing import Annotated, Any, Callable, Optional

import typer

from ..errors import UsageError

RequestRate = Annotated[Optional[str], typer.Option(
    "--request-rate", help="vllm bench: requests/s, or inf (every request at t=0; bench's default).")]
Burstiness = Annotated[Optional[float], typer.Option(
    "--burstiness", help="vllm bench: gamma shape of the gaps (1 = Poisson, <1 burstier, inf = constant).")]
MaxConcurrency = Annotated[Optional[int], typer.Option(
    "--max-concurrency", help="vllm bench: at most N requests in flight (closed loop; the rate still paces sends).")]
NumPrompts = Annotated[Optional[int], typer.Option("--num-prompts", help="vllm bench: requests in the run (1000).")]
DatasetName = Annotated[Optional[str], typer.Option(
    "--dataset-name", help="vllm bench: random (default) or sharegpt (kvplan's length model of it).")]
RandomInputLen = Annotated[Optional[int], typer.Option("--random-input-len", help="vllm bench: 1024.")]
RandomOutputLen = Annotated[Optional[int], typer.Option("--random-output-len", help="vllm bench: 128.")]
RandomRangeRatio = Annotated[Optional[float], typer.Option(
    "--random-range-ratio", help="vllm bench: lengths uniform in [L(1-r), L(1+r)] (0).")]
RandomPrefixLen = Annotated[Optional[int], typer.Option(
    "--random-prefix-len", help="vllm bench: tokens every prompt shares in front (0).")]
SharegptOutputLen = Annotated[Optional[int], typer.Option(
    "--sharegpt-output-len", help="vllm bench: every ShareGPT request's max_tokens.")]
IgnoreEos = Annotated[Optional[bool], typer.Option(
    "--ignore-eos", help="vllm bench: outputs run to max_tokens (random-token prompts do so anyway).")]
NumWarmups = Annotated[Optional[int], typer.Option("--num-warmups", help="vllm bench: warm-up requests (0).")]
WarmPrompts = Annotated[Optional[int], typer.Option(
    "--warm-prompts", help="Scenario: the server already served the first N prompts of this --seed's random "
    "dataset (an earlier run); they sit in its prefix cache at t=0, as far as the KV pool holds them.")]
WarmPromptLen = Annotated[Optional[int], typer.Option(
    "--warm-prompt-len", help="Scenario: the earlier run's --random-input-len (default: this run's); the "
    "first min(both) tokens of each warm prompt are cached.")]
FromBenchCmd = Annotated[Optional[str], typer.Option(
    "--from-bench-cmd", help='Paste the run: "vllm bench serve ..." or "python benchmarks/benchmark_serving.py ...".')]
FromServeCmd = Annotated[Optional[str], typer.Option(
    "--from-serve-cmd", help='Paste the server: "vllm serve MODEL ..." (its plan flags).')]

#: vllm bench serve's flags that ``kvplan simulate`` and ``kvplan tune`` both take, in their
#: ``--help`` order: declared once here, attached to each command by :func:`bench_flags`
BENCH_OPTIONS = (("request_rate", RequestRate), ("burstiness", Burstiness), ("max_concurrency", MaxConcurrency),
                 ("num_prompts", NumPrompts), ("dataset_name", DatasetName), ("random_input_len", RandomInputLen),
                 ("random_output_len", RandomOutputLen), ("random_range_ratio", RandomRangeRatio),
                 ("random_prefix_len", RandomPrefixLen), ("sharegpt_output_len", SharegptOutputLen),
                 ("ignore_eos", IgnoreEos), ("num_warmups", NumWarmups))


def bench_flags(command: Callable) -> Callable:
    """Give a typer command vllm bench serve's traffic flags (:data:`BENCH_OPTIONS`, each
    ``None`` unless given) in place of its keyword parameter ``bench``: the command's signature
    lists them there (so ``--help`` and click's parser see them as the command's own options) and
    the command receives them as one dict, ``bench`` (name -> value; merge it into the flags dict
    that :func:`traffic_maker` reads)."""
    sig = inspect.signature(command, eval_str=True)
    params = list(sig.parameters.values())
    at = next(i for i, q in enumerate(params) if q.name == "bench")
    added = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=kind)
             for name, kind in BENCH_OPTIONS]
    names = tuple(name for name, _ in BENCH_OPTIONS)

    @functools.wraps(command)
    def with_bench(**kwargs):
        bench = {name: kwargs.pop(name, None) for name in names}
        return command(bench=bench, **kwargs)

    new = params[:at] + added + params[at + 1:]
    with_bench.__signature__ = sig.replace(parameters=new)
    with_bench.__annotations__ = {q.name: q.annotation for q in new if q.annotation is not inspect.Parameter.empty}
    del with_bench.__wrapped__  # typer reads the signature above, not the command's own
    return with_bench


#: the bench flags' BenchTraffic field names
BENCH_KEYS = ("request_rate", "burstiness", "max_concurrency", "num_prompts", "dataset_name", "random_input_len",
              "random_output_len", "random_range_ratio", "random_prefix_len", "sharegpt_output_len", "ignore_eos",
              "num_warmups", "warm_prompts", "warm_prompt_len")


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
    from ..traffic.bench_cmd import parse_serve_cmd

    ps = parse_serve_cmd(text)
    for key, value in ps.plan.items():
        values.setdefault(key, value)
    return tuple(ps.notes)


def traffic_maker(*, flags: dict[str, Any], model_spec=None, vllm_version: Optional[str] = None,
                  notes: tuple = ()):
    """The ``make_trace(rate)`` of the traffic flags (``flags``: the command's locals). Also returns
    the model named by ``--from-bench-cmd`` (used when ``--model`` is not given)."""
    from ..memory.semantics import parse_version
    from ..traffic.trace import trace_maker

    given = {k: flags.get(k) for k in BENCH_KEYS}
    given["request_rate"] = parse_rate(flags.get("request_rate"))
    notes = tuple(notes)
    seed = flags.get("seed")
    bench_model = None
    tokenizer = flags.get("tokenizer")
    if flags.get("from_bench_cmd"):
        from ..traffic.bench_cmd import parse_bench_cmd

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
    # aliases: kvplan's older flags mean vLLM bench's in this mode
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
    from ..traffic.bench_traffic import BenchTraffic, special_tokens_for, tokenizer_facts

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
    return trace_maker(rate=None, bench=bench, version=version, num_special=num_special, vocab_size=vocab,
                       notes=notes), bench_model
