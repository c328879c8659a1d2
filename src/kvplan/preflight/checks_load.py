"""The checks on a load run (measured by ``kvplan bench`` or simulated by ``kvplan.sim``), the
live profile, the baseline comparison and the alert files.

Thresholds are the alert thresholds (:class:`kvplan.ops.thresholds.Thresholds`: KV usage 90%,
waiting 10, any preemption), so a configuration that passes preflight does not page at launch.
Fixes for server-side failures come from the doctor's fixes module.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from ..ops.doctor import fixes as doctor_fixes
from ..ops.doctor.model import Fix
from ..ops.thresholds import Thresholds
from .load import LoadRun, slo_value, too_long_errors
from .model import CheckResult
from .options import PreflightOptions
from .whatif import doctor_planner, what_if_fixes, within_memory_limit



def _saturated(sat) -> Optional[tuple[bool, str]]:
    """The simulator's saturation verdict, whatever its shape (bool, or a dict with a flag)."""
    if sat is None:
        return None
    if isinstance(sat, bool):
        return sat, "saturated: the queue grows without bound" if sat else "not saturated"
    if isinstance(sat, dict):
        flag = next((sat[k] for k in ("saturated", "is_saturated", "unstable") if isinstance(sat.get(k), bool)), None)
        text = "; ".join(f"{k}={v}" for k, v in sat.items() if not isinstance(v, (list, dict)))
        return (bool(flag), text) if flag is not None else (False, text)
    return False, str(sat)


def _skip(check_id: str, title: str, why: str) -> CheckResult:
    return CheckResult(check_id, "skipped", title, evidence=(why,))


def _args(plan_result) -> dict:
    f = plan_result.flags
    return {"kv_cache_dtype": f.kv_cache_dtype, "tensor_parallel_size": plan_result.parallel.tensor_parallel_size,
            "max_num_batched_tokens": f.max_num_batched_tokens, "enforce_eager": f.enforce_eager,
            "quantization": f.quantization}


def load_checks(run: Optional[LoadRun], why_not: str, plan_result, req, lengths, traffic, opts: PreflightOptions,
                thresholds: Thresholds, oom_findings: tuple = (), missing_status: str = "skipped",
                missing_fixes: tuple[Fix, ...] = ()) -> list[CheckResult]:
    ids = [("load_run_complete", "the load test ran to the end, not client-bound"),
           ("load_errors", "no failed requests"), ("load_oom", "no out-of-memory error"),
           ("load_preemptions", "no preemption"), ("load_kv_usage", "KV-cache usage below the alert threshold"),
           ("load_queue", "queue short, server keeps up")]
    if run is None:
        # the load test is item 3 of the checklist: when it could not run (or was not asked for),
        # load_run_complete says so with ``missing_status``; the rest are skipped
        out = [_skip(i, t, why_not) for i, t in ids]
        if missing_status != "skipped":
            out[0] = CheckResult("load_run_complete", missing_status, ids[0][1], "not run", "completed", (why_not,),
                                 missing_fixes)
        out += [_skip(f"slo_{s.key}", f"SLO {s.key}", why_not) for s in opts.slo]
        return out
    sim = run.simulated
    tag = " (simulated)" if sim else ""
    src = run.source
    out: list[CheckResult] = []

    # run complete / client-bound
    t = ids[0][1] + tag
    if sim:
        out.append(CheckResult("load_run_complete", "pass", t, "simulated", "completed", (src,), simulated=True))
    else:
        problems = ([f"partial run: {run.stop_reason}"] if run.partial else []) + list(run.client_bound_reasons)
        out.append(CheckResult("load_run_complete", "fail" if problems else "pass", t,
                               "; ".join(problems) or "completed", "completed, not client-bound",
                               (src, *(["the load generator fell behind its schedule: the latencies describe the "
                                        "client, not the server"] if run.client_bound else []))))

    # errors: none, except requests refused for their length, up to the share the max_model_len
    # recommendation leaves out (1 - percentile); an explicit --slo error_rate=X replaces this rule
    slo_limit = next((s.limit for s in opts.slo if s.key == "error_rate"), None)
    t = ids[1][1] + tag
    too_long = too_long_errors(run)
    other = run.failed - too_long
    allowed_long = (100.0 - opts.percentile) / 100.0
    ev = [f"{run.failed:,} of {run.total:,} requests failed ({src})"]
    if too_long:
        ev.append(f"{too_long:,} refused for their length ({too_long / max(run.total, 1):.2%}; the max_model_len "
                  f"recommendation leaves out up to {allowed_long:.1%})")
    ev += [f"{k}: {n:,}" + (f" — e.g. {run.error_examples.get(k, '')[:200]}" if run.error_examples.get(k) else "")
           for k, n in sorted(run.errors.items(), key=lambda kv: -kv[1])]
    err_fixes: tuple[Fix, ...] = ()
    if too_long and lengths is not None:
        rec = lengths.recommendation.max_model_len or plan_result.flags.max_model_len
        from ..workload.finalize import coverage_at

        err_fixes = doctor_fixes.too_long(plan_result.flags.max_model_len, rec, plan_result.kv.kv_cache_tokens,
                                          lambda n: (coverage_at(lengths, n).fits_share, ""),
                                          planner=doctor_planner(req, plan_result))
    if run.total == 0:
        out.append(CheckResult("load_errors", "fail", t, "no requests", "some requests", tuple(ev), simulated=sim))
    elif slo_limit is not None:
        er = run.error_rate or 0.0
        out.append(CheckResult("load_errors", "pass" if er <= slo_limit else "fail", t, er, f"<= {slo_limit:g} (--slo)",
                               tuple(ev), () if er <= slo_limit else err_fixes, simulated=sim))
    else:
        ok = other == 0 and too_long <= allowed_long * run.total
        out.append(CheckResult("load_errors", "pass" if ok else "fail", t, run.error_rate,
                               f"no errors; refused for length <= {allowed_long:.1%}", tuple(ev),
                               () if ok else err_fixes, simulated=sim))

    # OOM
    t = ids[2][1] + tag
    if sim:
        out.append(_skip("load_oom", t, "a simulation cannot show an out-of-memory error: its KV cache is the plan's "
                                        "(see plan_memory and plan_starts)"))
    elif oom_findings:
        f = oom_findings[0]
        out.append(CheckResult("load_oom", "fail", t, f.id, "no CUDA OOM in the server log",
                               tuple(f"{e.file}:{e.line}: {e.text}" for e in f.evidence[:3]), tuple(f.fixes)))
    else:
        server_errors = sum(n for k, n in run.errors.items() if k.startswith("http_5") or "disconnect" in k)
        ev_oom = [f"server-side errors (HTTP 5xx, dropped connections): {server_errors:,}"]
        ev_oom.append("the server's log was read through kvplan doctor: no out-of-memory finding" if opts.launch else
                      "--url: the server's log is not available to kvplan; 5xx answers are the only sign of an OOM")
        out.append(CheckResult("load_oom", "fail" if server_errors else "pass", t, server_errors, "0 server errors",
                               tuple(ev_oom)))

    # preemptions
    t = ids[3][1] + tag
    cap = traffic.requests_fit_at_mix if traffic is not None else plan_result.kv.max_concurrency
    if run.preemptions is None:
        out.append(_skip("load_preemptions", t, run.server_notice or "the run reports no preemption count"))
    else:
        pre = run.preemptions
        ok = pre <= thresholds.preemptions
        peak = int(run.peak_running) if run.peak_running is not None else None
        ev_pre = [f"{pre:,.0f} preemptions ({src})",
                  f"KV cache holds {cap:,.1f} requests of this length mix; peak running {peak}"]
        fx = () if ok else within_memory_limit(
            doctor_fixes.preemption(cap, _args(plan_result), peak, planner=doctor_planner(req, plan_result),
                                    util=plan_result.flags.gpu_memory_utilization), req)
        out.append(CheckResult("load_preemptions", "pass" if ok else "fail", t, pre, f"<= {thresholds.preemptions:g}",
                               tuple(ev_pre), fx, simulated=sim))

    # KV usage
    t = ids[4][1] + tag
    if run.peak_kv_usage is None:
        out.append(_skip("load_kv_usage", t, run.server_notice or "no KV usage in the run's timeline"))
    else:
        ok = run.peak_kv_usage <= thresholds.kv_cache_usage
        fx = () if ok else tuple(what_if_fixes(plan_result, req, lengths, within_budget=True))
        out.append(CheckResult("load_kv_usage", "pass" if ok else "warn", t, round(run.peak_kv_usage, 4),
                               f"<= {thresholds.kv_cache_usage:g}",
                               (f"peak KV-cache usage {run.peak_kv_usage:.1%} ({src}); above the threshold the "
                                "VllmKvCacheNearlyFull alert fires and new requests wait",), fx, simulated=sim))

    # queue and saturation
    t = ids[5][1] + tag
    ev_q = []
    status = "pass"
    if run.peak_waiting is not None:
        ev_q.append(f"peak waiting {run.peak_waiting:,.0f} (alert threshold {thresholds.waiting:g})")
        if run.peak_waiting > thresholds.waiting:
            status = "warn"
    if run.completed_rate is not None and run.requested_rate:
        # information only: the completion window runs past the last send by one request's
        # latency, so this ratio is below 1 even for a server that keeps up
        ev_q.append(f"completed {run.completed_rate:,.2f} req/s over the run's window; {run.requested_rate:,.2f} req/s "
                    "offered")
    saturated = _saturated(run.saturation)
    if saturated is not None:
        ev_q.append(f"simulator: {saturated[1]}")
        if saturated[0]:
            status = "fail"
    if not ev_q:
        out.append(_skip("load_queue", t, run.server_notice or "no queue figures"))
    else:
        fx = () if status == "pass" else tuple(what_if_fixes(plan_result, req, lengths, within_budget=True))
        out.append(CheckResult("load_queue", status, t, run.peak_waiting, f"waiting <= {thresholds.waiting:g}; "
                               "not saturated", tuple(ev_q), fx, simulated=sim))

    # SLOs
    bench_slo = {c["name"]: c for c in run.slo_checks}
    for s in opts.slo:
        cid, t = f"slo_{s.key}", f"SLO {s.key}{tag}"
        c = bench_slo.get(s.key)
        value = c["value"] if c is not None else slo_value(run, s.key)
        if value is None:
            out.append(CheckResult(cid, "fail", t, None, s.limit, ("no data to judge",), simulated=sim))
            continue
        passed = c["passed"] if c is not None else s.met(value)
        op = ">=" if s.lower_bound else "<="
        out.append(CheckResult(cid, "pass" if passed else "fail", t, value, f"{op} {s.limit:g}",
                               (f"{s.key} = {value:g} ({src})",), simulated=sim))
    return out


def profile_check(profile, why_not: str, missing_status: str = "skipped") -> CheckResult:
    """kvplan profile's measured-vs-planned rows (ProfileCheck: status pass/fail/skipped): any
    failed row fails the check; skipped rows are listed with their reason."""
    title = "live server matches the plan (kvplan profile)"
    if profile is None:
        return CheckResult("profile_matches_plan", missing_status, title, "not run" if missing_status != "skipped"
                           else None, None, (why_not,))
    d = profile.to_dict() if hasattr(profile, "to_dict") else dict(profile)
    rows = d.get("checks") or []
    counts = {s: sum(1 for r in rows if r.get("status") == s) for s in ("pass", "fail", "skipped")}
    evidence = []
    for r in sorted(rows, key=lambda r: {"fail": 0, "pass": 1}.get(r.get("status"), 2)):
        line = f"{r.get('status', '?').upper()} {r.get('id')}: measured {r.get('measured')} vs planned {r.get('planned')}"
        if r.get("tolerance"):
            line += f" ({r['tolerance']})"
        if r.get("status") != "pass" and r.get("evidence"):
            line += f": {r['evidence']}"
        evidence.append(line)
    measured = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no rows"
    return CheckResult("profile_matches_plan", "fail" if counts["fail"] else "pass", title, measured,
                       "no row fails", tuple(evidence))


def baseline_check(baseline_path: Optional[str], run: Optional[LoadRun]) -> CheckResult:
    title = "no regression against the baseline run"
    if not baseline_path:
        return _skip("baseline_regression", title, "no --baseline given")
    if run is None or run.simulated:
        return _skip("baseline_regression", title, "a comparison needs a measured run (kvplan bench compare uses "
                                                   "per-request samples); this run was "
                     + ("simulated" if run is not None else "not made"))
    from ..bench.compare import compare
    from ..bench.io import load_result

    base = load_result(baseline_path)
    cmp = compare(base, run.raw)
    d = cmp.to_dict()
    worse = [r for r in d["rows"] if r["verdict"] == "worse"]
    def ci(r: dict) -> str:
        if r["verdict"] == "n/a":
            return r.get("note") or "not compared"
        lo = "-100%" if r["ci_low"] is None else f"{r['ci_low']:+.1%}"
        hi = "+inf" if r["ci_high"] is None else f"{r['ci_high']:+.1%}"
        return f"CI [{lo}, {hi}]"

    evidence = [f"{r['metric']} {r['stat']}: {r['baseline']} -> {r['current']} s ({r['change']:+.1%}, {ci(r)}) "
                f"{r['verdict']}" for r in d["rows"] if r["change"] is not None]
    evidence += list(d["problems"]) + list(d.get("warnings") or ())
    return CheckResult("baseline_regression", "pass" if d["passed"] else "fail", title,
                       f"{len(worse)} regressed" if worse else ("comparison invalid" if d["problems"] else "no regression"),
                       f"no quantile worse by > {d['threshold']:.0%} with its CI above 0", tuple(evidence))


def alerts_check(output_dir: Optional[Path], thresholds: Thresholds, vllm_version: str,
                 model_names: tuple[str, ...] = (), gpu_memory_utilization: Optional[float] = None,
                 notes: tuple[str, ...] = ()) -> tuple[CheckResult, dict]:
    """Write the rules and dashboard (kvplan.ops.alerts), then verify what was written. The GPU-memory
    rules use the planned ``gpu_memory_utilization`` as vLLM's budget (the version's default when
    None), so a server started with the planned command does not fire them."""
    title = "alert rules and dashboard written"
    if output_dir is None:
        return CheckResult("alerts_written", "warn", title, "not written", "rules + dashboard in --output-dir",
                           ("no --output-dir: the alert rules and the dashboard were not written",),
                           (Fix("--output-dir DIR", "writes kvplan-alerts.yml (Prometheus) and kvplan-dashboard.json "
                                "(Grafana) with thresholds matching these checks", "free", basis="preflight"),)), {}
    from ..ops import alerts
    from ..ops.dcgm import GpuRuleOptions

    gpu = (GpuRuleOptions(gpu_memory_utilization, "the plan's --gpu-memory-utilization")
           if gpu_memory_utilization is not None else None)
    out = alerts.write(Path(output_dir), thresholds, vllm_version, model_names, gpu, notes=notes)
    evidence = [f"wrote {out.rules_path} and {out.dashboard_path} (vLLM {out.names.version} metric names)",
                "thresholds: " + ", ".join(f"{k}={v:g}" for k, v in thresholds.to_dict().items() if v is not None),
                *(f"latency threshold {n}" for n in notes)]
    problems = []
    rules_text = out.rules_path.read_text(encoding="utf-8") if out.rules_path.is_file() else ""
    if not rules_text.strip():
        problems.append(f"{out.rules_path} is missing or empty")
    try:
        dash = json.loads(out.dashboard_path.read_text(encoding="utf-8"))
        unknown = alerts.queried_metrics(dash) - set(out.names.all())
        if unknown:
            problems.append(f"the dashboard queries metrics vLLM {out.names.version} does not export: {sorted(unknown)}")
    except (OSError, ValueError) as exc:
        problems.append(f"{out.dashboard_path}: not readable JSON ({exc})")
    promtool = shutil.which("promtool")
    if promtool and rules_text:
        try:
            p = subprocess.run([promtool, "check", "rules", str(out.rules_path)], capture_output=True, text=True,
                               timeout=120)
            if p.returncode == 0:
                evidence.append("promtool check rules: SUCCESS")
            else:
                problems.append("promtool check rules failed: " + (p.stdout + p.stderr).strip()[:400])
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"promtool could not run: {exc}")
    else:
        evidence.append("promtool not installed: rules checked for presence only")
    files = {"alerts_rules": str(out.rules_path), "alerts_dashboard": str(out.dashboard_path)}
    return CheckResult("alerts_written", "fail" if problems else "pass", title,
                       "written" if not problems else "; ".join(problems), "rules + dashboard valid",
                       tuple(problems + evidence)), files
