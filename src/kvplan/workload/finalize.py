"""From the accumulated histograms to the recommendations, each with its reasoning."""
from __future__ import annotations

from typing import Optional

from .accumulate import TURN_CAP, Accumulator, concurrency_stats, coverage_counts
from .result import (
    Arrivals,
    BlockWasteRow,
    Conversations,
    CoverageRow,
    FileCounts,
    IssueInfo,
    LengthsResult,
    Recommendation,
    RecordCounts,
    TurnRow,
)
from .stats import Dist, Hist, Percentiles, empty_summary, round_up
from .trim import trim_messages

WASTE_BLOCK_SIZES = (16, 32, 64, 128)
GIB = 1 << 30


def _share(n: int, total: int) -> float:
    return round(n / total, 6) if total else 0.0


def _summary(d: Dist) -> Percentiles:
    return d.summary() if d.count else empty_summary()


def recommend_max_tokens(output: Dist, finish: dict, pct: float, override: Optional[int],
                         budgets: Dist) -> tuple[Optional[int], str]:
    length_hits = finish.get("length", 0)
    finished = sum(finish.values())
    hit = (f" {length_hits:,} of {finished:,} responses ({_share(length_hits, finished):.1%}) stopped at their cap "
           "(finish_reason=length): the observed lengths are censored there, so the real need is higher; raise "
           "the cap and measure again." if length_hits and finished and length_hits / finished > 0.005 else "")
    if output.count:
        q = output.quantile(pct)
        # A round number (multiple of 64) just above the percentile: an operator sets it once.
        rec = max(64, round_up(q, 64))
        over = output.count_gt(rec)
        reason = (f"P{pct:g} of {output.count:,} observed completions is {q:,} tokens; {rec:,} (rounded up to a multiple "
                  f"of 64) would have cut {over:,} responses ({_share(over, output.count):.2%}).{hit}")
        if override is not None:
            reason += f" The analysis uses --max-tokens {override:,} as every request's budget."
        return rec, reason
    if override is not None:
        return override, f"--max-tokens {override:,} (no completion lengths were logged to check it against)."
    if budgets.count:
        q = budgets.quantile(pct)
        return q, (f"no completion lengths were logged; P{pct:g} of the budgets requests asked for is {q:,} tokens."
                   f"{hit}")
    return None, "no completion lengths and no max_tokens in the logs: give --max-tokens N (your output budget)."


def _coverage(acc: Accumulator, dists: dict, lengths: list[tuple[int, str]]) -> tuple[CoverageRow, ...]:
    total = dists["total"].count
    rows = []
    for L, label in lengths:
        rej, clamp, trunc = coverage_counts(dists["total"], dists["reject"], dists["observed"], dists["min_ac"], L)
        fits = total - rej - clamp
        rows.append(CoverageRow(L, total, rej, clamp, trunc, fits, _share(rej, total), _share(clamp, total),
                                _share(trunc, total), _share(fits, total), label))
    return tuple(rows)


def _candidate_lengths(total: Dist, rec: Optional[int], block: int) -> list[tuple[int, str]]:
    labels: dict[int, list[str]] = {}
    if rec:
        labels.setdefault(rec, []).append("recommended")
    for name, q in (("P50", 50), ("P90", 90), ("P95", 95), ("P99", 99), ("P99.9", 99.9), ("max", 100)):
        labels.setdefault(round_up(total.quantile(q), block), []).append(name)
    top = max(labels) if labels else 0
    p = 1024
    while p < top * 2 and p <= 1 << 21:
        labels.setdefault(p, [])
        p *= 2
    return [(L, "/".join(v)) for L, v in sorted(labels.items()) if L > 0]


def _plan_note(plan) -> Optional[str]:
    """Why the block-waste GiB column is empty: the plan behind it does not start."""
    if plan is None or plan.startup.ok:
        return None
    why = (plan.startup.error or plan.startup.error_kind or "it does not start").split(". ")[0]
    fit = plan.startup.fits_with
    layout = (f"; it starts with TP {fit.tensor_parallel_size} × PP {fit.pipeline_parallel_size} "
              f"(--tensor-parallel-size {fit.tensor_parallel_size}" + (f" and PP {fit.pipeline_parallel_size}"
                                                                       if fit.pipeline_parallel_size > 1 else "") + ")"
              if fit is not None and fit.found else "")
    return (f"Block waste per GPU at full cache: none, the plan for {plan.model.id} on {plan.flags.gpu} "
            f"(TP {plan.parallel.tensor_parallel_size}) does not start ({why}){layout}; give --gpu and "
            "--tensor-parallel-size for the deployment.")


def _block_waste(final: Dist, plan) -> tuple[BlockWasteRow, ...]:
    rows = []
    if not final.count:
        return ()
    mean_len = final.mean
    for B in WASTE_BLOCK_SIZES:
        alloc = final.mean_of(lambda v, B=B: -(-v // B) * B)
        waste = alloc - mean_len
        share = waste / alloc if alloc else 0.0
        per_req = gib_full = None
        if plan is not None:
            per_req = int(round(waste * plan.kv.bytes_per_token_total))
            if plan.startup.ok:  # a plan that does not start has no cache to fill (_plan_note says why)
                gib_full = round(share * plan.kv.num_gpu_blocks * plan.kv.bytes_per_block / GIB, 4)
        rows.append(BlockWasteRow(B, round(mean_len, 2), round(alloc, 2), round(waste, 2), round(share, 6), per_req,
                                  gib_full))
    return tuple(rows)


def _history(acc: Accumulator, L: int, pct: float, tok, est, budget: Optional[int]):
    """How many turns of history to keep so that the P-th percentile request fits L.

    From the growth curve: the largest H such that, for every turn count up to H, the P-th
    percentile prompt plus the output budget fits L. Then checked exactly: the longest
    multi-turn requests that do not fit are trimmed to whole turns with the real template, and
    the share of them that fit when keeping H turns is reported.
    """
    limit = L - (budget or 0)
    if limit < 1:
        return None, f"max_tokens {budget:,} leaves no room for a prompt in {L:,} tokens."
    H, last = 0, 0
    for k in sorted(acc.turns):
        if k != H + 1 or k >= TURN_CAP:
            break
        last = k
        if acc.turns[k].freeze().quantile(pct) > limit:
            break
        H = k
    top = max(acc.turns) if acc.turns else 0
    if H == 0:
        return None, (f"even first turns exceed {limit:,} prompt tokens at P{pct:g}: trimming history cannot help; "
                      "raise max_model_len or shorten the system prompt.")
    counter = tok if tok is not None else est
    over = [(total, r, b) for total, _, r, b in acc.history if total > L]
    check = ""
    if over and counter is not None:
        fit = hopeless = 0
        for _, r, b in over:
            res = trim_messages(r.messages, L, counter, reserve_output=b if b is not None else (budget or 0),
                                tools=r.tools, max_turns=H, **(r.template_kwargs or {}))
            fit += res.fits
            hopeless += (not res.fits and res.kept_turns == 1)
        how = ("with the real template" if tok is not None else
               "with the character estimate (no tokenizer, so no chat template: approximate)")
        check = (f" Checked {how} on the {len(over):,} multi-turn requests above {L:,} tokens: "
                 f"{fit:,} fit once trimmed to their last {H} turn(s)"
                 + (f"; {hopeless:,} do not fit even with their last turn alone" if hopeless else "") + ".")
    elif over:
        check = f" ({len(over):,} multi-turn requests exceed {L:,} tokens; checking a trim needs a tokenizer.)"
    if H >= top:
        return None, (f"at P{pct:g}, a conversation of any observed length (up to {top} turns) fits {limit:,} prompt "
                      f"tokens: no turn limit is needed.{check}")
    return H, (f"P{pct:g} of the prompt at turn {last} exceeds {limit:,} tokens (max_model_len {L:,} − max_tokens "
               f"{budget or 0:,}), while every turn count up to {H} fits: keep the system prompt and the last {H} "
               f"turn(s).{check}")


def finalize(acc: Accumulator, book, files: list[str], tok, est, opts, plan, model: Optional[str]) -> LengthsResult:
    pct, B = opts.percentile, opts.block_size
    output, budgets = acc.output.freeze(), acc.budget.freeze()
    notes: list[str] = []
    rec_mt, mt_reason = recommend_max_tokens(output, dict(acc.finish), pct, opts.max_tokens, budgets)
    if acc.deferred.total:
        fill = opts.max_tokens or rec_mt or 0
        notes.append(f"{acc.deferred.total:,} requests had neither max_tokens nor a logged completion: they are "
                     f"planned with a budget of {fill:,} tokens ({'--max-tokens' if opts.max_tokens else 'the recommended max_tokens'}).")
        acc.apply_deferred(fill)
    dists = {k: getattr(acc, k).freeze() for k in ("prompt", "total", "reject", "observed", "min_ac", "final")}
    total = dists["total"]
    if total.count:
        q = total.quantile(pct)
        rec_len = max(B, round_up(q, B))
        over = total.count_gt(rec_len)
        len_reason = (f"P{pct:g} of prompt + output budget over {total.count:,} requests is {q:,} tokens; rounded up to "
                      f"the block size ({B}) that is {rec_len:,}. {over:,} requests ({_share(over, total.count):.2%}) need "
                      "more: see the coverage table for what vLLM does with them.")
    else:
        rec_len, len_reason = None, "no request could be counted."
    # The model's own limit (vLLM's derived max_model_len, RoPE scaling included): no recommendation
    # goes above it, and the requests that need more are outliers no max_model_len can serve whole.
    limit = (plan.derived_max_model_len or None) if plan is not None else None
    len_capped = mt_capped = None
    outliers, outliers_reason = 0, ""
    if limit and total.count:
        outliers = total.count_gt(limit)
        if outliers:
            prompts = dists["prompt"]
            big = budgets.count_gt(limit)
            outliers_reason = (
                f"{outliers:,} request(s) ({_share(outliers, total.count):.2%}) ask for more than the model's limit of "
                f"{limit:,} tokens (prompt + max_tokens); the largest max_tokens asked is {budgets.max:,}"
                + (f" ({big:,} request(s) asked a max_tokens above the limit by itself)" if big else "")
                + f", the longest prompt {prompts.max:,} tokens. vLLM rejects prompts of {limit:,} tokens or more and "
                "clamps the rest (coverage table); they stay in every count; only the recommendation is capped.")
            notes.append("Outliers: " + outliers_reason)
        if rec_len and rec_len > limit:
            len_capped, rec_len = rec_len, limit
            len_reason += (f" CAPPED: {len_capped:,} is above the model's limit ({limit:,}, vLLM's derived "
                           f"max_model_len, which it refuses to exceed): recommended {limit:,}, the longest vLLM "
                           "accepts.")
        if rec_mt and rec_mt >= limit:
            mt_capped, rec_mt = rec_mt, max(limit - B, 1)
            mt_reason += (f" CAPPED: {mt_capped:,} is not below the model's limit ({limit:,}): recommended "
                          f"{rec_mt:,}, which leaves a block for the prompt.")
    budget_for_history = opts.max_tokens or rec_mt
    # the history limit is for the deployment's max_model_len when the caller has one (preflight's
    # plan), else for the recommended one: one length per report
    hist_len = opts.history_max_model_len or rec_len
    if not hist_len:
        history_turns, history_reason = None, "no max_model_len."
    elif len(acc.turns) < 2:
        history_turns, history_reason = None, "no multi-turn conversations in the log."
    else:
        history_turns, history_reason = _history(acc, hist_len, pct, tok, est, budget_for_history)
    history_tokens = (hist_len - budget_for_history if hist_len and budget_for_history and hist_len > budget_for_history
                      else None)
    if history_tokens is not None:
        history_reason += (f" In tokens: keep at most {history_tokens:,} prompt tokens (max_model_len {hist_len:,} − "
                           f"max_tokens {budget_for_history:,}).")
    per_turn = []
    for k in sorted(acc.turns):
        d = acc.turns[k].freeze()
        per_turn.append(TurnRow(k, d.count, d.quantile(50), d.quantile(90), d.quantile(99), d.max, round(d.mean, 1),
                                k == TURN_CAP))
    conversations = None
    if acc.conv_turns.total:
        conv_max = Hist()
        fill = opts.max_tokens or rec_mt or 0
        for known, deferred_p in zip(acc.conv_known, acc.conv_deferred):
            conv_max.add(max(known, deferred_p + fill if deferred_p >= 0 else 0))
        cm = conv_max.freeze()
        fit = cm.count_le(rec_len) if rec_len else 0
        conversations = Conversations(cm.count, acc.conv_turns.freeze().summary(), cm.summary(), fit,
                                      _share(fit, cm.count), acc.evicted)
        if acc.evicted:
            notes.append(f"More than {opts.max_open_sessions:,} conversations were open at once: {acc.evicted:,} were "
                         "closed early, so a conversation that came back later counts twice.")
    arrivals = _arrivals(acc, notes)
    top, n = acc.server_prompt_max
    if acc.server_prompts >= 50 and n >= max(3, acc.server_prompts * 0.02):
        notes.append(f"{n:,} vLLM-logged prompts have exactly {top:,} token ids, the longest seen: vLLM's --max-log-len "
                     "probably cut them, so their true length is unknown (higher).")
    plan_note = _plan_note(plan)
    if plan_note:
        notes.append(plan_note)
    counted = dict(acc.counted_by)
    estimated = bool(counted.get("estimate") or acc.output_counted_by.get("estimate"))
    if estimated:
        n_est = counted.get("estimate", 0)
        notes.insert(0, f"ESTIMATE: {n_est:,} of {sum(counted.values()):,} prompts were counted by characters per token "
                        "(no tokenizer; --no-estimate skips them instead), not by the model's tokenizer: those counts "
                        "are approximate.")
    rec = Recommendation(pct, B, rec_len, len_reason, rec_mt, mt_reason, history_turns, history_tokens, history_reason,
                         model_limit=limit, max_model_len_capped_from=len_capped, max_tokens_capped_from=mt_capped,
                         outliers=outliers, outliers_reason=outliers_reason)
    coverage = _coverage(acc, dists, _candidate_lengths(total, rec_len, B)) if total.count else ()
    hist_top = total.quantile(99.9) if total.count else None
    inputs = {"files": files, "model": model, "tokenizer": (tok or est).describe() if (tok or est) else None,
              "percentile": pct, "block_size": B, "max_tokens": opts.max_tokens, "estimate": opts.estimate,
              "input_format": opts.input_format}
    return LengthsResult(
        inputs=inputs,
        files=FileCounts(book.files_read, dict(book.file_skipped)),
        records=RecordCounts(book.read, book.used, dict(book.skipped), sum(counted.values()),
                             dict(book.requests_skipped), dict(acc.shapes), book.lines_ignored),
        issues=tuple(IssueInfo(i.file, i.line, i.reason, i.message) for i in book.issues),
        issues_total=max(book.issues_total, len(book.issues)),
        counted_by={k: counted.get(k, 0) for k in ("usage", "tokenizer", "estimate")},
        output_counted_by={k: acc.output_counted_by.get(k, 0) for k in ("usage", "tokenizer", "estimate", "unknown")},
        estimated=estimated,
        prompt_tokens=_summary(dists["prompt"]), output_tokens=_summary(output), max_tokens=_summary(budgets),
        total_tokens=_summary(total), final_tokens=_summary(dists["final"]),
        histograms={"prompt_tokens": dists["prompt"].histogram(40, hist_top),
                    "total_tokens": total.histogram(40, hist_top), "output_tokens": output.histogram(40)},
        finish_reasons=dict(acc.finish), per_turn=tuple(per_turn), conversations=conversations, arrivals=arrivals,
        coverage=coverage, block_waste=_block_waste(dists["final"], plan), recommendation=rec, notes=tuple(notes),
        final_length_counts=tuple(dists["final"].items()),
        exact={k: tuple(dists[k].items()) for k in ("total", "reject", "observed", "min_ac")},
    )


def coverage_at(lengths: LengthsResult, length: int, label: str = "") -> CoverageRow:
    """The coverage row of a result at any max_model_len, from its exact histograms."""
    dists = {}
    for name in ("total", "reject", "observed", "min_ac"):
        h = Hist()
        for v, n in lengths.exact.get(name, ()):
            h.add(v, n)
        dists[name] = h.freeze()
    total = dists["total"].count
    rej, clamp, trunc = coverage_counts(dists["total"], dists["reject"], dists["observed"], dists["min_ac"], length)
    fits = total - rej - clamp
    return CoverageRow(length, total, rej, clamp, trunc, fits, _share(rej, total), _share(clamp, total),
                       _share(trunc, total), _share(fits, total), label)


def _arrivals(acc: Accumulator, notes: list[str]) -> Optional[Arrivals]:
    if not acc.timed:
        return None
    if acc.arrival_overflow:
        notes.append("The log spans more seconds than kvplan keeps per-second counts for: arrival rates are not shown.")
        return None
    secs = acc.per_second
    first, last = min(secs), max(secs)
    span = last - first + 1
    per_s = Hist()
    for n in secs.values():
        per_s.add(n)
    per_s.add(0, span - len(secs))  # seconds without a request count too
    d = per_s.freeze()
    peak60 = 0.0
    if span >= 60:
        ordered = sorted(secs.items())
        window, j = 0, 0
        for i, (t, n) in enumerate(ordered):
            window += n
            while ordered[j][0] <= t - 60:
                window -= ordered[j][1]
                j += 1
            peak60 = max(peak60, window / 60.0)
    src = peak = p99 = mean = None
    if acc.with_duration:
        src = "durations"
        peak, p99, mean = concurrency_stats(acc.in_flight)
        mean = round(mean, 2)
        if acc.with_duration < acc.timed:
            notes.append(f"Only {acc.with_duration:,} of {acc.timed:,} timed requests logged a duration: concurrency "
                         "counts only those.")
    return Arrivals(acc.timed, float(first), float(last), float(span), round(acc.timed / span, 4), d.max,
                    round(peak60, 3) if span >= 60 else round(acc.timed / span, 3), d.quantile(99), src, peak, p99, mean)
