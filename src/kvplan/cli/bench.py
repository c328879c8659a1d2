"""``kvplan bench``: load-test a live OpenAI-compatible server; ``kvplan bench compare`` and
``kvplan bench report``. Thin: parse, call kvplan.bench, render.

Only typer and the standard library are imported at module level: this module is imported by
``kvplan.cli.main`` for every command, and ``kvplan plan`` must stay fast (aiohttp, rich's live
display and the report renderers load inside the command bodies).

Exit codes: 0 the run completed and passed its gates; 1 a gate failed, the run was
client-bound or partial, or the server could not be reached; 2 usage errors.
"""
from __future__ import annotations

import sys
from typing import Optional

import typer

from ..errors import UsageError
from ..report import registry as reports
from ._exit import fail as _fail

#: the help of --api-key / --api-key-file wherever a command takes them
API_KEY_HELP = ("Bearer token. Prefer $OPENAI_API_KEY (read when neither is given) or --api-key-file: a value on "
                "the command line is visible in `ps` and in the shell's history. Never printed or written.")
API_KEY_FILE_HELP = "Read the bearer token from this file (its first line; e.g. a mounted secret)."

bench_app = typer.Typer(add_completion=False, invoke_without_command=True, pretty_exceptions_enable=False,
                        help="Load-test a live OpenAI-compatible server (vLLM first), with its /metrics on the same clock.")


@bench_app.callback()
def bench_cmd(
    ctx: typer.Context,
    url: Optional[str] = typer.Option(None, "--url", help="Server base URL, e.g. http://127.0.0.1:8000"),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name (default: the first of /v1/models)."),
    endpoint: str = typer.Option("chat", "--endpoint", help="chat (/v1/chat/completions) or completions (/v1/completions)."),
    rate: Optional[float] = typer.Option(None, "--rate", help="Open loop: requests per second."),
    target_qps: Optional[float] = typer.Option(None, "--target-qps", help="Open loop at target × --factor."),
    factor: float = typer.Option(1.0, "--factor", help="Multiplies --target-qps (e.g. 1.5), or the replay speed."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Closed loop: requests in flight."),
    replay: bool = typer.Option(False, "--replay", help="Replay the timestamps of --requests (sped up by --factor)."),
    arrival: str = typer.Option("poisson", "--arrival", help="constant, poisson or gamma inter-arrival times."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="Gamma shape: <1 burstier than Poisson, >1 smoother."),
    ramp: str = typer.Option("0", "--ramp", help="Ramp the rate up linearly over this long (e.g. 30s)."),
    duration: Optional[str] = typer.Option(None, "--duration", help="Measured duration, e.g. 60s, 5m."),
    max_requests: Optional[int] = typer.Option(None, "--max-requests", help="Stop after this many measured requests."),
    warmup: str = typer.Option("0", "--warmup", help="Warm-up before the measured window (excluded from results)."),
    requests: Optional[str] = typer.Option(None, "--requests", help="Request log: prompts and lengths (see `kvplan lengths`)."),
    input_len: Optional[str] = typer.Option(None, "--input-len", help="N, uniform:LO:HI, normal:MEAN:STD, log, empirical (default 128; log with --requests)."),
    output_len: Optional[str] = typer.Option(None, "--output-len", help="Same syntax, for max_tokens (default 64; log with --requests)."),
    ignore_eos: Optional[bool] = typer.Option(None, "--ignore-eos/--no-ignore-eos", help="Default: on for vLLM/SGLang servers."),
    no_stream: bool = typer.Option(False, "--no-stream", help="Non-streaming requests (one chunk: TTFT = E2E, no ITL)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help=API_KEY_HELP, show_default=False),
    api_key_file: Optional[str] = typer.Option(None, "--api-key-file", help=API_KEY_FILE_HELP, show_default=False),
    timeout: str = typer.Option("120s", "--timeout", help="Per-request timeout."),
    seed: int = typer.Option(0, "--seed"),
    workers: int = typer.Option(1, "--workers", help="Load-generator processes on this host (one merged result)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Run the --workers as Ray actors on this "
                                              "cluster (extra kvplan[ray]; 'local' starts a private one)."),
    max_inflight: int = typer.Option(20000, "--max-inflight", help="Open-loop cap on requests in flight (per worker)."),
    slo: Optional[str] = typer.Option(None, "--slo", help="Gates, e.g. ttft_p99=2s,e2e_p99=30s,error_rate=0.01 "
                                      "(without error_rate any failed request fails the run)."),
    prompt_length: str = typer.Option("words", "--prompt-length", help="words: --input-len N sends N one-token words "
                                      "(the chat template / BOS add more: 128 arrives as ~151); exact: N tokens as vLLM "
                                      "counts them, template included (needs the tokenizer)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="With --prompt-length exact: the model's "
                                            "tokenizer folder (default: the served model's, found offline)."),
    max_lag_p50: str = typer.Option("10ms", "--max-lag-p50", help="Median schedule lag above which the run is late."),
    max_lag_p99: str = typer.Option("50ms", "--max-lag-p99", help="P99 schedule lag above which the run is late."),
    min_rate_ratio: float = typer.Option(0.99, "--min-rate-ratio", help="Achieved / scheduled rate below which the run is late."),
    client_cpu_limit: float = typer.Option(0.7, "--client-cpu-limit", help="A late run with the client's CPU at or above "
                                           "this share of a core is client-bound (FAILED); below it, host contention (warned)."),
    scrape_interval: str = typer.Option("1s", "--scrape-interval", help="How often to read the server's /metrics."),
    no_metrics: bool = typer.Option(False, "--no-metrics", help="Do not scrape /metrics."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the result JSON here."),
    records: Optional[str] = typer.Option(None, "--records", help="Per-request records (.jsonl, or .parquet with pyarrow). "
                                          "Default with --output: <output>.records.jsonl"),
    html_path: Optional[str] = typer.Option(None, "--html", help="Write a self-contained HTML report here."),
    fmt: str = typer.Option("table", "--format", "-f", help="table (summary) or json (the result on stdout)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Live display (default: when stderr is a terminal)."),
) -> None:
    """Load-test a server: open loop (--rate / --target-qps), closed loop (--concurrency) or --replay."""
    if ctx.invoked_subcommand is not None:
        return
    from ..bench.config import BenchConfig, parse_length, parse_seconds, parse_slo, resolve_api_key
    from ..bench.io import check_records_path, records_path_for

    try:
        if url is None:
            raise UsageError("--url is required (e.g. --url http://127.0.0.1:8000)")
        if rate is not None and target_qps is not None:
            raise UsageError("give --rate or --target-qps, not both")
        if fmt not in reports.formats("bench"):
            raise UsageError(f"--format must be {reports.choices_text('bench')}")
        eff_rate = target_qps * factor if target_qps is not None else rate
        default_len = "log" if requests else None
        if requests:
            from ..workload.sources import expand_paths

            expand_paths([requests], require_existing=True)  # before any server is contacted
        cfg = BenchConfig(
            url=url, model=model, endpoint=endpoint, stream=not no_stream, rate=eff_rate, concurrency=concurrency,
            replay=replay, replay_speed=factor if replay else 1.0, arrival=arrival, burstiness=burstiness,
            ramp_s=parse_seconds(ramp, "--ramp"), duration_s=parse_seconds(duration, "--duration") if duration else None,
            max_requests=max_requests, warmup_s=parse_seconds(warmup, "--warmup"), requests_log=requests,
            input_len=parse_length(input_len or default_len or "128", "--input-len"),
            output_len=parse_length(output_len or default_len or "64", "--output-len"),
            ignore_eos=ignore_eos, seed=seed, timeout_s=parse_seconds(timeout, "--timeout"), max_inflight=max_inflight,
            scrape_interval_s=parse_seconds(scrape_interval, "--scrape-interval"), scrape_metrics=not no_metrics,
            workers=workers, ray_address=ray_address, slo=parse_slo(slo),
            lag_p50_limit_s=parse_seconds(max_lag_p50, "--max-lag-p50"),
            lag_p99_limit_s=parse_seconds(max_lag_p99, "--max-lag-p99"), min_rate_ratio=min_rate_ratio,
            client_cpu_limit=client_cpu_limit, prompt_length=prompt_length, tokenizer=tokenizer, api_key=resolve_api_key(api_key, api_key_file),
        ).validate()
        rec_path = records or (str(records_path_for(output)) if output else None)
        if rec_path:
            check_records_path(rec_path)
    except UsageError as exc:
        _fail(exc)
    _run(cfg, output, rec_path, html_path, fmt, progress)


def _run(cfg, output, rec_path, html_path, fmt, progress) -> None:
    from dataclasses import replace

    from rich.console import Console

    from ..bench.io import write_records, write_result
    from ..bench.run import Bench, ServerUnavailable, prepare
    from ..report.bench_text import ProgressDisplay

    err = Console(stderr=True)
    try:
        source, offsets, info = prepare(cfg)
    except UsageError as exc:
        _fail(exc)
    except ServerUnavailable as exc:
        _fail(exc, code=1)
    show = progress if progress is not None else sys.stderr.isatty()
    planned = cfg.warmup_s + cfg.duration_s if cfg.duration_s else None
    target = (f"{cfg.rate:g} req/s ({cfg.arrival})" if cfg.mode == "open" else
              f"concurrency {cfg.concurrency}" if cfg.mode == "closed" else f"replay ×{cfg.replay_speed:g}")
    try:
        if show:
            with ProgressDisplay(err, planned, target) as disp:
                result, recs = Bench(cfg, source, offsets, info, disp.update).run()
        else:
            result, recs = Bench(cfg, source, offsets, info).run()
    except UsageError as exc:  # e.g. a --ray-address that cannot be joined
        _fail(exc)
    if rec_path:
        write_records(recs, rec_path)
        result = replace(result, records_file=str(rec_path))
    d = result.to_dict()
    if output:
        write_result(d, output)
    if html_path:
        from ..report.bench_html import render_html

        with open(html_path, "w", encoding="utf-8") as f:
            f.write(render_html(d))
    reports.emit("bench", fmt, d)
    if fmt != "json":
        for label, path in (("result", output), ("records", rec_path), ("report", html_path)):
            if path:
                err.print(f"{label}: {path}")
    raise typer.Exit(result.exit_code)


@bench_app.command("compare")
def compare_cmd(
    baseline: str = typer.Argument(..., help="Baseline result JSON."),
    current: str = typer.Argument(..., help="Current result JSON."),
    threshold: float = typer.Option(0.05, "--threshold", help="Relative change that counts (0.05 = 5%)."),
    confidence: float = typer.Option(0.95, "--confidence", help="Confidence level of the distribution-free (order-statistic) intervals, Bonferroni-corrected over the nine rows."),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json"),
    allow_traffic_change: bool = typer.Option(False, "--allow-traffic-change", help="Judge two runs of different "
                                              "traffic (rate, concurrency, arrival, lengths) anyway, with a warning."),
) -> None:
    """P50/P95/P99 of TTFT, TPOT and E2E with distribution-free confidence intervals (order statistics, exact for any n); exit 1 on a regression, or when the runs offered different traffic."""
    from ..bench.compare import compare
    from ..bench.io import load_result

    try:
        if not 0 < threshold < 10:
            raise UsageError("--threshold must be a positive fraction, e.g. 0.05")
        if not 0.5 <= confidence < 1:
            raise UsageError("--confidence must be in [0.5, 1)")
        if fmt not in reports.formats("bench-compare"):
            raise UsageError(f"--format must be {reports.choices_text('bench-compare')}")
        base, cur = load_result(baseline), load_result(current)
    except UsageError as exc:
        _fail(exc)
    cmp = compare(base, cur, threshold=threshold, level=confidence, allow_traffic_change=allow_traffic_change).to_dict()
    reports.emit("bench-compare", fmt, cmp)
    raise typer.Exit(0 if cmp["passed"] else 1)


@bench_app.command("report")
def report_cmd(
    result: str = typer.Argument(..., help="A result JSON written by `kvplan bench --output`."),
    html_path: Optional[str] = typer.Option(None, "--html", help="Write the HTML report here."),
) -> None:
    """Print the summary of a saved result (and write its HTML report)."""
    from ..bench.io import load_result

    try:
        d = load_result(result)
    except UsageError as exc:
        _fail(exc)
    reports.emit("bench", "table", d)
    if html_path:
        from ..report.bench_html import render_html

        with open(html_path, "w", encoding="utf-8") as f:
            f.write(render_html(d))


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
