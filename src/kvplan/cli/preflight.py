"""``kvplan preflight``: the pre-launch checklist as one GO / NO-GO / GO_WITH_RISKS verdict.
Thin: merge --config with the flags, build the plan request, call kvplan.preflight, render.

Only typer and the standard library at module level: main.py imports this for every command and
``kvplan plan`` must stay fast.

Exit codes: 0 GO (and GO_WITH_RISKS unless --strict), 1 NO-GO (or GO_WITH_RISKS with --strict),
2 usage errors (bad flags, an unknown key in --config, a missing file).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UsageError
from ..report import registry as reports
from . import options as opt
from ._exit import fail as _fail


def preflight_cmd(
    ctx: typer.Context,
    config: Optional[Path] = typer.Option(None, "--config", help="preflight.yaml or .toml: the same keys as these "
                                          "flags (max_model_len or max-model-len); flags given here override it."),
    # --- the plan (as `kvplan plan`): the serve flags (kvplan/serve_flags.py; opt.serve_options puts them here)
    plan: Optional[dict] = None,
    # --- traffic and targets
    requests: Optional[str] = typer.Option(None, "--requests", help="The request log (any format `kvplan lengths` reads)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="Model folder, tokenizer.json or pkg:NAME to count "
                                            "the requests' tokens (default: the model's, when found offline)."),
    estimate: Optional[bool] = typer.Option(None, "--estimate/--no-estimate", help="Without a tokenizer, estimate tokens "
                                            "from characters (labelled; the default); --no-estimate skips them."),
    target_qps: Optional[float] = typer.Option(None, "--target-qps", help="The production rate; the load test runs at "
                                               "this x --load-factor."),
    load_factor: Optional[float] = typer.Option(None, "--load-factor", help="Headroom of the load test (default 1.5)."),
    gpu_price: Optional[str] = typer.Option(None, "--gpu-price", help="USD per GPU-hour (A100-80GB=1.8,... or a JSON "
                                            "file) [the shipped on-demand list]."),
    slo: Optional[str] = typer.Option(None, "--slo", help="Gates, e.g. ttft_p99=2s,e2e_p99=30s,error_rate=0."),
    duration: Optional[str] = typer.Option(None, "--duration", help="Load-test duration (default 5m)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="The max_tokens the clients send (default: "
                                             "the requests' own)."),
    history_turns: Optional[int] = typer.Option(None, "--history-turns", help="The application keeps this many turns "
                                                "of history (if it caps it)."),
    history_tokens: Optional[int] = typer.Option(None, "--history-tokens", help="The application caps history at this "
                                                 "many prompt tokens."),
    percentile: Optional[float] = typer.Option(None, "--percentile", help="Percentile the length recommendations cover "
                                               "(default 99)."),
    # --- the server
    url: Optional[str] = typer.Option(None, "--url", help="A running server to profile and load-test (its vLLM "
                                      "version is read from its /version unless --vllm-version is given)."),
    log: Optional[Path] = typer.Option(None, "--log", help="With --url: the server's log; its start-up lines feed "
                                       "the profile and the plan (measured KV memory, version, flags)."),
    launch: Optional[bool] = typer.Option(None, "--launch/--no-launch", help="Start `vllm serve` with the plan's flags "
                                          "on 127.0.0.1, stop it (by PID) afterwards."),
    vllm_bin: Optional[str] = typer.Option(None, "--vllm-bin", help="The vllm executable for --launch (default: vllm "
                                           "on PATH, or $KVPLAN_VLLM_BIN)."),
    vllm_arg: Optional[List[str]] = typer.Option(None, "--vllm-arg", help="Extra argument for `vllm serve` (repeat; "
                                                 "e.g. --vllm-arg=--enforce-eager)."),
    startup_timeout: Optional[str] = typer.Option(None, "--startup-timeout", help="How long --launch waits for vLLM "
                                                  "(default 15m)."),
    request_timeout: Optional[str] = typer.Option(None, "--request-timeout", help="Each load-test request's "
                                                  "client timeout, queueing included (default 2m); a request that "
                                                  "exceeds it counts as failed, as your client would."),
    dry_run: Optional[bool] = typer.Option(None, "--dry-run/--no-dry-run", help="No server: lengths, plan, and the "
                                           "load test simulated by kvplan.sim."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="A `kvplan bench` result JSON to compare with."),
    # --- output
    output_dir: Optional[Path] = typer.Option(None, "--output-dir", "-o", help="Write preflight.html, .md, .json and "
                                              "the alert rules + dashboard here."),
    fmt: Optional[str] = typer.Option(None, "--format", "-f", help="table, json or markdown (stdout)."),
    strict: Optional[bool] = typer.Option(None, "--strict/--no-strict", help="GO WITH RISKS exits 1 too."),
) -> None:
    """Pre-launch checklist: lengths, plan, profile, load test at target QPS x 1.5, baseline, history, alerts."""
    flags = {k: v for k, v in locals().items() if k not in ("config", "ctx", "plan")}
    given = set(opt.given_flags(ctx))
    for flag_name, key in (("fmt", "format"), ("vllm_arg", "vllm_args")):  # the config file's spelling
        flags[key] = flags.pop(flag_name) or None
        if flag_name in given:
            given.add(key)
    flags["log"] = str(log) if log is not None else None
    try:
        values = _merge(config, {**{k: v for k, v in flags.items() if k in given}, **(plan or {})})
        fmt_value = values.get("format") or "table"
        if fmt_value not in reports.formats("preflight"):
            raise UsageError(f"--format must be {reports.choices_text('preflight')}, got {fmt_value!r}")
        req = _plan_request(values)
        opts = _options(values)
        tok = None
        if opts.requests:
            from .lengths import resolve_tokenizer

            tok = resolve_tokenizer(values.get("tokenizer"), values.get("model"), None, quiet=bool(values.get("estimate")))
            if tok is None and values.get("estimate") is None:
                typer.echo("kvplan: note: no tokenizer found: prompts without server-reported usage are estimated "
                           "(labelled in the report); give --tokenizer", err=True)
    except UsageError as exc:
        _fail(exc)
    from ..preflight.run import run_preflight

    progress = (lambda s: typer.echo(f"kvplan preflight: {s}", err=True)) if fmt_value == "table" else None
    try:
        result = run_preflight(req, opts, tokenizer=tok, progress=progress)
    except UsageError as exc:
        _fail(exc)
    d = result.to_dict()
    if opts.output_dir is not None:
        from ..report.preflight_files import write_reports

        try:
            d = write_reports(d, opts.output_dir)
        except OSError as exc:
            _fail(UsageError(f"--output-dir {opts.output_dir}: {exc.strerror or exc}"))
    _render(d, fmt_value)
    raise typer.Exit(result.exit_code)


def _render(d: dict, fmt: str) -> None:
    reports.emit("preflight", fmt, d)


def _merge(config: Optional[Path], given_flags: dict) -> dict:
    """The config file's values, overridden by every flag given on the command line (given: by
    click's parameter source, so an explicit ``-tp 1`` or ``--no-enforce-eager`` wins over the file)."""
    values: dict = {}
    if config is not None:
        from ..preflight.config import load_config

        values = load_config(config)
    values.update(given_flags)
    return values


def _options(v: dict):
    from ..preflight.options import DEFAULT_DURATION_S, DEFAULT_LOAD_FACTOR, PreflightOptions
    from ..slo import parse_seconds, parse_slo

    out = v.get("output_dir")
    return PreflightOptions(
        requests=v.get("requests"), target_qps=v.get("target_qps"),
        load_factor=float(v.get("load_factor") or DEFAULT_LOAD_FACTOR), slo=parse_slo(v.get("slo")),
        duration_s=parse_seconds(v["duration"], "--duration") if v.get("duration") else DEFAULT_DURATION_S,
        url=v.get("url"), log=v.get("log"), launch=bool(v.get("launch")), vllm_bin=v.get("vllm_bin") or "vllm",
        vllm_args=tuple(v.get("vllm_args") or ()),
        startup_timeout_s=parse_seconds(v["startup_timeout"], "--startup-timeout") if v.get("startup_timeout") else 900.0,
        bench_timeout_s=(parse_seconds(v["request_timeout"], "--request-timeout") if v.get("request_timeout")
                         else 120.0),
        baseline=v.get("baseline"), dry_run=bool(v.get("dry_run")), output_dir=Path(out) if out else None,
        max_tokens=v.get("max_tokens"), history_turns=v.get("history_turns"), history_tokens=v.get("history_tokens"),
        percentile=float(v.get("percentile") or 99.0), estimate=v.get("estimate"), strict=bool(v.get("strict")),
        gpu_price=v.get("gpu_price"),
    ).validate()


def _plan_request(v: dict):
    """The plan request, built as `kvplan plan` / `kvplan simulate` build it (one shared helper).
    Against a running server (--url) the plan follows the server's vLLM version (its /version,
    else its log) and, with --log, the KV memory and flags the log states, as ``plan --from-log``."""
    from dataclasses import replace

    from ..serve_flags import request_from_values, values_of

    flags = values_of(v)
    log = None
    if v.get("url") and v.get("log"):
        from ..memory.startup_log import parse_startup_log, read_log_text

        log = parse_startup_log(read_log_text(v["log"]), str(v["log"]))
    note = None
    if v.get("url") and not flags.get("vllm_version"):
        from ..memory.semantics import nearest_supported_version
        from ..ops.profile import server_vllm_version

        found, where = server_vllm_version(v["url"]), f"{v['url']}/version"
        if found is None and log is not None and log.vllm_version:
            found, where = log.vllm_version, str(v["log"])
        if found is not None:
            version, fallback = nearest_supported_version(found)
            flags["vllm_version"] = version
            note = f"vLLM {found} read from {where}" + (f"; {fallback}" if fallback else "")
    req = request_from_values(flags, frozenset(), log)
    return replace(req, notes=req.notes + (note,)) if note else req


def register(app: typer.Typer) -> None:
    app.command("preflight")(opt.serve_options(preflight_cmd, unset=True))
