"""``kvplan simulate``: the plan flags of ``kvplan plan`` plus traffic (a rate and length
distributions, or a request log to replay) -> predicted latency percentiles, throughput,
preemptions, queue and KV usage over time. Thin: parse, call :func:`kvplan.sim.run.run_simulate`
(which the page calls too), render.

Only typer and the standard library at module level (``kvplan plan`` must start fast).
Exit codes: 0 done (and every ``--slo`` met); 1 an SLO is missed, the run is too short to judge its
backlog against one, or the plan does not start
(vLLM's own error text); 2 usage errors.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import KvplanError, UsageError
from ..report import registry as reports
from . import options as opt
from ._exit import fail as _fail


def register(app: typer.Typer) -> None:
    from ..simulate_flags import SIMULATE_FLAGS

    command = opt.flag_options(SIMULATE_FLAGS, "own", simulate_cmd)
    app.command("simulate")(opt.serve_options(opt.traffic_options(command)))


def simulate_cmd(
    plan: Optional[dict] = None,  # the serve flags (kvplan/serve_flags.py; opt.serve_options puts them here)
    traffic: Optional[dict] = None,  # the traffic flags (kvplan/traffic/flags.py; opt.traffic_options)
    own: Optional[dict] = None,  # simulate's own flags (kvplan/simulate_flags.py: SIMULATE_FLAGS)
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or markdown."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the JSON result here."),
    html: Optional[Path] = typer.Option(None, "--html", help="Write an HTML report (timeline, latency CDF, throughput-latency curve)."),
) -> None:
    """Predict vLLM's latency and throughput for a traffic mix on a plan, step by step (V1 scheduler)."""
    from ..sim.run import SimulateOptions, run_simulate

    try:
        if fmt not in reports.formats("simulate"):
            raise UsageError(f"--format must be {reports.choices_text('simulate')}, got {fmt!r}")
        options = SimulateOptions.from_values(plan or {}, traffic or {}, own or {}, saturation_curve=html is not None)
        report = run_simulate(options)
    except UsageError as exc:
        _fail(exc)
    except KvplanError as exc:
        _fail(exc, code=1)
    _emit(report.to_dict(), fmt, output, html)
    none_done = next((c for c in report.result.checks if c["name"] == "completed_requests"), None)
    if none_done is not None:
        typer.echo(f"kvplan simulate: {none_done['reason']}; check --max-model-len and the KV cache against "
                   "the prompt lengths", err=True)
    raise typer.Exit(0 if report.passed else 1)


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
