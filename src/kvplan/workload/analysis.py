"""``analyze_lengths``: request logs in, one :class:`LengthsResult` out.

One streaming pass: records are read, turned into requests, counted in batches (chat templates
rendered one by one, then one ``encode_batch`` per batch) and folded into exact histograms.
Every record ends up either used or skipped with a reason; the reader never stops on a bad
record unless ``strict``. The recommendations are computed from the histograms at the end.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from ..limits import active as active_limits
from .accumulate import Accumulator
from .chat_template import TemplateError
from .finalize import finalize
from .issues import Issue, RecordError, StrictModeError
from .shapes import FieldNames, Request, from_csv, from_json, from_vllm_entry
from .sources import DEFAULT_MAX_RECORD_BYTES, expand_paths, read_items
from .tokenizer import ChatTokenizer, Estimator
from .vllm_log import VllmLogAssembler, looks_like_vllm_line

LOG_WRAPPER_KEYS = ("log", "message", "msg")


@dataclass(frozen=True)
class LengthsOptions:
    percentile: float = 99.0
    block_size: int = 16
    max_tokens: Optional[int] = None  # the output budget to plan for; overrides the requests' own
    input_format: str = "auto"  # record shape (see shapes.SHAPES)
    container: str = "auto"  # jsonl | json | csv | log
    #: None: the one rule (estimator_for); False: never estimate, skip (no_tokenizer); True: estimate
    estimate: Optional[bool] = None
    strict: bool = False
    fields: FieldNames = field(default_factory=FieldNames)
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    batch_size: int = 256
    history_sample: int = 2000
    max_open_sessions: int = 200_000
    max_issues: int = 50
    vllm_window: int = 4096
    #: the max_model_len the history limit is for (preflight: the plan's); None: the recommended one
    history_max_model_len: Optional[int] = None

    def validate(self) -> None:
        from ..errors import UsageError

        if not 50 <= self.percentile < 100:
            raise UsageError(f"--percentile must be in [50, 100), got {self.percentile}")
        if self.block_size < 1:
            raise UsageError(f"--block-size must be at least 1, got {self.block_size}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise UsageError(f"--max-tokens must be at least 1, got {self.max_tokens}")
        if self.max_record_bytes < 1024:
            raise UsageError("--max-record-bytes must be at least 1024")
        if self.max_issues < 0:
            raise UsageError(f"--max-issues must not be negative, got {self.max_issues}")


class _Book:
    """Record accounting: read = used + skipped, always."""

    def __init__(self, opts: LengthsOptions):
        self.opts = opts
        self.read = 0
        self.used = 0
        self.skipped: Counter = Counter()
        self.requests_skipped: Counter = Counter()
        self.file_skipped: Counter = Counter()
        self.files_read = 0
        self.lines_ignored = 0
        self.issues: list[Issue] = []
        self.issues_total = 0
        self.pending: dict[int, list] = {}  # record id → [requests left, requests ok, first failure]
        self.capped_at: Optional[int] = None  # reading stopped at the front end's cap of records

    def issue(self, issue: Issue) -> None:
        self.issues_total += 1
        if len(self.issues) < self.opts.max_issues:
            self.issues.append(issue)
        if self.opts.strict:
            raise StrictModeError(issue)

    def bad_record(self, issue: Issue) -> None:
        self.read += 1
        self.skipped[issue.reason] += 1
        self.issue(issue)

    def bad_file(self, issue: Issue) -> None:
        self.file_skipped[issue.reason] += 1
        self.issue(issue)

    def open(self, rid: int, n: int) -> None:
        self.read += 1
        self.pending[rid] = [n, 0, None]

    def done(self, rid: int, failure: Optional[Issue]) -> None:
        state = self.pending[rid]
        state[0] -= 1
        if failure is None:
            state[1] += 1
        else:
            if state[2] is None:
                state[2] = failure
            self.issue(failure)
        if state[0] == 0:
            del self.pending[rid]
            if state[1]:
                self.used += 1
                if state[2] is not None:
                    self.requests_skipped[state[2].reason] += 1
            else:
                self.skipped[state[2].reason] += 1


def iter_requests(paths: list[str], opts: LengthsOptions, book: _Book) -> Iterator[tuple[int, Request]]:
    """(record id, request) for every request in the inputs; bad records go to the book."""
    asm = VllmLogAssembler(opts.vllm_window)
    rid = 0
    seen_files: set[str] = set()

    def entries(done) -> Iterator[tuple[int, Request]]:
        nonlocal rid
        for entry in done:
            rid += 1
            yield from _expand(rid, entry["file"], entry["line"], lambda e=entry: from_vllm_entry(e, opts.fields), book)

    cap = active_limits().max_log_records
    for item in read_items(paths, opts.max_record_bytes, opts.container):
        if cap is not None and book.read >= cap:
            book.capped_at = cap  # the front end's cap on records per command: said in the result's notes
            break
        if item.kind != "issue" or item.line:
            seen_files.add(item.file)
        if item.kind == "blank":
            book.lines_ignored += 1
        elif item.kind == "issue":
            if item.line == 0:
                book.bad_file(item.issue)
            else:
                book.bad_record(item.issue)
        elif item.kind == "log" or (item.kind == "json" and _log_wrapper(item.value)):
            text = item.value if item.kind == "log" else _log_wrapper(item.value)
            done = asm.feed(text, item.file, item.line)
            if done is None:
                book.lines_ignored += 1
            else:
                yield from entries(done)
        else:
            rid += 1
            parse = (from_json if item.kind == "json" else from_csv)
            if opts.input_format == "vllm-log":
                book.bad_record(Issue(item.file, item.line, "unknown_shape",
                                      "--input-format vllm-log: this is a JSON/CSV record, not a vLLM log line"))
                continue
            yield from _expand(rid, item.file, item.line,
                               lambda v=item.value, f=item.file, n=item.line: parse(v, f, n, opts.input_format, opts.fields),
                               book)
    yield from entries(asm.flush())
    book.files_read = len(seen_files)


def _expand(rid: int, file: str, line: int, make: Callable[[], list[Request]], book: _Book):
    try:
        reqs = make()
    except RecordError as exc:
        book.bad_record(Issue(file, line, exc.reason, exc.message))
        return
    if not reqs:
        book.bad_record(Issue(file, line, "empty_prompt", "no request in this record"))
        return
    book.open(rid, len(reqs))
    for r in reqs:
        yield rid, r


def _log_wrapper(value: Any) -> Optional[str]:
    """A log shipper's JSON line ({"log": "... Received request ..."}) holding a vLLM line."""
    if not isinstance(value, dict) or "messages" in value or "prompt" in value:
        return None
    for key in LOG_WRAPPER_KEYS:
        text = value.get(key)
        if isinstance(text, str) and looks_like_vllm_line(text):
            return text
    return None


def estimator_for(tokenizer: Optional[ChatTokenizer], estimate: Optional[bool] = None) -> Optional[Estimator]:
    """THE rule for a prompt without a server-reported count, in every command that reads requests
    (lengths, plan --requests, preflight, doctor --requests, simulate / tune --requests, the page):
    the model's tokenizer counts it; without one it is estimated from characters per token and
    labelled (``counted_by["estimate"]``, an ESTIMATE note), unless estimating is turned off
    (``--no-estimate``: ``estimate=False``), which skips it with the reason ``no_tokenizer``."""
    return Estimator() if tokenizer is None and estimate is not False else None


def no_tokenizer_hint(model: Optional[str]) -> str:
    """What to give when a prompt needs a tokenizer (estimating is off): never --model when
    --model was given."""
    if model:
        return (f"the tokenizer of --model {model} was not found (no local folder, Hugging Face cache entry or "
                "hub access): give --tokenizer DIR, or leave out --no-estimate")
    return "the model's tokenizer (--tokenizer DIR, --model ID), or leave out --no-estimate"


def count_batch(batch: list[tuple[int, Request]], tok: Optional[ChatTokenizer], est: Optional[Estimator],
                model: Optional[str] = None):
    """[(record id, request)] → [(p, p_source, o, o_source) or RecordError], in order."""
    out: list[Any] = [None] * len(batch)
    texts: dict[bool, list[tuple[int, str]]] = {False: [], True: []}
    for i, (_, r) in enumerate(batch):
        if r.prompt_tokens is not None:
            out[i] = [r.prompt_tokens, "usage"]
            continue
        if r.multimodal:
            out[i] = RecordError("multimodal", "image/audio content parts: their tokens depend on the model's "
                                 "processor and only the server's usage counts them")
            continue
        if tok is not None:
            if r.messages is not None:
                try:
                    text = tok.render(r.messages, r.tools, **(r.template_kwargs or {}))
                except TemplateError as exc:
                    out[i] = RecordError("template_error", str(exc))
                    continue
                texts[r.add_special_tokens].append((i, text))
            elif r.prompt is not None:
                special = r.add_special_tokens
                if r.shape == "vllm-log":  # a logged prompt is already rendered: BOS only if it lacks one
                    special = not (tok.bos_token and r.prompt.startswith(tok.bos_token))
                texts[special].append((i, r.prompt))
            else:
                out[i] = RecordError("empty_prompt", "no prompt text and no token count")
        elif est is not None:
            if r.messages is not None:
                out[i] = [est.count_messages(r.messages, r.tools), "estimate"]
            elif r.prompt is not None:
                out[i] = [est.count_text(r.prompt) + (1 if r.add_special_tokens else 0), "estimate"]
            else:
                out[i] = RecordError("empty_prompt", "no prompt text and no token count")
        else:
            out[i] = RecordError("no_tokenizer", "no server-reported usage: counting this prompt needs "
                                 + no_tokenizer_hint(model))
    for special, items in texts.items():
        if items:
            for (i, _), n in zip(items, tok.count_texts([t for _, t in items], add_special_tokens=special)):
                out[i] = [n, "tokenizer"]
    outs: list[tuple[int, str]] = []
    for i, (_, r) in enumerate(batch):
        res = out[i]
        if isinstance(res, RecordError):
            continue
        if r.output_tokens is not None:
            res += [r.output_tokens, "usage"]
        elif r.output_text is not None and tok is not None:
            outs.append((i, r.output_text))
            res += [None, "tokenizer"]
        elif r.output_text is not None and est is not None:
            res += [est.count_text(r.output_text), "estimate"]
        else:
            res += [None, "unknown"]
    if outs:
        for (i, _), n in zip(outs, tok.count_texts([t for _, t in outs], add_special_tokens=False)):
            out[i][2] = n
    return out


def analyze_lengths(paths: list[str], tokenizer: Optional[ChatTokenizer] = None,
                    options: LengthsOptions = LengthsOptions(), plan=None, model: Optional[str] = None,
                    progress: Optional[Callable[[int], None]] = None):
    """Read the logs and return a :class:`~kvplan.workload.result.LengthsResult`.

    ``tokenizer``: the model's :class:`ChatTokenizer` (exact counts), or None (server-reported
    usage, then the estimate of :func:`estimator_for`). ``plan``: a PlanResult whose KV bytes per token turn
    block-size waste into bytes. Raises StrictModeError under ``options.strict``.
    """
    options.validate()
    files = expand_paths(list(paths))
    book = _Book(options)
    acc = Accumulator(options.history_sample, options.max_open_sessions)
    est = estimator_for(tokenizer, options.estimate)
    batch: list[tuple[int, Request]] = []

    def flush() -> None:
        for (rid, r), res in zip(batch, count_batch(batch, tokenizer, est, model)):
            if isinstance(res, RecordError):
                book.done(rid, Issue(r.file, r.line, res.reason, res.message))
                continue
            p, p_src, o, o_src = res
            acc.add(r, p, p_src, o, o_src, options.max_tokens)
            book.done(rid, None)
        if progress:
            progress(book.read)
        batch.clear()

    for pair in iter_requests(files, options, book):
        batch.append(pair)
        if len(batch) >= options.batch_size:
            flush()
    flush()
    acc.close_sessions()
    result = finalize(acc, book, files, tokenizer, est, options, plan, model)
    if book.capped_at is not None:
        import dataclasses

        lim = active_limits()
        result = dataclasses.replace(result, notes=(
            f"Read the first {book.capped_at:,} records only: {lim.who}'s cap of records per run "
            f"({lim.beyond}).",) + tuple(result.notes))
    return result
