"""A :class:`Trace` from a request log, read by the ONE request-log reader (``kvplan.workload``:
``iter_requests`` + ``count_batch``, the code behind ``kvplan lengths`` and ``kvplan bench
--requests``), so every shape those accept (OpenAI JSONL, CSV, vLLM's request log, gzip/zstd)
works here too.

Prompt tokens: the server-reported ``usage`` when the record has it, else the tokenizer (as
``kvplan lengths`` counts them), else the one rule's labelled estimate
(kvplan.workload.analysis.estimator_for; ``estimate=False`` skips them instead).
Output tokens: ``usage.completion_tokens``, else the record's ``max_tokens``, else ``max_tokens``.
Arrivals: the log's timestamps (replay) unless ``rate`` is given. Conversations (a session field,
or chat requests whose message list extends an earlier request's) share a prefix: the earlier
turn's prompt and answer, which vLLM's prefix cache serves; requests that open with the same
system message share it across conversations (``root_id``) when its length can be counted: with
the tokenizer, or with the estimate (kept 16 tokens short); from ``usage`` alone it is unknown
and conversations then share nothing across each other.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Optional, Sequence

from ..errors import UsageError
from .arrivals import rate_schedule, replay_schedule
from .trace import SimRequest, Trace, parse_arrival

BATCH = 256


def _conversation_key(r) -> Optional[str]:
    if r.session:
        return f"session:{r.session}"
    if r.messages and len(r.messages) > 1:
        first = r.messages[0]
        body = json.dumps(first, sort_keys=True, default=str) if isinstance(first, dict) else str(first)
        return "conv:" + hashlib.sha1(body.encode("utf-8", "replace")).hexdigest()[:16]
    return None


#: A system prompt's token count is an estimate when the log has no tokenizer: keep this many tokens
#: short of it, so a shared block is never claimed past the real end of the shared text.
SYSTEM_MARGIN_TOKENS = 16


def _system_prompt(r, counter, memo: dict) -> tuple[Optional[str], int]:
    """A chat request's leading system message, shared by every conversation that sends the same one:
    (key, tokens it spans), counted once per distinct text."""
    if counter is None or not r.messages or not isinstance(r.messages[0], dict) \
            or r.messages[0].get("role") != "system":
        return None, 0
    body = json.dumps(r.messages[0], sort_keys=True, default=str)
    key = "system:" + hashlib.sha1(body.encode("utf-8", "replace")).hexdigest()[:16]
    if key not in memo:
        try:
            n = counter.count_messages([r.messages[0]], add_generation_prompt=False)
        except Exception:  # noqa: BLE001 - a template that refuses a lone system message: share nothing
            n = 0
        memo[key] = max(0, int(n) - SYSTEM_MARGIN_TOKENS)
    return key, memo[key]


def trace_from_log(paths: Sequence[str], *, tokenizer: Any = None, rate: Optional[float] = None,
                   arrival: str = "poisson", seed: int = 0, num_requests: Optional[int] = None,
                   max_tokens: Optional[int] = None, estimate: Optional[bool] = None, speed: float = 1.0) -> Trace:
    """Requests of ``paths`` (a path or a list). ``tokenizer``: a :class:`ChatTokenizer`, a model
    folder / tokenizer.json / ``pkg:NAME`` spec, or None. Records that cannot become a request
    are counted in ``Trace.skipped`` by reason (never dropped silently)."""
    from ..workload.analysis import LengthsOptions, _Book, count_batch, estimator_for, iter_requests
    from ..workload.issues import RecordError
    from ..workload.sources import expand_paths
    from ..workload.tokenizer import ChatTokenizer

    if isinstance(paths, str):
        paths = [paths]
    if rate is not None and not rate > 0:
        raise UsageError(f"--rate must be positive, got {rate}")
    tok = ChatTokenizer.from_path(tokenizer) if isinstance(tokenizer, str) else tokenizer
    est = estimator_for(tok, estimate)
    opts = LengthsOptions(estimate=est is not None)
    counted_by: dict[str, int] = {}
    book = _Book(opts)
    skipped: dict[str, int] = {}
    rows: list[tuple[Any, int, int]] = []
    batch: list = []

    def flush() -> None:
        for (_rid, r), c in zip(batch, count_batch(batch, tok, est)):
            if isinstance(c, RecordError) or c is None:
                reason = c.reason if isinstance(c, RecordError) else "uncounted"
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            out = c[2] if c[2] is not None else (r.max_tokens or max_tokens)
            if out is None:
                skipped["no_output_length"] = skipped.get("no_output_length", 0) + 1
                continue
            rows.append((r, int(c[0]), max(1, int(out))))
            counted_by[c[1]] = counted_by.get(c[1], 0) + 1
        batch.clear()

    for rid, r in iter_requests(expand_paths(list(paths), require_existing=True), opts, book):
        batch.append((rid, r))
        if len(batch) >= BATCH:
            flush()
            if num_requests is not None and len(rows) >= num_requests:
                break
    flush()
    if num_requests is not None:
        rows = rows[:num_requests]
    for reason, n in list(book.skipped.items()) + [(f"file:{k}", v) for k, v in book.file_skipped.items()]:
        skipped[reason] = skipped.get(reason, 0) + n
    if not rows:
        first = f"; first problem: {book.issues[0]}" if book.issues else ""
        raise UsageError(f"--requests: no usable request in {', '.join(map(str, paths))} "
                         f"(skipped: {skipped or 'none'}){first}")

    if rate is None:
        try:
            times = replay_schedule([r.timestamp for r, _, _ in rows], speed)
        except ValueError:
            raise UsageError("--requests: the log has no timestamps to replay; give --rate R") from None
        how = "replayed timestamps" + (f" x{speed:g}" if speed != 1 else "")
    else:
        kind, shape = parse_arrival(arrival)
        times = list(rate_schedule(rate, kind, shape, 0.0, seed, max_count=len(rows)))
        how = f"{arrival} {rate:g} req/s"
    last: dict[str, tuple[int, int, int]] = {}  # conversation -> (prompt, output, messages) of its last turn
    # the system prompt's own length needs a tokenizer (exact) or an asked-for estimate; from usage
    # alone it is unknown, and then conversations share nothing across each other (conservative)
    counter = tok if tok is not None else est
    system_tokens: dict[str, int] = {}
    reqs = []
    for (r, p, o), t in zip(rows, times):
        root_id, root_tokens = _system_prompt(r, counter, system_tokens)
        key = _conversation_key(r)
        pid, ptok = None, 0
        if key is not None:
            prev = last.get(key)
            nmsg = len(r.messages or ())
            if prev is not None and (r.session or nmsg > prev[2]):
                pid, ptok = key, max(0, min(prev[0] + prev[1], p - 1))
            elif prev is None:
                pid = key
            last[key] = (p, o, nmsg)
        reqs.append(SimRequest(t, p, o, pid, ptok, root_id=root_id, root_tokens=min(root_tokens, max(0, p - 1))))
    reqs.sort(key=lambda x: x.arrival_s)
    if num_requests is not None:  # the counts of the requests kept
        counted_by = {}
        for r, _, _ in rows:
            source = "usage" if r.prompt_tokens is not None else "tokenizer" if tok is not None else "estimate"
            counted_by[source] = counted_by.get(source, 0) + 1
    counted = ", ".join(f"{k} {v:,}" for k, v in sorted(counted_by.items()))
    notes: tuple[str, ...] = ()
    if book.capped_at is not None:
        from ..limits import active as active_limits

        lim = active_limits()
        notes = (f"replayed the log's first {book.capped_at:,} records only: {lim.who}'s cap of records per run "
                 f"({lim.beyond})",)
    return Trace(tuple(reqs), f"{', '.join(map(str, paths))}: {len(reqs):,} requests, {how}, prompt tokens counted by "
                 f"{counted}", tuple(sorted(skipped.items())), notes=notes)
