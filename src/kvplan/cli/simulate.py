"""``kvplan simulate``: the plan flags of ``kvplan plan`` plus traffic (a rate and length
distributions, or a request log to replay) -> predicted latency percentiles, throughput,
preemptions, queue and KV usage over time. Thin: parse, call :mod:`kvplan.sim`, render.

Only typer and the standard library at module level (``kvplan plan`` must start fast).
Exit codes: 0 done (and every ``--slo`` met); 1 an SLO is missed, or the plan does not start
(vLLM's own error text); 2 usage errors.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .. import serve_flags as sf
from ..errors import KvplanError, PlanDoesNotStart, UsageError
from ..report import registry as reports
from . import plan_flags as pf
from . import traffic_flags as tf
from ._exit import fail as _fail


def register(app: typer.Typer) -> None:
    app.command("simulate")(pf.serve_options(tf.bench_flags(simulate_cmd)))


def simulate_cmd(
    plan: Optional[dict] = None,  # the serve flags (kvplan/serve_flags.py; pf.serve_options puts them here)
    # traffic: vllm bench serve's flags (cli/traffic_flags.py: tf.bench_flags puts them here) ...
    bench: Optional[dict] = None,
    warm_prompts: tf.WarmPrompts = None,
    warm_prompt_len: tf.WarmPromptLen = None,
    from_bench_cmd: tf.FromBenchCmd = None,
    from_serve_cmd: tf.FromServeCmd = None,
    # ... and kvplan's (aliases of vllm bench's when those are used)
    rate: Optional[float] = typer.Option(None, "--rate", help="Requests per second (with --requests: replay at this rate)."),
    requests: Optional[str] = typer.Option(None, "--requests", help="A request log to replay (its timestamps unless --rate)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="With --requests: count prompts with this tokenizer."),
    num_requests: Optional[int] = typer.Option(None, "--num-requests", help="How many requests (default 1000 with --rate)."),
    duration: Optional[str] = typer.Option(None, "--duration", help="Arrivals for this long, e.g. 60s, 5m."),
    input_len: Optional[str] = typer.Option(None, "--input-len", help="N, uniform:LO,HI, normal:MEAN,STD (colon forms too) [1024]."),
    output_len: Optional[str] = typer.Option(None, "--output-len", help="Tokens generated per request, same syntax [256]."),
    arrival: Optional[str] = typer.Option(None, "--arrival", help="constant, poisson or gamma:K [poisson]."),
    seed: Optional[int] = typer.Option(None, "--seed", help="[0]"),
    profile: Optional[Path] = typer.Option(None, "--profile", help="Step-time profile from `kvplan calibrate` (default: roofline prior)."),
    slo: Optional[str] = typer.Option(None, "--slo", help="Gates, e.g. ttft_p99=2s,tpot_p99=100ms."),
    saturation_search: bool = typer.Option(False, "--find-saturation", help="Also bisect the rate for the max sustainable QPS (at --slo)."),
    capacity: bool = typer.Option(False, "--capacity", help="Max sustainable QPS at the SLO for each max_model_len of the plan's ladder."),
    interval: str = typer.Option("1s", "--timeline-interval", help="Timeline resolution."),
    per_request: bool = typer.Option(False, "--per-request", help="Add every request's times to the JSON."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or markdown."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the JSON result here."),
    html: Optional[Path] = typer.Option(None, "--html", help="Write an HTML report (timeline, latency CDF, throughput-latency curve)."),
) -> None:
    """Predict vLLM's latency and throughput for a traffic mix on a plan, step by step (V1 scheduler)."""
    try:
        flags = dict(locals())
        flags.update(flags.pop("bench"))
        flags.update(flags.pop("plan"))
        d = simulate_from_flags(flags)
    except typer.Exit:
        raise
    except UsageError as exc:
        _fail(exc)
    except KvplanError as exc:
        _fail(exc, code=1)
    _emit(d, fmt, output, html)
    none_done = next((c for c in d["verdict"]["checks"] if c["name"] == "completed_requests"), None)
    if none_done is not None:
        typer.echo(f"kvplan simulate: {none_done['reason']}; check --max-model-len and the KV cache against "
                   "the prompt lengths", err=True)
    raise typer.Exit(0 if d["verdict"]["passed"] else 1)


def simulate_from_flags(flags: dict) -> dict:
    """``kvplan simulate``'s result JSON for its parameters (``simulate_cmd``'s ``locals()``, the
    serve flags among them by field: those given, or all of them): the command and ``kvplan ui``
    both call this, so the page shows the CLI's numbers."""
    fmt, slo, interval, rate, requests = flags["fmt"], flags["slo"], flags["interval"], flags["rate"], flags["requests"]
    from ..slo import parse_seconds, parse_slo

    if fmt not in reports.formats("simulate"):
        raise UsageError(f"--format must be {reports.choices_text('simulate')}, got {fmt!r}")
    slos = parse_slo(slo)
    step = parse_seconds(interval, "--timeline-interval")
    if not step > 0:
        raise UsageError("--timeline-interval must be positive")
    values = sf.values_of(flags)
    notes = tf.apply_serve_cmd(flags["from_serve_cmd"], values)
    if not values.get("model") and flags["from_bench_cmd"]:
        from ..traffic.bench_cmd import parse_bench_cmd

        values["model"] = parse_bench_cmd(flags["from_bench_cmd"]).model
    req = sf.request_from_values(values)
    make_trace, _ = tf.traffic_maker(flags=flags, model_spec=req.model, vllm_version=values.get("vllm_version"),
                                     notes=notes)
    from ..memory import plan
    from ..sim import StepTimeProfile, simulate

    plan_result = plan(req, what_ifs=False)
    if not plan_result.startup.ok:
        # the same verdict as `kvplan plan` (FAILS), with the same way out
        from ..report._common import layout_fit_text

        fit = layout_fit_text(plan(req, what_ifs=False, fit_search=True))
        raise PlanDoesNotStart(f"the plan does not start (kvplan plan: verdict FAILS): {plan_result.startup.error}"
                               + (f" {fit}" if fit else ""))
    profile = flags["profile"]
    prof = StepTimeProfile.load(profile) if profile else None

    trace = make_trace(rate)
    # the scheduler's flags (prefix caching, long prefills, async scheduling) travel in the request
    result = simulate(req, trace, profile=prof, plan_result=plan_result, timeline_interval_s=step, slo=slos,
                      per_request=flags["per_request"])
    d = result.to_dict()
    if (flags["saturation_search"] or flags["html"] is not None) and (rate is not None or requests
                                                                     or trace.bench is not None):
        # the HTML report's throughput-latency curve is the bisection's probes
        from ..sim import find_saturation

        d["saturation_search"] = find_saturation(req, make_trace, slo=slos, profile=prof,
                                                 plan_result=plan_result)
    if flags["capacity"]:
        from ..sim import capacity_boundary

        d["capacity_boundary"] = capacity_boundary(req, make_trace, slo=slos, profile=prof)
    return d


def _emit(d: dict, fmt: str, output: Optional[Path], html: Optional[Path]) -> None:
    try:
        if output is not None:
            reports.emit("simulate", "json", d, output=output)
        if html is not None:
            from ..report.sim_html import render_html

            html.write_text(render_html(d), encoding="utf-8")
    except OSError as exc:
        _fail(UsageError(f"cannot write {exc.filename}: {exc.strerror}"))
    reports.emit("simulate", fmt, d)
