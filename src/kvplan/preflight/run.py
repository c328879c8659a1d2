"""``run_preflight``: the pre-launch checklist, in the issue's order, each step a call into the
library that owns it:

1. lengths  -> :func:`kvplan.workload.analyze_lengths` + ``traffic_fit`` (recommended max_model_len,
   max_tokens, history limit);
2. plan     -> :func:`kvplan.memory.plan` (starts? peak memory within the budget? concurrency);
3. profile  -> :func:`kvplan.ops.profile.profile_server` (measured vs planned; not in a dry run);
4. load     -> :func:`kvplan.bench.run_bench` at target QPS x 1.5 with the log's real prompts, or in a
   dry run :func:`kvplan.sim.simulate` on the same log (labelled "simulated");
5. baseline -> :func:`kvplan.bench.compare`;
6. history  -> the per-turn statistics of the lengths result;
7. alerts   -> :func:`kvplan.ops.alerts.write`, then checked (promtool when installed).

With ``--launch`` kvplan starts ``vllm serve`` itself (:func:`kvplan.ops.launch.launch_vllm`) and
stops it by PID when done; its log goes through the doctor (OOM, start-up failures).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Optional

from ..errors import KvplanError, UsageError
from ..ops.thresholds import Thresholds
from . import checks_load, checks_static, simfix
from .load import LoadRun, from_bench, from_sim
from .model import CheckResult, PreflightResult, verdict_of
from .options import PreflightOptions

CDF_POINTS = 200
Progress = Optional[Callable[[str], None]]


def _say(progress: Progress, text: str) -> None:
    if progress is not None:
        progress(text)


def thresholds_for(opts: PreflightOptions, run=None) -> tuple[Thresholds, tuple[str, ...]]:
    """The alert thresholds and where the latency ones come from: the latency SLOs given to
    preflight (the limits the load test was judged by), else the load test's own P99 (simulated
    or measured) with kvplan.ops.thresholds.LATENCY_MARGIN, else none."""
    from ..ops.thresholds import derive_latency

    observed = None
    if run is not None:
        observed = {key: (run.latency_s.get(metric) or {}).get("p99")
                    for key, metric in (("e2e_p99", "e2e"), ("ttft_p99", "ttft"))}
    source = "the simulated load test" if run is not None and run.simulated else "the load test"
    return derive_latency(Thresholds(), {s.key: s.limit for s in opts.slo}, observed, source)


def analyse_traffic(plan_result, opts: PreflightOptions, tokenizer):
    """(LengthsResult, TrafficFit) of --requests, measured against the plan; (None, None) without a log."""
    if not opts.requests:
        return None, None
    from ..workload.analysis import LengthsOptions, analyze_lengths
    from ..workload.traffic import traffic_fit

    lo = LengthsOptions(percentile=opts.percentile, block_size=plan_result.kv.block_size, max_tokens=opts.max_tokens,
                        estimate=opts.estimate, history_max_model_len=plan_result.flags.max_model_len)
    lo.validate()
    lengths = analyze_lengths([opts.requests], tokenizer, lo, plan=plan_result, model=plan_result.model.id)
    if lengths.records.used == 0:
        raise UsageError(f"--requests {opts.requests}: no usable record (skipped: {dict(lengths.records.skipped)})")
    return lengths, traffic_fit(plan_result, lengths)


def simulate_load(req, plan_result, opts: PreflightOptions, tokenizer):
    """The dry run's load test: the simulator replays the log's requests at target QPS x factor.
    Returns (run or None, why not, the SimResult dict, the trace)."""
    if opts.target_qps is None:
        return None, "no --target-qps: nothing to simulate", {}, None
    if not opts.requests:
        return None, "dry run without --requests: no traffic to simulate", {}, None
    if not plan_result.startup.ok:
        return None, "the plan does not start: nothing to simulate", {}, None
    try:
        from ..sim import simulate, trace_from_log
    except ImportError as exc:
        return None, f"the simulator is not available in this kvplan ({exc})", {}, None
    rate = opts.load_rate
    n = max(1, math.ceil(rate * opts.duration_s))
    trace = trace_from_log([opts.requests], tokenizer=tokenizer, rate=rate, num_requests=n, max_tokens=opts.max_tokens,
                           estimate=opts.estimate)
    try:
        res = simulate(req, trace, plan_result=plan_result)
    except KvplanError as exc:
        return None, f"the simulator refused: {exc}", {}, None
    d = res.to_dict()
    got = len(trace.requests)
    span = trace.requests[-1].arrival_s if trace.requests else 0.0
    src = f"simulated: kvplan.sim, {got:,} requests of the log at {rate:g} req/s over {span:,.0f} s"
    if got < n:
        src += f" (the log has fewer than the {n:,} of {opts.duration_s:g} s)"
    return from_sim(d, src, rate), "", d, trace


def _bench(url: str, opts: PreflightOptions) -> tuple[LoadRun, dict]:
    from ..bench.config import BenchConfig
    from ..bench.run import run_bench
    from ..traffic.lengthdist import parse_length

    length = "log" if opts.requests else None
    cfg = BenchConfig(url=url, rate=opts.load_rate, duration_s=opts.duration_s, requests_log=opts.requests,
                      input_len=parse_length(length or "128", "--input-len"),
                      output_len=parse_length(length or "64", "--output-len"), slo=tuple(opts.slo),
                      timeout_s=opts.bench_timeout_s)
    result, _records = run_bench(cfg)
    d = result.to_dict()
    src = f"kvplan bench: {opts.load_rate:g} req/s (target {opts.target_qps:g} x {opts.load_factor:g}) for " \
          f"{opts.duration_s:g} s against {url}" + (" with the log's prompts" if opts.requests else "")
    return from_bench(d, src), d


def _doctor(log_path: str, log_text: str):
    from ..ops.doctor.diagnose import diagnose

    return diagnose([(log_path, log_text)])


def _serve_and_measure(req, plan_result, opts: PreflightOptions, progress: Progress) -> dict:
    """Profile and bench a live server (--url, or one kvplan launches). Returns what it found."""
    found: dict = {"profile": None, "profile_why": "", "run": None, "run_why": "", "bench": None,
                   "oom": (), "launch_failure": None, "doctor": None, "log_path": None}
    if not plan_result.startup.ok and opts.launch:
        why = "not launched: the plan predicts vLLM refuses to start (plan_starts)"
        found.update(profile_why=why, run_why=why)
        return found

    def measure(url: str, log_text_fn) -> None:
        _say(progress, f"profiling {url}")
        try:
            from ..ops.profile import profile_server

            found["profile"] = profile_server(url, plan_result=plan_result, log_text=log_text_fn(),
                                              timeout_s=opts.profile_timeout_s)
        except ImportError as exc:
            found["profile_why"] = f"kvplan profile is not available in this kvplan ({exc})"
        except KvplanError as exc:
            found["profile_why"], found["profile_failed"] = f"kvplan profile failed: {exc}", True
        if opts.target_qps is None:
            found["run_why"] = "no --target-qps: no load test"
            return
        _say(progress, f"load test: {opts.load_rate:g} req/s for {opts.duration_s:g} s")
        from ..bench.run import ServerUnavailable

        try:
            found["run"], found["bench"] = _bench(url, opts)
        except ServerUnavailable as exc:
            found["run_why"] = f"the server could not be reached: {exc}"

    if opts.launch:
        from ..ops.launch import LaunchFailed, launch_vllm

        log_path = Path(opts.output_dir) / "vllm-serve.log" if opts.output_dir else None
        _say(progress, "launching vllm serve (this takes a while)")
        try:
            srv = launch_vllm(plan_result, vllm_bin=opts.vllm_bin, extra_args=opts.vllm_args,
                              env=dict(opts.vllm_env) or None, log_path=log_path,
                              startup_timeout_s=opts.startup_timeout_s)
        except LaunchFailed as exc:
            found["launch_failure"] = exc
            found["log_path"] = str(exc.log_path)
            found["doctor"] = _doctor(str(exc.log_path), exc.log_text)
            why = f"vLLM did not start (exit code {exc.exit_code}; log {exc.log_path})"
            found.update(profile_why=why, run_why=why)
            return found
        with srv:
            found["log_path"] = str(srv.log_path)
            found["server"] = {"pid": srv.pid, "base_url": srv.base_url, "argv": list(srv.argv),
                               "startup_seconds": getattr(srv, "startup_seconds", None)}
            measure(srv.base_url, srv.log_text)
            text = srv.log_text()
        found["server"]["exit_code"] = getattr(srv, "exit_code", None)
        found["server"]["pids_seen"] = list(srv.processes_seen()) if hasattr(srv, "processes_seen") else [srv.pid]
        found["doctor"] = _doctor(str(srv.log_path), text)
        found["oom"] = tuple(f for f in found["doctor"].findings if f.id.startswith("cuda_oom"))
    else:
        log_text = None
        if opts.log:
            from ..memory.startup_log import read_log_text

            log_text = read_log_text(opts.log)
            found["log_path"] = opts.log
        measure(opts.url, lambda: log_text)
    return found


def _launch_failure_check(plan_check: CheckResult, found: dict) -> CheckResult:
    """vLLM refused to start although the plan said it would: the measurement wins."""
    exc = found["launch_failure"]
    doc = found.get("doctor")
    evidence = [f"vLLM exited with code {exc.exit_code} before serving; log: {exc.log_path}"]
    fixes = []
    if doc is not None:
        for f in doc.findings:
            if f.severity == "error":
                evidence.append(f"kvplan doctor: {f.id}: {f.title}")
                evidence += [f"{e.file}:{e.line}: {e.text}" for e in f.evidence[:2]]
                fixes += list(f.fixes)
    return CheckResult("plan_starts", "fail", plan_check.title, f"exit code {exc.exit_code}", plan_check.threshold,
                       tuple(evidence), tuple(fixes))


def _missing_load(run, opts: PreflightOptions, plan_result, found: dict) -> tuple[str, tuple]:
    """How serious a missing load test is: not asked for (no --target-qps / --requests in a dry run):
    a risk; the server could not be reached or did not start: a failure; the plan does not start:
    skipped (plan_starts already fails)."""
    from ..ops.doctor.model import Fix

    if run is not None:
        return "skipped", ()
    if not plan_result.startup.ok or found.get("launch_failure") is not None:
        return "skipped", ()
    if opts.target_qps is None:
        return "warn", (Fix("--target-qps Q", "runs the load test at Q x 1.5 for --duration (simulated with --dry-run)",
                            "free", basis="preflight"),)
    if opts.dry_run:
        if not opts.requests:
            return "warn", (Fix("--requests LOG", "the simulator replays the log's lengths", "free", basis="preflight"),)
        return "warn", ()
    return "fail", ()


def _needed_concurrency(run: Optional[LoadRun], lengths, opts: PreflightOptions) -> tuple[Optional[float], str]:
    if opts.target_qps is None:
        return None, "no --target-qps: the concurrency needed is unknown"
    rate = opts.load_rate
    if run is not None and run.mean_e2e is not None and run.saturated:
        # a backlog that grows has no steady E2E: Little's law does not apply (load_queue sizes the replicas)
        return None, (f"the load run at {rate:g} req/s is saturated: its requests in flight grow without bound and "
                      "its E2E is the queue's, so Little's law gives no concurrency (load_queue's fixes size the "
                      "replicas)")
    if run is not None and run.mean_e2e is not None:
        what = "simulated" if run.simulated else "measured"
        peak = f"; peak running in the run: {run.peak_running:,.0f}" if run.peak_running is not None else ""
        dp = max(1, getattr(run, "replicas", 1) or 1)
        per = f", / {dp} replicas" if dp > 1 else ""
        return rate * run.mean_e2e / dp, f"{rate:g} req/s x {run.mean_e2e:.3f} s mean E2E{per} ({what}){peak}"
    arr = lengths.arrivals if lengths is not None else None
    if arr is not None and arr.concurrency_mean is not None and arr.mean_rps:
        dur = arr.concurrency_mean / arr.mean_rps
        return rate * dur, f"{rate:g} req/s x {dur:.3f} s mean request duration in the log"
    return None, "no load run and no request durations in the log: the concurrency needed is unknown"


def _cdf(xs, points: int = CDF_POINTS) -> list[list[float]]:
    s = sorted(x for x in xs if x is not None)
    if not s:
        return []
    n = len(s)
    idx = sorted({min(n - 1, int(i * n / points)) for i in range(points)} | {n - 1})
    return [[round(s[i], 6), round((i + 1) / n, 6)] for i in idx]


def _sections(plan_result, lengths, traffic, run: Optional[LoadRun], opts, found) -> dict:
    sec: dict = {}
    if lengths is not None:
        rec = lengths.recommendation
        room, budget = checks_static._room(plan_result, lengths, opts)
        sec["lengths"] = {
            "records_used": lengths.records.used, "records_skipped": dict(lengths.records.skipped),
            "counted_by": dict(lengths.counted_by), "estimated": lengths.estimated,
            "prompt_tokens": vars(lengths.prompt_tokens), "output_tokens": vars(lengths.output_tokens),
            "total_tokens": vars(lengths.total_tokens),
            "histogram_total_tokens": {"edges": list(lengths.histograms["total_tokens"].edges),
                                       "counts": list(lengths.histograms["total_tokens"].counts)},
            "recommended_max_model_len": rec.max_model_len, "recommended_max_tokens": rec.max_tokens,
            "recommended_history_turns": rec.history_turns, "max_model_len": plan_result.flags.max_model_len,
            "prompt_room": room, "max_tokens_budget": budget,
            "per_turn": [vars(t) for t in lengths.per_turn],
        }
    if traffic is not None:
        sec["traffic"] = traffic.to_dict()
    if run is not None:
        sec["load"] = {"simulated": run.simulated, "source": run.source, "requested_rate": run.requested_rate,
                       "total": run.total, "failed": run.failed, "latency_s": run.latency_s,
                       "completed_rate": run.completed_rate, "preemptions": run.preemptions,
                       "peak_kv_usage": run.peak_kv_usage, "peak_waiting": run.peak_waiting,
                       "peak_running": run.peak_running, "timeline": list(run.timeline),
                       "cdf": {k: _cdf(run.samples.get(k) or []) for k in ("ttft", "e2e") if run.samples.get(k)}}
    if found.get("profile") is not None:
        p = found["profile"]
        sec["profile"] = p.to_dict() if hasattr(p, "to_dict") else p
    if found.get("server") is not None:
        sec["server"] = found["server"]
    if found.get("doctor") is not None:
        sec["doctor_findings"] = [{"id": f.id, "severity": f.severity, "title": f.title} for f in found["doctor"].findings]
    return sec


def _plan_headline(plan_result) -> dict:
    from ..report._common import headline
    from .whatif import gpu_memory_fraction

    f = plan_result.flags
    return {"headline": headline(plan_result), "model": plan_result.model.id, "vllm_semantics": plan_result.vllm_semantics,
            "starts": plan_result.startup.ok, "kv_log_lines": list(plan_result.kv.log_lines),
            "max_model_len": f.max_model_len, "max_num_seqs": f.max_num_seqs, "block_size": f.block_size,
            "gpu_memory_utilization": f.gpu_memory_utilization, "kv_cache_tokens": plan_result.kv.kv_cache_tokens,
            "num_gpu_blocks": plan_result.kv.num_gpu_blocks, "max_concurrency": plan_result.kv.max_concurrency,
            "gpu_memory_fraction": round(gpu_memory_fraction(plan_result), 4) if f.device == "cuda" else None,
            "device": f.device,
            "serve_command": plan_result.serve_command,
            "serve_command_starts": plan_result.serve_command_starts,
            "notes": list(plan_result.notes)}


def run_preflight(req, opts: PreflightOptions, *, tokenizer=None, progress: Progress = None) -> PreflightResult:
    """Run every check for the plan ``req`` (a PlanRequest) and return the verdict."""
    from ..memory import plan

    opts.validate()
    _say(progress, "planning")
    plan_result = plan(req)
    _say(progress, "measuring the request log" if opts.requests else "no request log")
    lengths, traffic = analyse_traffic(plan_result, opts, tokenizer)
    notes: list[str] = []
    files: dict = {}
    found: dict = {"profile": None, "run": None}
    sim_dict: dict = {}
    trace = None
    if opts.dry_run:
        _say(progress, "simulating the load (dry run)")
        run, why, sim_dict, trace = simulate_load(req, plan_result, opts, tokenizer)
        profile_why = "dry run: no server is profiled"
        notes.append("Dry run: no server was started or measured; the load test is SIMULATED by kvplan.sim.")
    else:
        found = _serve_and_measure(req, plan_result, opts, progress)
        run, why, profile_why = found["run"], found["run_why"], found["profile_why"]
    if opts.output_dir is not None:
        from ..bench.io import write_result

        Path(opts.output_dir).mkdir(parents=True, exist_ok=True)
        if found.get("bench") is not None:
            p = Path(opts.output_dir) / "preflight-bench.json"
            write_result(found["bench"], p)
            files["bench_result"] = str(p)
            notes.append(f"The load test's result is {p}: give it as --baseline to the next preflight.")
        if sim_dict:
            p = Path(opts.output_dir) / "preflight-sim.json"
            write_result(sim_dict, p)
            files["sim_result"] = str(p)
    if found.get("log_path"):
        files["vllm_log"] = found["log_path"]

    thresholds, threshold_notes = thresholds_for(opts, run)
    plan_starts = checks_static.check_plan_starts(plan_result, req, lengths)
    if found.get("launch_failure") is not None:
        plan_starts = _launch_failure_check(plan_starts, found)
    needed, needed_src = _needed_concurrency(run, lengths, opts)
    missing_status, missing_fixes = _missing_load(run, opts, plan_result, found)
    checks: list[CheckResult] = [
        checks_static.check_max_model_len(plan_result, req, lengths),
        checks_static.check_max_tokens(lengths, opts),
        plan_starts,
        checks_static.check_plan_memory(plan_result, req, lengths),
        checks_static.check_concurrency(plan_result, req, lengths, traffic, needed, needed_src, opts.load_factor,
                                        simulated=bool(run is not None and run.simulated)),
        checks_load.profile_check(found.get("profile"), profile_why,
                                  "warn" if found.get("profile_failed") else "skipped"),
        *checks_load.load_checks(run, why, plan_result, req, lengths, traffic, opts, thresholds, found.get("oom", ()),
                                 missing_status, missing_fixes),
        checks_load.baseline_check(opts.baseline, run),
        checks_static.check_history(plan_result, lengths, opts),
    ]
    if opts.dry_run and trace is not None and any(simfix.needs_sim_fix(c) for c in checks):
        _say(progress, "simulating fixes")
        fixes = simfix.simulated_fixes(req, plan_result, trace, sim_dict, opts.slo, opts=opts, tokenizer=tokenizer)
        checks = [simfix.attach(c, fixes) if simfix.needs_sim_fix(c) else c for c in checks]
    alerts, alert_files = checks_load.alerts_check(opts.output_dir, thresholds, plan_result.vllm_semantics,
                                                   gpu_memory_utilization=plan_result.flags.gpu_memory_utilization,
                                                   notes=threshold_notes)
    checks.append(alerts)
    files.update(alert_files)
    inputs = {"plan_flags": _plan_flags(req), **opts.public()}
    return PreflightResult(verdict=verdict_of(checks), checks=tuple(checks), dry_run=opts.dry_run, mode=opts.mode,
                           inputs=inputs, plan=_plan_headline(plan_result),
                           sections=_sections(plan_result, lengths, traffic, run, opts, found), files=files,
                           notes=tuple(notes), strict=opts.strict)


def _plan_flags(req) -> dict:
    out = {}
    for k, v in vars(req).items():
        if k in ("model", "gpu"):
            out[k] = getattr(v, "name", None) or str(v)
        elif v is not None and not isinstance(v, (dict, tuple)):
            out[k] = v
    return out
