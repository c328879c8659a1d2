"""Paste the commands you would run: ``vllm bench serve …`` (or ``python benchmarks/benchmark_serving.py
…``) and ``vllm serve MODEL …`` -> kvplan's traffic and plan flags.

The text is split with :func:`shlex.split` into an argv list (never run, never given to a shell).
Leading ``VAR=value`` environment assignments are skipped (and listed in the notes). Flags are
read as vLLM's argparse reads them: ``--flag value`` and ``--flag=value``, underscores as dashes
(vLLM's ``FlexibleArgumentParser``) and unambiguous prefixes (argparse's ``allow_abbrev``, so
``--random-input 800`` is ``--random-input-len 800``). A flag kvplan does not know, or knows and
cannot model, is a usage error that names it.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import UsageError
from ..flags import read_number as _num
from ..flags import split_argv as _parse_flags

# (name, kind): kind "value" takes one argument, "flag" none, "multi" one or more (nargs="+"/"*")
_BENCH_MAPPED = {
    "--request-rate": "value", "--burstiness": "value", "--max-concurrency": "value", "--num-prompts": "value",
    "--seed": "value", "--dataset-name": "value", "--random-input-len": "value", "--random-output-len": "value",
    "--random-range-ratio": "value", "--random-prefix-len": "value", "--sharegpt-output-len": "value",
    "--ignore-eos": "flag", "--num-warmups": "value", "--model": "value", "--tokenizer": "value",
    "--dataset-path": "value", "--endpoint": "value", "--backend": "value", "--endpoint-type": "value",
}
#: flags that do not change what the server computes (where results go, how the client connects,
#: what it prints, the sampling temperature: vLLM's per-token cost does not depend on it)
_BENCH_IGNORED = {
    "--host": "value", "--port": "value", "--base-url": "value", "--label": "value", "--trust-remote-code": "flag",
    "--disable-tqdm": "flag", "--save-result": "flag", "--save-detailed": "flag", "--append-result": "flag",
    "--metadata": "multi", "--result-dir": "value", "--result-filename": "value", "--percentile-metrics": "value",
    "--metric-percentiles": "value", "--goodput": "multi", "--served-model-name": "value",
    "--tokenizer-mode": "value", "--ready-check-timeout-sec": "value", "--temperature": "value",
    "--top-p": "value", "--top-k": "value", "--min-p": "value", "--request-id-prefix": "value",
    "--no-oversample": "flag", "--disable-shuffle": "flag", "--insecure": "flag", "--header": "multi",
    "--plot-timeline": "flag", "--plot-dataset-stats": "flag", "--skip-chat-template": "flag",
}
#: known to vLLM bench, not modelled: named in the error
_BENCH_UNSUPPORTED = {
    "--ramp-up-strategy": "value", "--ramp-up-start-rps": "value", "--ramp-up-end-rps": "value",
    "--lora-modules": "multi", "--use-beam-search": "flag", "--logprobs": "value", "--profile": "flag",
    "--random-batch-size": "value", "--hf-subset": "value", "--hf-split": "value", "--hf-output-len": "value",
    "--sonnet-input-len": "value", "--sonnet-output-len": "value", "--sonnet-prefix-len": "value",
    "--custom-output-len": "value", "--extra-body": "value", "--repetition-penalty": "value",
}

#: vLLM serve's flags kvplan reads are the table's (kvplan/serve_flags.py); these it reads past:
_SERVE_IGNORED = {
    "--host": "value", "--port": "value", "--trust-remote-code": "flag", "--served-model-name": "multi",
    "--tokenizer": "value", "--tokenizer-mode": "value", "--enable-auto-tool-choice": "flag",
    "--tool-call-parser": "value", "--reasoning-parser": "value", "--config-format": "value",
    "--load-format": "value", "--distributed-executor-backend": "value", "--api-key": "value",
    "--disable-log-requests": "flag", "--disable-log-stats": "flag", "--enable-log-requests": "flag",
    "--uvicorn-log-level": "value", "--chat-template": "value", "--download-dir": "value", "--seed": "value",
    "--generation-config": "value", "--max-seq-len-to-capture": "value",
    "--disable-uvicorn-access-log": "flag", "--revision": "value", "--max-log-len": "value",
    "--disable-custom-all-reduce": "flag", "--disable-detokenize": "flag",
}
_SERVE_UNSUPPORTED = {
    "--kv-transfer-config": "value", "--pipeline-parallel-backend": "value", "--kv-offloading-size": "value",
}


def _split(text: str, what: str) -> list[str]:
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"{what}: cannot split the command: {exc}") from None
    return argv


def _strip_env(argv: list[str]) -> tuple[list[str], list[str]]:
    env = []
    while argv and "=" in argv[0] and not argv[0].startswith("-") and argv[0].split("=", 1)[0].isidentifier():
        env.append(argv.pop(0))
    if argv and argv[0] == "env":
        argv.pop(0)
        return _strip_env(argv)
    return argv, env


@dataclass(frozen=True)
class ParsedBench:
    traffic: dict[str, Any]  # BenchTraffic fields
    model: Optional[str]
    tokenizer: Optional[str]
    tool: str
    notes: tuple[str, ...]


def parse_bench_cmd(text: str) -> ParsedBench:
    """``vllm bench serve …`` / ``python benchmarks/benchmark_serving.py …`` -> traffic flags."""
    what = "--from-bench-cmd"
    argv, env = _strip_env(_split(text, what))
    notes: list[str] = []
    if env:
        notes.append(f"environment ignored: {' '.join(env)}")
    tool = ""
    if len(argv) >= 3 and argv[0].endswith("vllm") and argv[1] == "bench":
        if argv[2] != "serve":
            raise UsageError(f"{what}: 'vllm bench {argv[2]}' is not a serving benchmark; kvplan models "
                             "'vllm bench serve'")
        tool, argv = "vllm bench serve", argv[3:]
    else:
        while argv and (argv[0].rsplit("/", 1)[-1].startswith("python")):
            argv = argv[1:]
        script = argv[0].rsplit("/", 1)[-1] if argv else ""
        if script == "benchmark_serving.py":
            tool, argv = "benchmarks/benchmark_serving.py", argv[1:]
        elif script in ("benchmark_throughput.py", "benchmark_latency.py"):
            raise UsageError(f"{what}: {script} is an offline benchmark (no server, no arrivals); kvplan "
                             "simulates 'vllm bench serve' / benchmark_serving.py runs")
        else:
            raise UsageError(f"{what}: expected 'vllm bench serve ...' or 'python benchmarks/benchmark_serving.py "
                             f"...', got {text[:60]!r}")
    flags, positionals, ignored = _parse_flags(
        argv, {"mapped": _BENCH_MAPPED, "ignored": _BENCH_IGNORED, "unsupported": _BENCH_UNSUPPORTED}, what)
    if positionals:
        raise UsageError(f"{what}: unexpected argument(s) {' '.join(positionals)}")
    t: dict[str, Any] = {}
    if "--request-rate" in flags:
        t["request_rate"] = _num(flags["--request-rate"], "--request-rate")
    if "--burstiness" in flags:
        t["burstiness"] = _num(flags["--burstiness"], "--burstiness")
    for flag, key in (("--max-concurrency", "max_concurrency"), ("--num-prompts", "num_prompts"), ("--seed", "seed"),
                      ("--random-input-len", "random_input_len"), ("--random-output-len", "random_output_len"),
                      ("--random-prefix-len", "random_prefix_len"), ("--sharegpt-output-len", "sharegpt_output_len"),
                      ("--num-warmups", "num_warmups")):
        if flag in flags:
            t[key] = _num(flags[flag], flag, int)
    if "--random-range-ratio" in flags:
        t["random_range_ratio"] = _num(flags["--random-range-ratio"], "--random-range-ratio")
    if "--dataset-name" in flags:
        t["dataset_name"] = flags["--dataset-name"]
    if flags.get("--ignore-eos"):
        t["ignore_eos"] = True
    endpoint = flags.get("--endpoint", "/v1/completions")
    backend = flags.get("--backend") or flags.get("--endpoint-type") or "vllm"
    t["endpoint"] = endpoint
    if "chat" in endpoint or "chat" in backend:
        notes.append("chat endpoint: the model's chat template adds its tokens to every prompt (approximate count)")
    if "--dataset-path" in flags and t.get("dataset_name", "random") == "sharegpt":
        notes.append("--dataset-path: kvplan uses its built-in ShareGPT length model, not the file")
    if ignored:
        notes.append(f"no effect on the simulation: {', '.join(sorted(set(ignored)))}")
    return ParsedBench(t, flags.get("--model"), flags.get("--tokenizer"), tool, tuple(notes))


@dataclass(frozen=True)
class ParsedServe:
    plan: dict[str, Any]  # the serve flags' values by field (kvplan/serve_flags.py), the model among them
    notes: tuple[str, ...]


def parse_serve_cmd(text: str) -> ParsedServe:
    """``vllm serve MODEL …`` (or ``python -m vllm.entrypoints.openai.api_server --model …``) ->
    the plan flags."""
    what = "--from-serve-cmd"
    argv, env = _strip_env(_split(text, what))
    notes: list[str] = []
    if env:
        notes.append(f"environment ignored: {' '.join(env)}")
    model = None
    if len(argv) >= 2 and argv[0].endswith("vllm") and argv[1] == "serve":
        argv = argv[2:]
        if argv and not argv[0].startswith("-"):
            model = argv.pop(0)
    elif len(argv) >= 3 and argv[0].rsplit("/", 1)[-1].startswith("python") and argv[1] == "-m" and \
            argv[2] == "vllm.entrypoints.openai.api_server":
        argv = argv[3:]
    else:
        raise UsageError(f"{what}: expected 'vllm serve MODEL ...', got {text[:60]!r}")
    from ..serve_flags import SERVE_FLAGS, parse_serve_argv, serve_flag_kinds

    flags, positionals, ignored = _parse_flags(
        argv, {"mapped": serve_flag_kinds(), "ignored": _SERVE_IGNORED, "unsupported": _SERVE_UNSUPPORTED}, what,
        exact={n for f in SERVE_FLAGS if not f.vllm for n in f.all_names()})
    if positionals:
        raise UsageError(f"{what}: unexpected argument(s) {' '.join(positionals)}")
    plan: dict[str, Any] = parse_serve_argv(flags)
    plan["model"] = plan.get("model", model)
    if not plan["model"]:
        raise UsageError(f"{what}: no model (vllm serve MODEL or --model)")
    if ignored:
        notes.append(f"no effect on the plan: {', '.join(sorted(set(ignored)))}")
    return ParsedServe(plan, tuple(notes))


def is_inf(value: Optional[float]) -> bool:
    return value is not None and math.isinf(value)
