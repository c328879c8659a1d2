"""Terminal view of ``kvplan calibrate``: the fitted coefficients and how well they reproduce the
measured runs. Reads ``CalibrationResult.to_dict()``; computes nothing."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from rich.console import Console
from rich.table import Table

_UNITS = {"overhead_s": ("ms / step", 1e3), "per_seq_s": ("µs / sequence", 1e6), "per_token_s": ("µs / token", 1e6),
          "per_kv_token_s": ("ns / KV entry read", 1e9), "per_attn_pair_s": ("ns / attention pair", 1e9),
          "request_overhead_s": ("ms / request", 1e3)}


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 1e3:,.2f}"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def render_calibration_table(d: dict[str, Any], console: Optional[Console] = None) -> None:
    console = console or Console()
    prof, fit = d["profile"], d["fit"]
    t = Table(title=f"step-time profile: {prof['source']}" + (f" ({prof['device']})" if prof.get("device") else ""))
    t.add_column("coefficient")
    t.add_column("value", justify="right")
    t.add_column("unit")
    for name, (unit, mult) in _UNITS.items():
        t.add_row(name, f"{fit['coefficients'][name] * mult:,.3f}", unit)
    console.print(t)
    q = Table(title="fit: predicted vs measured (per request)")
    for col in ("equation", "n", "measured mean ms", "predicted mean ms", "mean error", "|err| p50", "|err| p90",
                "R²"):
        q.add_column(col, justify="right" if col != "equation" else "left")
    for key, label in (("tpot", "TPOT (decode window)"), ("ttft_idle", "TTFT (idle engine)"),
                       ("prefill_step", "vLLM prefill time (run mean)")):
        s = fit.get(key) or {}
        if not s.get("count"):
            q.add_row(label, "0", "-", "-", "-", "-", "-", "-")
            continue
        q.add_row(label, str(s["count"]), _ms(s["measured_mean_s"]), _ms(s["predicted_mean_s"]), _pct(s["mean_error"]),
                  _pct(s["abs_rel_error_p50"]).lstrip("+"), _pct(s["abs_rel_error_p90"]).lstrip("+"),
                  "-" if s.get("r2") is None else f"{s['r2']:.3f}")
    for key, s in (d.get("validation") or {}).items():
        if s.get("count"):
            q.add_row(f"held-out {key}", str(s["count"]), _ms(s["measured_mean_s"]), _ms(s["predicted_mean_s"]),
                      _pct(s["mean_error"]), _pct(s["abs_rel_error_p50"]).lstrip("+"),
                      _pct(s["abs_rel_error_p90"]).lstrip("+"), "-" if s.get("r2") is None else f"{s['r2']:.3f}")
    console.print(q)
    r = Table(title="runs")
    for col in ("result", "rate req/s", "requests used", "skipped", "preemptions", "engine steps",
                "server TPOT mean ms"):
        r.add_column(col)
    for run in d["runs"]:
        sc = run.get("server_checks") or {}
        skipped = ", ".join(f"{k} {v}" for k, v in run["skipped"].items()) or "0"
        r.add_row(Path(run["result"]).name, "-" if run["rate"] is None else f"{run['rate']:.2f}",
                  f"{run['requests_used']} / {run['requests_read']}", skipped,
                  "-" if run["preemptions"] is None else f"{run['preemptions']:g}",
                  "-" if sc.get("engine_steps") is None else f"{sc['engine_steps']:g}", _ms(sc.get("server_tpot_mean_s")))
    console.print(r)
    for w in d.get("warnings") or ():
        console.print(f"[yellow]warning:[/yellow] {w}")
