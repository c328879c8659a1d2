"""``kvplan alerts``, ``kvplan doctor`` and ``kvplan watch``: thin CLI over kvplan.ops. ``register(app)`` adds the commands (main.py calls
it). Only typer and the standard library at module level: main.py imports this for every command
and ``kvplan plan`` must stay fast.

Exit codes: alerts 0 written; doctor 0 no error-level finding, 1 at least one, 3 --prometheus and nothing
could be read; watch --once 0 up, 1 down (or nothing read from --prometheus); 2 usage errors.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from .._json import dumps_line, dumps_report
from ..errors import UsageError
from ..report import registry as reports
from ._exit import fail as _fail


def alerts_cmd(
    output_dir: Path = typer.Option(..., "--output-dir", "-o", help="Folder for kvplan-alerts.yml and kvplan-dashboard.json."),
    vllm_version: Optional[str] = typer.Option(None, "--vllm-version", help="Use this vLLM version's metric names (default 0.33)."),
    thresholds: Optional[str] = typer.Option(
        None, "--thresholds",
        help="KEY=VALUE,… : kv_cache_usage=0.9, waiting=10, preemptions=0, error_rate=0.01, aborted=0.05, "
             "e2e_p99 and ttft_p99 (no default: see --slo, --simulated), gpu_budget_margin=0.03 and gpu_headroom=0.02 "
             "(fractions of the GPU's total), gpu_memory=0.9 (the plain rule), for=5m (how long before firing), "
             "window=5m (rate window)."),
    slo: Optional[str] = typer.Option(None, "--slo", help="The deployment's SLO, e.g. ttft_p99=2s,e2e_p99=30s: the "
                                      "latency rules fire above it."),
    simulated: Optional[str] = typer.Option(None, "--simulated", help="A kvplan simulate --format json result (or "
                                            "preflight's preflight-sim.json): without an SLO, the latency rules fire "
                                            "at its P99 x 1.5."),
    model_name: Optional[List[str]] = typer.Option(None, "--model-name", help="Only these served model names (repeatable)."),
    gpu_memory_utilization: Optional[float] = typer.Option(
        None, "--gpu-memory-utilization", help="vLLM's --gpu-memory-utilization: the GPU-memory budget the DCGM rules "
                                               "compare against (default: --plan's, else the version's default)."),
    plan: Optional[str] = typer.Option(None, "--plan", help="kvplan plan --format json output or a vllm serve --config "
                                                            "YAML: read gpu_memory_utilization from it."),
    gpu_memory_rule: str = typer.Option(
        "budget", "--gpu-memory-rule", help="budget (used above vLLM's budget + gpu_budget_margin; free below "
                                            "gpu_headroom), plain (used > gpu_memory: fires on any healthy vLLM above "
                                            "that utilization), both, or none."),
    gpu_join: str = typer.Option("auto", "--gpu-join", help="Which DCGM GPUs the GPU rules watch: auto (kubernetes "
                                                            "where the vLLM series carry a pod label, else host), "
                                                            "kubernetes (GPUs of the vLLM pods, by pod/namespace), "
                                                            "host (GPUs on the hosts of the vLLM instances), none "
                                                            "(every GPU the exporter reports)."),
    gpu_selector: Optional[str] = typer.Option(None, "--gpu-selector", help="Extra DCGM label matchers, e.g. "
                                                                            "'{Hostname=~\"gpu-.*\"}'."),
    speculative_decoding: bool = typer.Option(
        False, "--speculative-decoding", help="The server runs --speculative-config: add the draft-acceptance rule "
                                              "(spec_acceptance threshold) and panels."),
    lora: bool = typer.Option(False, "--lora", help="The server runs --enable-lora: add the adapters-waiting rule and "
                                                    "panel."),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json (what was written)."),
) -> None:
    """Write Prometheus alerting rules and a Grafana dashboard for a vLLM deployment
    (vLLM metrics, and GPU memory from NVIDIA's DCGM exporter against vLLM's budget)."""
    from ..ops import alerts, dcgm
    from ..ops.thresholds import parse_thresholds

    try:
        if fmt not in ("table", "json"):
            raise UsageError(f"--format: expected table or json, got {fmt!r}")
        th = parse_thresholds(thresholds)
        from ..ops.thresholds import derive_latency
        from ..slo import parse_slo

        observed = _simulated_p99(simulated) if simulated else None
        th, notes = derive_latency(th, {s.key: s.limit for s in parse_slo(slo)}, observed,
                                   f"{simulated}" if simulated else "the simulated run")
        util, source = dcgm.resolve_utilization(gpu_memory_utilization, plan, vllm_version)
        gpu = dcgm.GpuRuleOptions(util, source, gpu_memory_rule, gpu_join, dcgm.selector_body(gpu_selector))
        out = alerts.write(output_dir, th, vllm_version, model_name or (), gpu, speculative_decoding, lora, notes)
    except UsageError as exc:
        _fail(exc)
    except OSError as exc:
        _fail(UsageError(f"--output-dir {output_dir}: {exc.strerror or exc}"))
    if fmt == "json":
        sys.stdout.write(dumps_report(out.to_dict()))
        return
    typer.echo(f"wrote {out.rules_path} (Prometheus rules) and {out.dashboard_path} (Grafana dashboard) "
               f"for vLLM {out.names.version} metric names")
    if out.gpu is not None and out.gpu.mode != "none":
        typer.echo(f"GPU memory rules ({out.gpu.mode}) on DCGM exporter metrics: vLLM budget "
                   f"gpu_memory_utilization {out.gpu.utilization:g} ({out.gpu.utilization_source})")
    for note in out.notes:
        typer.echo(f"latency threshold {note}")
    typer.echo("check the rules with: promtool check rules " + str(out.rules_path))


def _simulated_p99(path: str) -> dict:
    """E2E and TTFT P99 (seconds) of a ``kvplan simulate --format json`` result."""
    import json

    from ..errors import file_not_found

    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise file_not_found(path) from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--simulated {path}: not a readable JSON ({exc})") from None
    lat = d.get("latency_s") if isinstance(d, dict) else None
    out = {key: (lat.get(metric) or {}).get("p99") for key, metric in (("e2e_p99", "e2e"), ("ttft_p99", "ttft"))
           if isinstance(lat, dict) and isinstance(lat.get(metric), dict)}
    if not any(isinstance(v, (int, float)) and v > 0 for v in out.values()):
        raise UsageError(f"--simulated {path}: no latency_s.e2e.p99 / latency_s.ttft.p99 (expected kvplan simulate "
                         "--format json output)")
    return out


def doctor_cmd(
    logs: Optional[List[str]] = typer.Argument(None, help="vLLM log files (- for stdin); not needed with --prometheus."),
    requests: Optional[List[str]] = typer.Option(None, "--requests", help="Request log(s) (any format kvplan lengths "
                                                 "reads): which share of your requests each suggested max_model_len covers."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="The served model (HF id or alias from the catalog, "
                                        "config.json, or model folder) when the log does not name a catalog model: "
                                        "fixes are then predicted by the planner."),
    vllm_version: Optional[str] = typer.Option(None, "--vllm-version", help="The vLLM version that wrote the log, when "
                                               "the log does not print it (the planner follows its rules)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="The GPU (catalog name, see `kvplan gpus`) when the log "
                                      "does not name its size: with the model known, fixes are then planned even "
                                      "for a log that stopped before vLLM measured its KV memory (a CUDA OOM)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or markdown."),
    prometheus: Optional[str] = typer.Option(None, "--prometheus", help="Diagnose from this Prometheus server's "
                                             "history (its HTTP API) instead of logs, e.g. http://prometheus:9090"),
    since: Optional[str] = typer.Option(None, "--since", help="With --prometheus: the last DURATION (default 6h)."),
    start: Optional[str] = typer.Option(None, "--start", help="With --prometheus: range start (ISO 8601 or unix time)."),
    end: Optional[str] = typer.Option(None, "--end", help="With --prometheus: range end (default now)."),
    model_name: Optional[List[str]] = typer.Option(None, "--model-name", help="With --prometheus: only these served "
                                                   "model names (repeatable)."),
    match: Optional[str] = typer.Option(None, "--match", help="With --prometheus: label matchers selecting the "
                                        "deployment, e.g. '{namespace=\"prod\",job=\"vllm\"}'."),
    thresholds: Optional[str] = typer.Option(None, "--thresholds", help="With --prometheus: as kvplan alerts."),
    gpu_memory_utilization: Optional[float] = typer.Option(
        None, "--gpu-memory-utilization", help="With --prometheus: vLLM's budget for the GPU checks (default: the "
                                               "server's vllm:cache_config_info)."),
    gpu_selector: Optional[str] = typer.Option(None, "--gpu-selector", help="With --prometheus: DCGM label matchers "
                                               "for the deployment's GPUs (default: the exporter on the same host)."),
) -> None:
    """Diagnose vLLM logs (or a Prometheus server's history): findings with evidence, numbers and ranked fixes.

    Exit codes: 0 no error-level finding; 1 at least one; 2 usage errors; 3 --prometheus and nothing
    could be read (unreachable, error answers, no vLLM series for the selection)."""
    from ..ops.doctor import diagnose, read_source

    if prometheus:
        _doctor_prometheus(prometheus, logs, since, start, end, model_name, match, thresholds, gpu_memory_utilization,
                           gpu_selector, vllm_version, fmt)
        return
    try:
        if fmt not in reports.formats("doctor"):
            raise UsageError(f"--format: expected {reports.choices_text('doctor')}, got {fmt!r}")
        if not logs:
            raise UsageError("give vLLM log files (or - for stdin), or --prometheus URL")
        stdin_text = sys.stdin.read() if "-" in logs else None
        sources = [read_source(p, stdin_text) for p in logs]
        coverage = _coverage(requests) if requests else None
        report = diagnose(sources, coverage, model=model, vllm_version=vllm_version, gpu=gpu)
    except UsageError as exc:
        _fail(exc)
    if report.no_vllm_lines and len(report.no_vllm_lines) == len(sources):
        # nothing to diagnose: an empty file, random bytes or another program's log is not "healthy"
        _fail(UsageError("; ".join(f"{name}: no vLLM log lines found" for name in report.no_vllm_lines)))
    _print_report(report, fmt)
    if report.no_vllm_lines:
        typer.echo("kvplan doctor: " + "; ".join(f"{name}: no vLLM log lines found" for name in report.no_vllm_lines),
                   err=True)
        raise typer.Exit(2)
    raise typer.Exit(0 if report.healthy else 1)


def _print_report(report, fmt: str) -> None:
    reports.emit("doctor", fmt, report)


def parse_time(text: str, flag: str) -> float:
    """ISO 8601 (``2026-12-01T20:00:00Z``; no zone = UTC) or unix seconds."""
    import datetime as dt

    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{flag}: cannot read {text!r} as a time (ISO 8601 like 2026-12-01T20:00:00Z, or unix seconds)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.timestamp()


def _prom_common(url: str, model_name, match, thresholds, gpu_selector):
    from ..ops import dcgm
    from ..ops.prom import PromClient
    from ..ops.prom import history as H
    from ..ops.thresholds import parse_thresholds

    try:
        client = PromClient(url)
        sel = H.Selection(tuple(model_name or ()), H.parse_match(match))
        gsel = dcgm.selector_body(gpu_selector)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return client, sel, parse_thresholds(thresholds), gsel


def _doctor_prometheus(url, logs, since, start, end, model_name, match, thresholds, util, gpu_selector, version,
                       fmt) -> None:
    import time

    from ..ops.doctor.history import diagnose_prometheus
    from ..ops.prom import PromError
    from ..slo import parse_seconds

    try:
        if fmt not in reports.formats("doctor"):
            raise UsageError(f"--format: expected {reports.choices_text('doctor')}, got {fmt!r}")
        if logs:
            raise UsageError("--prometheus reads the history instead of logs: run the logs separately")
        if since and start:
            raise UsageError("give --since or --start, not both")
        t_end = parse_time(end, "--end") if end else time.time()
        t_start = parse_time(start, "--start") if start else t_end - parse_seconds(since or "6h", "--since")
        if t_start >= t_end:
            raise UsageError(f"the range is empty: start {t_start:.0f} is not before end {t_end:.0f}")
        client, sel, th, gsel = _prom_common(url, model_name, match, thresholds, gpu_selector)
        report = diagnose_prometheus(client, sel, t_start, t_end, th, util, gsel, version)
    except UsageError as exc:
        _fail(exc)
    except PromError as exc:
        _fail(exc, 3)
    _print_report(report, fmt)
    raise typer.Exit(0 if report.healthy else 1)


def _coverage(paths: List[str]):
    """length -> (share of requests that fit, label), from kvplan.workload's exact histograms
    (server-reported usage, or a character estimate when the log has only text)."""
    from ..workload.analysis import LengthsOptions, analyze_lengths
    from ..workload.finalize import coverage_at
    from ..workload.sources import expand_paths

    expand_paths(list(paths), require_existing=True)
    result = analyze_lengths(list(paths), None, LengthsOptions(estimate=True))

    def cover(length: int):
        row = coverage_at(result, length)
        return row.fits_share, row.label

    # the P99 of prompt + output budget: the max_model_len that serves 99% of these requests whole
    cover.p99 = result.total_tokens.p99 if result.total_tokens.count else None  # type: ignore[attr-defined]
    # mean prompt and output tokens: turn the log's prompt tokens/s into requests/s
    cover.means = ((result.prompt_tokens.mean, result.output_tokens.mean if result.output_tokens.count else 0.0)  # type: ignore[attr-defined]
                   if result.prompt_tokens.count else None)
    return cover


def watch_cmd(
    url: Optional[str] = typer.Argument(None, help="vLLM server base URL, e.g. http://127.0.0.1:8000 (or --prometheus)"),
    interval: float = typer.Option(1.0, "--interval", help="Seconds between scrapes."),
    window: float = typer.Option(60.0, "--window", help="Sliding window (seconds) for rates and percentiles."),
    thresholds: Optional[str] = typer.Option(None, "--thresholds", help="As kvplan alerts: gpu_memory=0.9,e2e_p99=2s,…"),
    once: bool = typer.Option(False, "--once", help="Print one snapshot (two scrapes --interval apart) and exit."),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Stop after this many seconds (default: Ctrl-C)."),
    prometheus: Optional[str] = typer.Option(None, "--prometheus", help="Read the series from this Prometheus server "
                                             "(HTTP API) instead of scraping the vLLM server."),
    model_name: Optional[List[str]] = typer.Option(None, "--model-name", help="With --prometheus: only these served "
                                                   "model names (repeatable)."),
    match: Optional[str] = typer.Option(None, "--match", help="With --prometheus: label matchers selecting the "
                                        "deployment, e.g. '{namespace=\"prod\"}'."),
    gpu_memory_utilization: Optional[float] = typer.Option(
        None, "--gpu-memory-utilization", help="With --prometheus: vLLM's GPU-memory budget (default: the server's "
                                               "vllm:cache_config_info)."),
    gpu_selector: Optional[str] = typer.Option(None, "--gpu-selector", help="With --prometheus: DCGM label matchers "
                                               "for the deployment's GPUs (default: the exporter on the same host)."),
) -> None:
    """Live view of a vLLM server's /metrics: KV usage, queue, preemptions, tokens/s, TTFT/E2E/queue P50/P99.

    Exit codes: 0 (with --once: the server answered / Prometheus had its series), 1 --once and the
    server is down / nothing could be read from Prometheus, 2 usage errors."""
    import time

    from ..ops.thresholds import parse_thresholds
    from ..ops.watch import Watcher, is_local

    if prometheus:
        _watch_prometheus(prometheus, url, interval, window, thresholds, once, fmt, duration, model_name, match,
                          gpu_memory_utilization, gpu_selector)
        return
    try:
        if url is None:
            raise UsageError("give the vLLM server's URL, or --prometheus URL")
        if fmt not in ("table", "json"):
            raise UsageError(f"--format: expected table or json, got {fmt!r}")
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"URL must start with http:// or https://, got {url!r}")
        if not 0.05 <= interval <= 3600 or not 0 < window <= 86400:
            raise UsageError("--interval must be in [0.05, 3600] s and --window in (0, 86400] s")
        if duration is not None and duration <= 0:
            raise UsageError("--duration must be positive")
        th = parse_thresholds(thresholds)
    except UsageError as exc:
        _fail(exc)
    gpu = None
    if is_local(url):
        from ..bench.scrape import GpuSampler

        gpu = GpuSampler()
    w = Watcher(url, window, th, gpu=gpu)
    if once:
        w.poll()
        time.sleep(interval)
        snap = w.poll()
        if fmt == "json":
            sys.stdout.write(dumps_report(snap.to_dict()))
        else:
            from rich.console import Console

            from ..ops.watch_view import render_table

            Console().print(render_table(snap))
        raise typer.Exit(0 if snap.up else 1)
    end = None if duration is None else time.monotonic() + duration
    try:
        if fmt == "json":  # one JSON object per line, for piping
            while end is None or time.monotonic() < end:
                sys.stdout.write(dumps_line(w.poll().to_dict()) + "\n")
                sys.stdout.flush()
                time.sleep(interval)
            return
        from rich.console import Console
        from rich.live import Live

        from ..ops.watch_view import render_line, render_table

        console = Console()
        if not console.is_terminal:
            while end is None or time.monotonic() < end:
                typer.echo(render_line(w.poll()))
                time.sleep(interval)
            return
        with Live(render_table(w.poll()), console=console, refresh_per_second=4) as live:
            while end is None or time.monotonic() < end:
                time.sleep(interval)
                live.update(render_table(w.poll()))
    except KeyboardInterrupt:
        return


def _watch_prometheus(url, server_url, interval, window, thresholds, once, fmt, duration, model_name, match, util,
                      gpu_selector) -> None:
    import time

    from ..ops.prom import PromError
    from ..ops.watch_prom import prometheus_snapshots

    try:
        if fmt not in ("table", "json"):
            raise UsageError(f"--format: expected table or json, got {fmt!r}")
        if server_url:
            raise UsageError("--prometheus reads the server's series from Prometheus: give no server URL "
                             "(select with --model-name / --match)")
        if not 0.05 <= interval <= 3600 or not 0 < window <= 86400:
            raise UsageError("--interval must be in [0.05, 3600] s and --window in (0, 86400] s")
        client, sel, th, gsel = _prom_common(url, model_name, match, thresholds, gpu_selector)
    except UsageError as exc:
        _fail(exc)

    def read():
        return prometheus_snapshots(client, sel, window, th, gpu_memory_utilization=util, gpu_selector=gsel)

    def show(snaps) -> None:
        if fmt == "json":
            rows = [s.to_dict() for s in snaps]
            sys.stdout.write(dumps_report(rows) if once else dumps_line(rows) + "\n")
            sys.stdout.flush()
            return
        from rich.console import Console

        from ..ops.watch_view import render_table

        console = Console()
        for snap in snaps:
            console.print(render_table(snap))
            for note in snap.notes:
                console.print(f"  note: {note}", markup=False)

    if once:
        try:
            snaps = read()
        except PromError as exc:
            _fail(exc, 1)
        show(snaps)
        raise typer.Exit(0 if any(s.up for s in snaps) else 1)
    end = None if duration is None else time.monotonic() + duration
    try:
        while end is None or time.monotonic() < end:
            try:
                show(read())
            except PromError as exc:  # keep polling: Prometheus may come back
                typer.echo(f"kvplan: {exc}", err=True)
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def register(app: typer.Typer) -> None:
    app.command("alerts")(alerts_cmd)
    app.command("doctor")(doctor_cmd)
    app.command("watch")(watch_cmd)
