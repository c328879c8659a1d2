"""``kvplan doctor``: read vLLM logs (one reader: kvplan.memory.startup_log for the start-up
figures and line cleaning), recognise failures (signatures.py), and turn each into a finding with
its evidence lines, numbers and ranked fixes (fixes.py).

A file may hold several server runs (restarts appended to one log); each run is diagnosed with its
own figures, so a fix for run 2 never uses run 1's KV memory.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from ...memory.startup_log import (StartupLog, clean_line, is_vllm_line, line_time, parse_startup_log, read_log_text,
                                   redact_line, split_runs)
from . import fixes as fx
from . import serve_flags
from . import signatures as sig
from . import traffic as tr
from .model import DoctorReport, Evidence, Finding, RunSummary
from .planned import BASIS_PLAN, LogPlanner, log_basis, make_planner

MAX_EVIDENCE = 5  # lines quoted per finding (the count is in numbers)
MAX_LINE = 2000  # evidence text is cut here: a runaway line is not useful evidence
OOM_CONTEXT = 80  # lines before an OOM searched for what was running (the traceback)
SLOW_START_S = 120.0


def _ev(file: str, i: int, line: str) -> Evidence:
    return Evidence(file, i + 1, redact_line(line[:MAX_LINE]))


def read_source(path: str, stdin_text: Optional[str] = None) -> tuple[str, str]:
    """(display name, text) of a path, or of stdin for ``-``."""
    if path == "-":
        return "<stdin>", stdin_text or ""
    return str(Path(path)), read_log_text(path)


class _Run:
    """One run's lines (cleaned) and what the start-up reader found in them."""

    def __init__(self, file: str, lines: list[str], start: int, end: int, options: "PlanOptions") -> None:
        self.file, self.lines, self.start, self.end = file, lines, start, end
        self.log: StartupLog = parse_startup_log("\n".join(lines[start:end]), file)
        self.args: dict[str, Any] = dict(self.log.args)
        self.collect: list[str] = []
        self.options = options
        self._planner: Optional[tuple[Optional[LogPlanner], str]] = None
        self.engine_hint: Optional[str] = None  # V0 when only a V0 wording shows the engine
        self.sampling: dict[str, int] = {}  # SamplingParams seen in request lines: lines, n_gt_1, logprobs

    def util(self) -> Optional[float]:
        u = self.args.get("gpu_memory_utilization", self.log.gpu_memory_utilization)
        return float(u) if isinstance(u, (int, float)) else None

    def planner(self, max_len: Optional[int] = None) -> tuple[Optional[LogPlanner], str]:
        """(planner, "") or (None, why not); built once per run, for the first finding that needs it."""
        if self._planner is None:
            self._planner = make_planner(self.log, self.args, model=self.options.model,
                                         vllm_version=self.options.vllm_version, engine=self.engine_hint,
                                         max_model_len=max_len, device=self.device(), gpu=self.options.gpu,
                                         gpu_total_bytes=self.oom_gpu_total())
        return self._planner

    def oom_gpu_total(self) -> Optional[int]:
        """The GPU's size as a CUDA OOM line in this run states it ("total capacity of 79.19 GiB")."""
        for line in self.lines[self.start:self.end]:
            m = sig.OOM_DETAIL.search(line) if "total capacity" in line else None
            if m:
                return int(sig.to_gib(sig.num(m.group("total")), m.group("total_unit")) * (1 << 30))
        return None

    def device(self) -> Optional[str]:
        text = "\n".join(self.lines[self.start:self.end])
        return "cpu" if sig.CPU_KV.search(text) else None

    def basis(self) -> Optional[str]:
        if self._planner is None:
            return None
        p, why = self._planner
        return f"{BASIS_PLAN}: {p.label}" if p is not None else log_basis(why)


class PlanOptions:
    """What the command line adds to the log for the planner: the model and the vLLM version."""

    def __init__(self, model: Optional[str] = None, vllm_version: Optional[str] = None,
                 gpu: Optional[str] = None) -> None:
        self.model, self.vllm_version, self.gpu = model, vllm_version, gpu


def diagnose(sources: list[tuple[str, str]], coverage: fx.Coverage = None, model: Optional[str] = None,
             vllm_version: Optional[str] = None, gpu: Optional[str] = None) -> DoctorReport:
    """Findings for every run in ``sources`` ((name, text) pairs). ``model`` (id, alias, config.json
    or folder) and ``vllm_version`` feed the planner where the log does not name them; a bad
    ``model`` raises UsageError (kvplan.models.load_model)."""
    options = PlanOptions(model, vllm_version, gpu)
    if model:
        from ...models import load_model

        load_model(model)  # fail fast, before any log is read
    if gpu:
        from ...hardware import find_gpu

        find_gpu(gpu)
    runs: list[RunSummary] = []
    findings: list[Finding] = []
    total_lines = 0
    run_collect: list[str] = []
    without: list[str] = []
    for name, text in sources:
        lines = [clean_line(ln) if len(ln) <= 200_000 else "" for ln in text.splitlines()]
        total_lines += len(lines)
        if _is_scrape(lines):
            findings.extend(_scrape_findings(name, text, lines))
            continue
        vllm_lines = any(is_vllm_line(ln) for ln in lines)
        file_runs: list[RunSummary] = []
        file_findings: list[Finding] = []
        for start, end in split_runs(lines):
            run = _Run(name, lines, start, end, options)
            summary, found = _diagnose_run(run, coverage)
            file_runs.append(summary)
            file_findings.extend(found)
            run_collect.extend(run.collect)
        if not vllm_lines and not file_findings and not any(r.stats_lines for r in file_runs):
            without.append(name)  # empty, binary, or another program's log: nothing here is vLLM's
            continue
        runs.extend(file_runs)
        findings.extend(file_findings)
    collect: list[str] = []
    if not any(r.vllm_version or r.kv_cache_tokens or r.available_kv_gib is not None for r in runs):
        collect.append("the whole log from the server's launch (the start-up lines name the version, the flags and the "
                       "KV cache size); with Docker: docker logs CONTAINER > vllm.log 2>&1")
    if any(r.stats_lines and r.engine == "V1" for r in runs) and not any(f.id == "preemption" for f in findings):
        # vLLM 0.32's V1 stats line resets its preemption count before printing it (measured on the
        # CPU build: a burst with 2 preemptions logged none), so the log cannot rule them out.
        collect.append("a /metrics scrape next to the log (curl -s URL/metrics > metrics.txt; kvplan doctor LOG "
                       "metrics.txt): V1 stats lines may omit preemptions; vllm:num_preemptions_total has them")
    if not findings and not any(r.stats_lines for r in runs):
        collect.append("a log covering traffic (vLLM prints throughput, running/waiting and KV usage every 10 s), "
                       "or watch the live server: kvplan watch URL")
    if not any(f.id == "request_too_long" for f in findings):
        collect.extend(run_collect)
    return DoctorReport(tuple(n for n, _ in sources), tuple(runs), tuple(findings), tuple(collect), total_lines,
                        no_vllm_lines=tuple(without))


def _is_scrape(lines: list[str]) -> bool:
    """A Prometheus text scrape of vLLM (``curl URL/metrics``), not a log."""
    return any(ln.startswith("# TYPE vllm:") for ln in lines[:5000])


def _scrape_findings(name: str, text: str, lines: list[str]) -> list[Finding]:
    """What a /metrics scrape adds to the logs: the lifetime preemption counter (the project's one
    Prometheus parser reads it; the evidence is the counter's sample lines)."""
    from ...bench.metrics import parse_metrics

    snap = parse_metrics(text)
    total = snap.get("preemptions")
    if not total:
        return []
    metric = snap.resolve("preemptions")
    idx = [i for i, ln in enumerate(lines) if ln.startswith(metric + "{") or ln.startswith(metric + " ")]
    kv = snap.get("kv_cache_usage")
    ev = tuple(_ev(name, i, lines[i]) for i in idx[:MAX_EVIDENCE])
    return [Finding("preemption", "warning", f"{int(total)} preemption(s) since the server started (from /metrics)", ev,
                    (("preemptions", int(total)), ("source", "metrics"), ("kv_cache_usage_now", kv),
                     ("requests_running_now", snap.get("requests_running"))),
                    fx.preemption(None, {}, None, None, "a /metrics scrape names no flags; pass the server log too"))]


def _diagnose_run(run: _Run, coverage: fx.Coverage) -> tuple[RunSummary, list[Finding]]:
    found: list[Finding] = []
    hits: dict[str, list[tuple[int, Any]]] = {}
    stats = {"running": [], "waiting": [], "kv": [], "preemptions": [], "swapped": []}
    stat_rows: list[tr.StatsLine] = []
    sampling = {"lines": 0, "n_gt_1": 0, "logprobs": 0}  # request lines' SamplingParams (evidence for OOM fixes)
    warnings = errors = stat_lines = 0
    phases: dict[str, tuple[float, int]] = {}
    for i in range(run.start, run.end):
        line = run.lines[i]
        if not line:
            continue
        if sig.WARNING.search(line):
            warnings += 1
        if sig.ERROR.search(line):
            errors += 1
        for key, pattern in (("kv_v1", sig.KV_TOO_SMALL_V1), ("kv_v0", sig.KV_TOO_SMALL_V0), ("no_blocks", sig.NO_BLOCKS),
                             ("negative_kv", sig.NEGATIVE_KV), ("free", sig.FREE_MEMORY), ("oom", sig.OOM),
                             ("preempt_v0", sig.PREEMPT_V0), ("http_400", sig.HTTP_400),
                             ("batch_below_len", sig.SCHED_BATCH_BELOW_LEN), ("batch_below_seqs", sig.SCHED_BATCH_BELOW_SEQS),
                             ("block_choice", sig.BLOCK_SIZE_CHOICE), ("block_kernel", sig.NO_COMMON_BLOCK_SIZE)):
            m = pattern.search(line)
            if m:
                hits.setdefault(key, []).append((i, m))
        for key, m in serve_flags.scan(line):
            hits.setdefault(key, []).append((i, m))
        for pattern in sig.TOO_LONG:
            m = pattern.search(line)
            if m:
                hits.setdefault("too_long", []).append((i, m))
                break
        for pattern in sig.TP_NOT_DIVISIBLE:
            m = pattern.search(line)
            if m:
                hits.setdefault("tp", []).append((i, m))
                break
        for phase, pattern in sig.SLOW_PHASES:
            m = pattern.search(line)
            if m:
                phases[phase] = (max(phases.get(phase, (0.0, i))[0], sig.num(m.group("s")) or 0.0), i)
        m = sig.STATS.search(line)
        if m:
            stat_lines += 1
            stats["running"].append(int(sig.num(m.group("running"))))
            row: dict[str, Any] = {}
            for key, pat in (("waiting", sig.STATS_WAITING), ("kv", sig.STATS_KV), ("preemptions", sig.STATS_PREEMPT),
                             ("swapped", sig.STATS_SWAPPED)):
                mm = pat.search(line)
                if mm:
                    stats[key].append((sig.num(mm.group(1)), i))
                    row[key] = sig.num(mm.group(1))
            stat_rows.append(tr.StatsLine(i, line_time(line), int(sig.num(m.group("running"))),
                                          None if row.get("waiting") is None else int(row["waiting"]), row.get("kv"),
                                          sig.num(m.group("prompt")), sig.num(m.group("gen"))))
        if "SamplingParams(" in line:
            sampling["lines"] += 1
            mn = sig.SAMPLING_N.search(line)
            if mn and (int(mn.group("n")) > 1 or (mn.group("best_of") not in (None, "None", "1"))):
                sampling["n_gt_1"] += 1
            ml = sig.SAMPLING_LOGPROBS.search(line)
            if ml and ml.group("logprobs") != "None":
                sampling["logprobs"] += 1
    run.sampling = sampling
    log, args = run.log, run.args
    if log.engine is None and (hits.get("kv_v0") or hits.get("preempt_v0") or log.num_gpu_blocks is not None
                               or stats["swapped"]):
        run.engine_hint = "V0"  # only V0 prints these; V0 logs rarely name their version
    # The KV figures the fixes use: vLLM's own estimate first, else its token count.
    for i, m in hits.get("kv_v1", [])[:1]:
        max_len, needed, avail = int(sig.num(m.group("max_len"))), sig.num(m.group("needed")), sig.num(m.group("available"))
        est = sig.num(m.group("estimate"))
        if est is None and needed and avail is not None and needed > 0:
            est = max_len * avail / needed
        nums = (("max_model_len", max_len), ("kv_needed_gib", needed), ("kv_available_gib", avail),
                ("estimated_max_model_len", int(est) if est is not None else None))
        planner, why = run.planner(max_len)
        found.append(Finding("kv_cache_too_small_for_max_model_len", "error",
                             f"one {max_len:,}-token request needs {needed} GiB of KV cache, {avail} GiB available",
                             _evs(run, [i]), nums,
                             fx.kv_too_small(max_len, est, args, run.util(), log.total_gpu_memory_gib, avail, coverage,
                                             planner, why)
                             if (est and est > 0) or planner is not None else (),
                             () if est else ("the 'Available KV cache memory' line and the GPU's total memory",)))
    for i, m in hits.get("kv_v0", [])[:1]:
        max_len, tokens = int(sig.num(m.group("max_len"))), int(sig.num(m.group("tokens")))
        avail = min(log.available_kv_gib) if log.available_kv_gib else None
        planner, why = run.planner(max_len)
        found.append(Finding("kv_cache_too_small_for_max_model_len", "error",
                             f"max_model_len {max_len:,} > the {tokens:,} tokens the KV cache holds", _evs(run, [i]),
                             (("max_model_len", max_len), ("kv_cache_tokens", tokens), ("kv_available_gib", avail)),
                             fx.kv_too_small(max_len, tokens, args, run.util(), log.total_gpu_memory_gib, avail, coverage,
                                             planner, why)))
    no_blocks = hits.get("no_blocks", []) + hits.get("negative_kv", [])
    if no_blocks:
        idx = sorted(i for i, _ in no_blocks)
        avail = min(log.available_kv_gib) if log.available_kv_gib else None
        found.append(Finding("no_memory_for_cache_blocks", "error",
                             "no memory left for the KV cache after weights, activations and graphs", _evs(run, idx),
                             (("kv_available_gib", avail), ("weights_gib", log.model_loading_gib),
                              ("total_gpu_memory_gib", log.total_gpu_memory_gib), ("gpu_memory_utilization", run.util())),
                             fx.no_blocks(avail, log.model_loading_gib, run.util(), log.total_gpu_memory_gib, args,
                                          *run.planner()),
                             () if log.model_loading_gib else ("the 'Model loading took' line (weights per GPU)",)))
    for i, m in hits.get("free", [])[:1]:
        free, total = sig.num(m.group("free")), sig.num(m.group("total"))
        util, req = sig.num(m.group("util")), sig.num(m.group("requested"))
        found.append(Finding("insufficient_free_memory", "error",
                             f"only {free} of {total} GiB free at start-up; gpu_memory_utilization {util} wants {req} GiB",
                             _evs(run, [i]), (("free_gib", free), ("total_gib", total), ("gpu_memory_utilization", util),
                                              ("requested_gib", req), ("used_by_others_gib", round(total - free, 2))),
                             fx.free_memory(free, total, util, req), ("nvidia-smi (which process holds the memory)",)))
    found.extend(serve_flags.findings(hits, args, lambda idx: _evs(run, idx)))
    if hits.get("oom"):
        found.append(_oom_finding(run, [i for i, _ in hits["oom"]]))
    found.extend(_preemption(run, hits.get("preempt_v0", []), stats))
    if hits.get("too_long"):
        items = hits["too_long"]
        limit = max(int(sig.num(m.group("limit"))) for _, m in items)
        worst = max(int(sig.num(m.group("requested"))) for _, m in items)
        found.append(Finding("request_too_long", "warning", f"{len(items)} request(s) over max_model_len {limit:,} "
                             f"(longest {worst:,} tokens), rejected with HTTP 400", _evs(run, [i for i, _ in items]),
                             (("rejected", len(items)), ("max_model_len", limit), ("longest_requested", worst)),
                             fx.too_long(limit, worst, log.kv_cache_tokens, coverage, *run.planner(limit))))
    for i, m in hits.get("tp", [])[:1]:
        value, tp = int(sig.num(m.group("value"))), int(sig.num(m.group("tp")))
        what = (m.group("what") or "a dimension").strip()
        found.append(Finding("tp_not_divisible", "error", f"{what} ({value}) not divisible by tensor parallel size {tp}",
                             _evs(run, [i]), (("value", value), ("tensor_parallel_size", tp), ("what", what)),
                             fx.tp_divisible(value, tp)))
    found.extend(_config_refused(run, hits))
    if hits.get("http_400") and not hits.get("too_long"):
        n400 = len(hits["http_400"])
        run.collect.append(f"{n400} request(s) answered HTTP 400 ({run.file}:{hits['http_400'][0][0] + 1}); the server log "
                           "does not say why: pass the response body (or the client's log) to kvplan doctor, e.g. a "
                           "prompt longer than max_model_len")
    found.extend(_slow_start(run, phases))
    found.extend(_queueing(run, stat_rows, coverage))
    kv = [v for v, _ in stats["kv"]]
    summary = RunSummary(
        run.file, run.start + 1, run.end, log.vllm_version, log.engine, log.model,
        tuple(sorted((str(k), v) for k, v in args.items())), log.max_model_len,
        min(log.available_kv_gib) if log.available_kv_gib else None, log.kv_cache_tokens, log.num_gpu_blocks,
        log.max_concurrency, log.model_loading_gib, (max(kv) / 100.0) if kv else None,
        max(stats["running"]) if stats["running"] else None,
        int(max(v for v, _ in stats["waiting"])) if stats["waiting"] else None, stat_lines, warnings, errors,
        run.basis())
    return summary, found


def _evs(run: _Run, idx: list[int]) -> tuple[Evidence, ...]:
    return tuple(_ev(run.file, i, run.lines[i]) for i in idx[:MAX_EVIDENCE])


def _oom_finding(run: _Run, idx: list[int]) -> Finding:
    first = idx[0]
    lo = max(run.start, first - OOM_CONTEXT)
    # The traceback that ends in the OOM names the phase; only without one do the log lines
    # around it (e.g. "Capturing cudagraphs ...") decide. A graph capture that finished before
    # a sampler OOM must not make it a graph OOM.
    tb = next((j for j in range(first, lo - 1, -1) if "Traceback (most recent call last)" in run.lines[j]), None)
    frames = [ln for ln in run.lines[lo:first + 1] if 'File "' in ln]
    if tb is not None:
        context = run.lines[tb:first + 1]
    elif frames:
        context = frames + [run.lines[first]]
    else:
        context = run.lines[lo:min(run.end, idx[-1] + 5)]
    text = "\n".join(context)
    flag_phase = serve_flags.oom_phase(text)
    if sig.OOM_CUDAGRAPH.search(text):
        kind = "cudagraph"
    elif flag_phase is not None:
        kind = flag_phase
    elif sig.OOM_SAMPLING.search(text):
        kind = "sampling"
    elif sig.OOM_PREFILL.search(text):
        kind = "prefill"
    else:
        kind = "unknown"
    nums: list[tuple[str, Any]] = [("phase", kind), ("oom_lines", len(idx))]
    for i in idx:
        m = sig.OOM_DETAIL.search(run.lines[i])
        if m:
            nums += [("tried_to_allocate_gib", round(sig.to_gib(sig.num(m.group("alloc")), m.group("alloc_unit")), 3)),
                     ("gpu_total_gib", round(sig.to_gib(sig.num(m.group("total")), m.group("total_unit")), 2)),
                     ("gpu_free_gib", round(sig.to_gib(sig.num(m.group("free")), m.group("free_unit")), 3))]
            break
    fid = "cuda_oom_cudagraph" if kind == "cudagraph" else "cuda_oom_runtime"
    where = {"cudagraph": "while capturing CUDA graphs", "sampling": "in the sampler (n / best_of / logprobs)",
             "lora": "while building LoRA's adapter buffers (--max-loras × --max-lora-rank)",
             "drafter": "in the speculative-decoding drafter (its weights, dummy run or rejection sampler)",
             "prefill": "in a prefill / profiling batch (max_num_batched_tokens)", "unknown": "(phase not in the log)"}[kind]
    collect = ("the full traceback above the OutOfMemoryError (it names the phase)",) if kind == "unknown" else ()
    fixes = fx.oom(kind, run.args, run.util(), run.planner()[0], run.sampling)
    if flag_phase is not None and kind == flag_phase:
        fixes = tuple(serve_flags.oom_fixes(kind, run.args)) + fixes
    return Finding(fid, "error", f"CUDA out of memory {where}", _evs(run, idx), tuple(nums), fixes, collect)


def _preemption(run: _Run, v0: list[tuple[int, Any]], stats: dict[str, list]) -> list[Finding]:
    v1 = [(v, i) for v, i in stats["preemptions"] if v and v > 0]
    if not v0 and not v1:
        return []
    if v0:
        total = max(int(sig.num(m.group("total"))) for _, m in v0)
        idx = [i for i, _ in v0]
        mode = v0[0][1].group("mode")
    else:
        total = int(sum(v for v, _ in v1))  # V1 prints preemptions per 10-s interval
        idx = [i for _, i in v1]
        mode = "RECOMPUTE"
    peak_running = max(stats["running"]) if stats["running"] else None
    kv = [v for v, _ in stats["kv"]]
    return [Finding("preemption", "warning", f"{total} preemption(s): the KV cache ran out mid-generation ({mode})",
                    _evs(run, idx), (("preemptions", total), ("lines", len(idx)), ("mode", mode),
                                     ("peak_running", peak_running), ("peak_kv_usage_pct", max(kv) if kv else None),
                                     ("max_concurrency", run.log.max_concurrency)),
                    fx.preemption(run.log.max_concurrency, run.args, peak_running, *run.planner(), run.util()))]


def _slow_start(run: _Run, phases: dict[str, tuple[float, int]]) -> list[Finding]:
    """Start-up phases, each second counted once: an outer phase (vLLM's "Model loading took",
    "init engine ... took") replaces the phases it contains (signatures.PHASE_PARTS)."""
    if not phases:
        return []
    secs = {k: s for k, (s, _) in phases.items()}
    total = 0.0
    inner = {p for parts in sig.PHASE_PARTS.values() for p in parts}
    for outer, parts in sig.PHASE_PARTS.items():
        total += secs[outer] if outer in secs else sum(secs.get(p, 0.0) for p in parts)
    total += sum(s for k, s in secs.items() if k not in inner and k not in sig.PHASE_PARTS)
    stamps = [t for t in (line_time(run.lines[i]) for i in range(run.start, run.end) if run.lines[i]) if t is not None]
    span = stamps[-1] - stamps[0] if len(stamps) > 1 and stamps[-1] > stamps[0] else None
    if not (total > SLOW_START_S or any(s > 60 for s in secs.values())):
        return []
    within = {p: outer for outer, parts in sig.PHASE_PARTS.items() if outer in secs for p in parts if p in secs}
    nums: list[tuple[str, Any]] = [(f"{k}_s", round(s, 2)) for k, s in secs.items()]
    nums += [(f"{p}_within", outer) for p, outer in within.items()]
    nums += [("total_s", round(total, 2)), ("log_span_s", round(span, 1) if span is not None else None)]
    title = f"start-up phases took {total:.0f} s" + (f" (the log's timestamps span {span:.0f} s)" if span else "")
    return [Finding("slow_start", "info", title, _evs(run, sorted(i for _, i in phases.values())), tuple(nums),
                    fx.slow_start(secs))]


def _queueing(run: _Run, rows: list[tr.StatsLine], coverage: fx.Coverage) -> list[Finding]:
    """Slow responses from the stats lines: a queue that persists (requests_queued) and a full KV
    cache with requests waiting (kv_cache_full_with_waiting), with numbers and fixes."""
    queue = tr.longest_queue(rows)
    if queue is None:
        return []
    lengths = getattr(coverage, "means", None) if coverage is not None else None
    p99 = getattr(coverage, "p99", None) if coverage is not None else None
    replicas = int(run.args.get("data_parallel_size") or 1)
    planner, why = run.planner()
    seqs = planner.baseline.flags.max_num_seqs if planner is not None else run.args.get("max_num_seqs")
    kv_tokens = planner.baseline.kv.kv_cache_tokens if planner is not None else run.log.kv_cache_tokens
    growth, span = queue.growth_per_s, queue.seconds
    done = tr.completion_rate(queue, lengths)
    kv_peak = queue.peak_kv_pct
    limit = ("kv_cache" if kv_peak is not None and kv_peak >= tr.KV_FULL_PCT else
             "max_num_seqs" if seqs and queue.peak_running >= tr.SEQS_CAP_SHARE * seqs else "throughput")
    nums = (("waiting_first", queue.first.waiting), ("waiting_last", queue.last.waiting),
            ("waiting_peak", queue.peak_waiting), ("stats_lines", len(queue.lines)),
            ("window_s", round(span, 1) if span else None),
            ("queue_growth_per_s", round(growth, 2) if growth is not None else None),
            ("running_peak", queue.peak_running), ("max_num_seqs", seqs),
            ("kv_usage_peak_pct", kv_peak), ("prompt_tokens_per_s", round(queue.mean("prompt_tps") or 0, 1)),
            ("generation_tokens_per_s", round(queue.mean("generation_tps") or 0, 1)),
            ("completions_per_s", round(done, 2) if done else None), ("limited_by", limit))
    grew = (f"grew from {queue.first.waiting:,} to {queue.last.waiting:,}" +
            (f" in {span:.0f} s ({growth:+.1f} req/s)" if span and growth is not None else "")
            if (queue.last.waiting or 0) > (queue.first.waiting or 0) else f"peaked at {queue.peak_waiting:,}")
    why_limit = {"kv_cache": f"the KV cache at {kv_peak:.1f} %", "max_num_seqs": f"max_num_seqs {seqs} running",
                 "throughput": "the GPU's throughput"}[limit]
    fixes = [tr.capacity_fix(queue, lengths, replicas)]
    seq_fix = tr.seqs_fix(queue, seqs)
    if seq_fix is not None:
        fixes.append(seq_fix)
    fixes.append(tr.lengths_fix(queue, kv_tokens, lengths, p99))
    collect = () if lengths else ("the request log (kvplan doctor LOG --requests REQUESTS): its mean prompt length turns "
                                  "the prompt throughput into completions/s and a replica count",)
    found = [Finding("requests_queued", "warning",
                     f"requests queued: waiting {grew} over {len(queue.lines)} stats lines, limited by {why_limit}",
                     _evs(run, [queue.first.index, queue.last.index]), nums, fx.ranked(fixes), collect)]
    full = queue.full_lines
    if len(full) >= 2:
        kv_nums = (("kv_usage_peak_pct", kv_peak), ("lines_full_with_waiting", len(full)),
                   ("running_when_full", round(sum(r.running for r in full) / len(full))),
                   ("kv_cache_tokens", kv_tokens), ("threshold_pct", tr.KV_FULL_PCT))
        kv_fix = tr.kv_fixes(planner, why, run.args, run.util())
        kv_fix.append(tr.lengths_fix(queue, kv_tokens, lengths, p99))
        found.append(Finding("kv_cache_full_with_waiting", "warning",
                             f"KV cache ≥ {tr.KV_FULL_PCT:.0f} % full on {len(full)} stats lines while requests waited "
                             f"(peak {kv_peak:.1f} %, {round(sum(r.running for r in full) / len(full))} running): the "
                             "cache, not compute, caps how many run at once",
                             _evs(run, [r.index for r in full]), kv_nums, fx.ranked(kv_fix)))
    return found


def _config_refused(run: _Run, hits: dict) -> list[Finding]:
    """vLLM's config checks (SchedulerConfig._verify_args, the block-size choices / kernels): one
    finding per kind, with vLLM's numbers and the flag changes that pass the check."""
    out = []
    for key in ("batch_below_seqs", "batch_below_len", "block_choice", "block_kernel"):
        for i, m in hits.get(key, [])[:1]:
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            if key == "block_choice":  # the accepted sizes, as vLLM's parser lists them
                listed = re.search(r"choose from ([0-9][0-9, ]*)\)", run.lines[i])
                groups["choices"] = listed.group(1) if listed else ""
            nums = tuple((k, int(sig.num(v)) if k != "choices" else v) for k, v in groups.items())
            title = {"batch_below_seqs": "max_num_batched_tokens below max_num_seqs",
                     "batch_below_len": "max_num_batched_tokens below max_model_len without chunked prefill",
                     "block_choice": "a --block-size vLLM's argument parser does not accept",
                     "block_kernel": "a --block-size no attention kernel supports"}[key]
            out.append(Finding("config_refused", "error", f"vLLM refused its configuration: {title}", _evs(run, [i]),
                               (("check", key), *nums), fx.config_refused(key, groups)))
    return out
