"""The checks that need no server: lengths of the real traffic, the plan, and multi-turn growth.

Each reads a library result (``LengthsResult``, ``PlanResult``) and never recomputes what the
library computed: recommendations, coverage and capacity come from kvplan.workload and
kvplan.memory; fixes are re-planned (see :mod:`.whatif`).
"""
from __future__ import annotations

import math
from typing import Optional

from ..ops.doctor.model import Fix
from .model import CheckResult
from .options import PreflightOptions
from .whatif import plan_effect, plan_fix, priced, replan, what_if_fixes

NO_LOG = "no --requests LOG: the traffic's lengths are unknown"


def _lengths_source(lengths) -> str:
    tok = (lengths.inputs.get("tokenizer") or {}) if isinstance(lengths.inputs, dict) else {}
    cb = ", ".join(f"{k} {v:,}" for k, v in lengths.counted_by.items() if v)
    src = tok.get("source") if isinstance(tok, dict) else None
    out = f"{lengths.records.used:,} requests counted ({cb})"
    if src:
        out += f"; tokenizer {src}"
    if lengths.estimated:
        out += "; some lengths are ESTIMATES (characters per token)"
    return out


def check_max_model_len(plan_result, req, lengths) -> CheckResult:
    title = "max_model_len vs the traffic's lengths"
    if lengths is None:
        # item 1 of the checklist: without the traffic's lengths max_model_len is a guess
        return CheckResult("lengths_max_model_len", "warn", title, plan_result.flags.max_model_len, None, (NO_LOG,),
                           (Fix("--requests LOG", "measures the real prompt + output lengths (kvplan lengths) and "
                                "recommends max_model_len, max_tokens and a history cap", "free", basis="preflight"),))
    from ..workload.finalize import coverage_at

    rec = lengths.recommendation
    L = plan_result.flags.max_model_len
    cov = coverage_at(lengths, L)
    evidence = (rec.max_model_len_reason,
                f"at max_model_len {L:,}: {cov.rejected:,} requests rejected ({cov.rejected_share:.2%}), "
                f"{cov.clamped:,} clamped ({cov.clamped_share:.2%}), {cov.truncated:,} truncated "
                f"({cov.truncated_share:.2%}) of {cov.requests:,} (vLLM {plan_result.vllm_semantics} rules)",
                _lengths_source(lengths))
    threshold = f">= {rec.max_model_len:,} (P{rec.percentile:g} prompt + output budget)" if rec.max_model_len else None
    if rec.max_model_len is None or L >= rec.max_model_len:
        return CheckResult("lengths_max_model_len", "pass", title, L, threshold, evidence)
    fixes = []
    fx = plan_fix(req, f"--max-model-len {rec.max_model_len}", {"max_model_len": rec.max_model_len}, lengths)
    if fx is not None:
        fixes.append(fx)
    return CheckResult("lengths_max_model_len", "fail", title, L, threshold, evidence, tuple(fixes))


def check_max_tokens(lengths, opts: PreflightOptions) -> CheckResult:
    title = "max_tokens vs the observed completions"
    if lengths is None:
        return CheckResult("lengths_max_tokens", "skipped", title, evidence=(NO_LOG,))
    rec = lengths.recommendation
    evidence = [rec.max_tokens_reason]
    threshold = f">= {rec.max_tokens:,} (P{rec.percentile:g} of observed completions)" if rec.max_tokens else None
    if opts.max_tokens is None:
        mt = lengths.max_tokens
        evidence.append(f"clients send their own max_tokens: P99 {mt.p99:,} over {mt.count:,} requests"
                        if mt.count else "the requests carry no max_tokens: vLLM lets them run to max_model_len")
        measured = f"clients' own (P99 {mt.p99:,})" if mt.count else "none sent"
        return CheckResult("lengths_max_tokens", "pass", title, measured, threshold, tuple(evidence))
    if rec.max_tokens is None or opts.max_tokens >= rec.max_tokens:
        return CheckResult("lengths_max_tokens", "pass", title, opts.max_tokens, threshold, tuple(evidence))
    evidence.append(f"--max-tokens {opts.max_tokens:,} is below the recommended {rec.max_tokens:,}: more completions "
                    "stop with finish_reason=length")
    fix = Fix(f"--max-tokens {rec.max_tokens} (in the clients)", rec.max_tokens_reason, "free",
              (("max_tokens", rec.max_tokens),), basis="lengths recommendation")
    return CheckResult("lengths_max_tokens", "warn", title, opts.max_tokens, threshold, tuple(evidence), (fix,))


def check_plan_starts(plan_result, req, lengths) -> CheckResult:
    title = "vLLM starts with these flags"
    s = plan_result.startup
    if s.ok:
        return CheckResult("plan_starts", "pass", title, "starts", "vLLM's admission check",
                           tuple(plan_result.kv.log_lines) + tuple(s.warnings))
    evidence = [f"vLLM would print: {s.error}"]
    fixes: list[Fix] = []
    seen: set[int] = set()
    for length in (s.suggested_max_model_len, s.max_fitting_model_len):
        if length and length > 0 and length not in seen and length != plan_result.flags.max_model_len:
            seen.add(length)
            fx = plan_fix(req, f"--max-model-len {length}", {"max_model_len": length}, lengths)
            if fx is not None and dict(fx.numbers).get("starts"):
                fixes.append(fx)
    fixes += [f for f in what_if_fixes(plan_result, req, lengths) if dict(f.numbers).get("starts")]
    return CheckResult("plan_starts", "fail", title, s.error_kind, "vLLM's admission check", tuple(evidence),
                       tuple(fixes))


def check_plan_memory(plan_result, req, lengths) -> CheckResult:
    """"Peak memory is known and below the budget". vLLM pre-allocates: it profiles its own peak
    (weights, non-torch, activation peak, and from 0.20 the CUDA-graph estimate), then fills the
    rest of ``gpu_memory_utilization × total`` with KV cache. A high share of the GPU is therefore
    the design, not a risk (vLLM's default 0.92 holds ~93% with its CUDA context). What can go
    wrong: memory vLLM allocates after it sized the KV cache (CUDA graphs before 0.20) overflowing
    the GPU, and too little headroom outside the budget for what vLLM never counts (allocator
    fragmentation, NCCL buffers, other processes). Pass: the peak fits the budget and the headroom
    outside it is at least the estimate's error band; warn: the headroom is thinner; fail: the peak
    exceeds the GPU."""
    from ..memory.semantics import semantics

    title = "peak GPU memory is known and within vLLM's budget"
    if plan_result.flags.device == "cpu":
        return CheckResult("plan_memory", "skipped", title, evidence=(
            "--device cpu: vLLM's CPU backend sizes its KV cache from --kv-cache-memory-bytes / "
            "VLLM_CPU_KVCACHE_SPACE, not from a fraction of a GPU",))
    if not plan_result.startup.ok:
        return CheckResult("plan_memory", "skipped", title, evidence=("the plan does not start (plan_starts)",))
    m, f = plan_result.memory, plan_result.flags
    total, budget = m.total_gib_per_gpu, m.requested_gib
    sem = semantics(req.vllm_version, req.engine)
    room = plan_result.headroom  # the one headroom rule (kvplan.memory.result.Headroom), plan's too
    after, inside, outside, peak = room.after_gib, room.inside_gib, room.outside_gib, room.peak_gib
    headroom, band, frac = room.left_gib, room.band_gib, room.fraction
    limit = (total - band) / total if total else 0.0
    # measured and threshold in one unit: the peak as a share of the GPU
    threshold = (f"≤ {limit:.4f} of the GPU: a peak of at most {total - band:.2f} of {total:.2f} GiB, leaving the "
                 f"estimate's error band ({band:.2f} GiB) outside vLLM's budget")
    evidence = [
        f"vLLM's budget: --gpu-memory-utilization {f.gpu_memory_utilization} × {total:.2f} GiB = {budget:.2f} GiB; "
        f"inside it: weights + non-torch + activation peak + CUDA-graph estimate {m.non_kv_gib:.2f} GiB, KV cache "
        f"{m.kv_cache_used_gib:.2f} GiB (pre-allocated: vLLM fills the budget by design)",
        f"outside it: CUDA context {outside:.2f} GiB" + (f", CUDA graphs captured after the KV cache was sized "
                                                         f"{after:.2f} GiB (vLLM {sem.label} does not subtract them)"
                                                         if after else "")
        + f"; peak {peak:.2f} GiB = {frac:.1%} of the GPU, {headroom:.2f} GiB left",
        f"memory source: {m.source}" + (" (vLLM profiles the real peak at start-up and sizes the KV cache to fit, so "
                                        "an error in the estimate changes the KV cache, not the peak)"
                                        if m.source == "estimate" else ""),
        f"in production: `kvplan alerts --gpu-memory-utilization {f.gpu_memory_utilization}` (and preflight's "
        "--output-dir) writes GpuMemoryAboveVllmBudget (DCGM's used memory above this budget by a margin) and "
        "GpuMemoryHeadroomLow",
    ]
    if inside <= budget + 1e-6 and room.ok:
        return CheckResult("plan_memory", "pass", title, round(frac, 4), threshold, tuple(evidence))
    status = "fail" if headroom < 0 else "warn"
    evidence.append(f"{headroom:.2f} GiB outside the budget " + ("is negative: the GPU runs out of memory (CUDA OOM "
                    "after the KV cache is allocated)" if headroom < 0 else f"is below the {band:.2f} GiB band: "
                    "fragmentation, NCCL buffers or another process can push the GPU into OOM"))
    fixes = []
    u = math.floor(f.gpu_memory_utilization * 100 - 1e-6) / 100
    while u >= 0.5:  # the highest utilisation whose peak leaves the band outside the budget
        r = replan(req, gpu_memory_utilization=u)
        if r is not None and r.startup.ok and r.headroom is not None and r.headroom.ok:
            effect, nums = plan_effect(r, lengths)
            category, price = priced(plan_result, r)
            fixes.append(Fix(f"--gpu-memory-utilization {u:.2f}", effect, category, nums, basis="plan", price=price))
            break
        u = round(u - 0.01, 2)
    if after and not f.enforce_eager:
        fx = plan_fix(req, "--enforce-eager", {"enforce_eager": True}, lengths, cost="throughput")
        if fx is not None:
            fixes.append(fx)
    return CheckResult("plan_memory", status, title, round(frac, 4), threshold, tuple(evidence), tuple(fixes))


def check_concurrency(plan_result, req, lengths, traffic, needed: Optional[float], needed_source: str,
                      load_factor: float, simulated: bool) -> CheckResult:
    title = "requests in flight fit max_num_seqs and the KV cache"
    if not plan_result.startup.ok:
        return CheckResult("plan_concurrency", "skipped", title, evidence=("the plan does not start",))
    kv_fit = traffic.requests_fit_at_mix if traffic is not None else plan_result.kv.max_concurrency
    kv_what = ("requests of the log's length mix the KV cache holds" if traffic is not None else
               f"vLLM's maximum concurrency at {plan_result.flags.max_model_len:,} tokens (no request log)")
    mns = plan_result.flags.max_num_seqs
    available = min(float(mns), kv_fit)
    threshold = f"<= {available:,.1f} (min of max_num_seqs {mns} and {kv_fit:,.1f} {kv_what})"
    if needed is None:
        return CheckResult("plan_concurrency", "skipped", title, None, threshold,
                           (needed_source or "no --target-qps: the concurrency needed is unknown",))
    evidence = [f"needed {needed:,.1f} = {needed_source} (Little's law)",
                f"available: max_num_seqs {mns}; KV cache: {kv_fit:,.1f} {kv_what}"]
    at_target = needed / load_factor
    if needed <= available:
        return CheckResult("plan_concurrency", "pass", title, round(needed, 2), threshold, tuple(evidence),
                           simulated=simulated)
    status = "fail" if at_target > available else "warn"
    if status == "warn":
        evidence.append(f"at the target QPS ({needed:,.1f} / {load_factor:g} = {at_target:,.1f}) it fits: "
                        f"the {load_factor:g}x headroom does not")
    fixes: list[Fix] = []
    want = math.ceil(needed)
    if mns < want <= kv_fit:
        fx = plan_fix(req, f"--max-num-seqs {want}", {"max_num_seqs": want}, lengths, cost="free")
        if fx is not None:
            fixes.append(fx)
    if kv_fit < needed:
        fixes += what_if_fixes(plan_result, req, lengths, within_budget=True)
    dp = plan_result.parallel.data_parallel_size
    replicas = max(dp + 1, math.ceil(dp * needed / available)) if available > 0 else dp * 2
    fx = plan_fix(req, f"--data-parallel-size {replicas}", {"data_parallel_size": replicas}, lengths, cost="hardware",
                  prefix=f"each of {replicas} replicas carries {needed * dp / replicas:,.1f} requests in flight; ")
    if fx is not None:
        fixes.append(fx)
    return CheckResult("plan_concurrency", status, title, round(needed, 2), threshold, tuple(evidence), tuple(fixes),
                       simulated=simulated)


def _room(plan_result, lengths, opts: PreflightOptions) -> tuple[int, int]:
    budget = opts.max_tokens or lengths.recommendation.max_tokens or 0
    return plan_result.flags.max_model_len - budget, budget


def check_history(plan_result, lengths, opts: PreflightOptions) -> CheckResult:
    title = "multi-turn history capped to fit max_model_len"
    if lengths is None:
        return CheckResult("history_cap", "skipped", title, evidence=(NO_LOG,))
    turns = [t for t in lengths.per_turn if t.count]
    if len(turns) <= 1:
        return CheckResult("history_cap", "skipped", title, evidence=("the log has no multi-turn conversations",))
    L = plan_result.flags.max_model_len
    room, budget = _room(plan_result, lengths, opts)
    growth = ", ".join(f"turn {t.turn}{'+' if t.open_ended else ''}: P99 {t.p99:,}" for t in turns[:8])
    evidence = [f"prompt tokens by turn (P99): {growth}" + (" …" if len(turns) > 8 else ""),
                f"room for the prompt: max_model_len {L:,} − max_tokens {budget:,} = {room:,} tokens",
                lengths.recommendation.history_reason]
    if lengths.conversations is not None:
        c = lengths.conversations
        evidence.append(f"{c.count:,} conversations, P99 {c.turns.p99} turns, longest context P99 {c.max_context.p99:,} "
                        f"tokens")
    threshold = f"every turn's P99 prompt <= {room:,} tokens"
    # the largest H such that every turn up to H fits: what a cap of H turns keeps within the room
    fit_turns = 0
    for t in turns:
        if t.p99 > room or t.open_ended:
            break
        fit_turns = t.turn
    first_over = next((t for t in turns if t.p99 > room), None)
    tok = (lengths.inputs.get("tokenizer") or {}) if isinstance(lengths.inputs, dict) else {}
    tok_flag = (f" --tokenizer {tok['source']}" if isinstance(tok, dict) and tok.get("kind") != "estimate"
                and tok.get("source") else "")
    hist_tokens_fix = Fix(f"cap history at {room:,} prompt tokens (kvplan trim --budget {L} --reserve-output {budget}"
                          f"{tok_flag})",
                          f"every request's prompt + max_tokens fits {L:,}; whole turns are dropped oldest first, "
                          "the system prompt is kept", "free", (("history_tokens", room),),
                          basis="per-turn statistics")
    turns_fix = Fix(f"--history-turns {fit_turns} (keep the system prompt and the last {fit_turns} turns)",
                    f"the P99 prompt of every turn up to {fit_turns} fits {room:,} tokens (per-turn table)", "free",
                    (("history_turns", fit_turns),), basis="per-turn statistics") if fit_turns >= 1 else None
    fixes = tuple(f for f in (hist_tokens_fix, turns_fix) if f is not None)
    if opts.history_tokens is not None:
        measured = f"cap {opts.history_tokens:,} tokens"
        ok = opts.history_tokens <= room
        return CheckResult("history_cap", "pass" if ok else "fail", title, measured, f"cap <= {room:,} tokens",
                           tuple(evidence), () if ok else fixes)
    if opts.history_turns is not None:
        capped = max((t.p99 for t in turns if t.turn <= opts.history_turns), default=0)
        measured = f"cap {opts.history_turns} turns (P99 prompt up to {capped:,})"
        ok = capped <= room
        if not ok:
            evidence.append(f"with {opts.history_turns} turns kept, the P99 prompt reaches {capped:,} tokens")
        return CheckResult("history_cap", "pass" if ok else "fail", title, measured, threshold, tuple(evidence),
                           () if ok else fixes)
    if first_over is None:
        return CheckResult("history_cap", "pass", title, "no cap needed", threshold,
                           tuple(evidence + ["every turn's P99 prompt fits without a cap"]))
    evidence.insert(0, f"no history cap: at turn {first_over.turn} the P99 prompt is {first_over.p99:,} tokens > "
                       f"{room:,}; such requests are rejected or clamped (give --history-turns/--history-tokens "
                       "if the application caps history)")
    return CheckResult("history_cap", "fail", title, f"no cap; turn {first_over.turn} P99 {first_over.p99:,}",
                       threshold, tuple(evidence), fixes)
