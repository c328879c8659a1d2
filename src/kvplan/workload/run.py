"""``kvplan lengths`` as a library call: :data:`LENGTHS_FLAGS` (the command's options, declared once:
the CLI's and the page's) -> :func:`lengths_from_values` -> a :class:`LengthsResult`. The CLI
(``kvplan lengths``) and the page (``POST /api/lengths``) both call this.

Only the standard library at module level (the CLI declares its options from this table; the
tokenizers load only when a prompt is really counted).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from ..errors import UsageError
from ..flags import Flag

if TYPE_CHECKING:  # the data the functions below build; imported when they run
    from .result import LengthsResult
    from .tokenizer import ChatTokenizer

INPUT_FORMATS = ("auto", "openai-chat", "openai-completion", "usage", "sharegpt", "text", "vllm-log")
CONTAINERS = ("auto", "jsonl", "json", "csv", "log")

#: ``kvplan lengths``' options (the request logs are its arguments; the output's format and plot the CLI's)
LENGTHS_FLAGS: tuple[Flag, ...] = (
    Flag("tokenizer", ("--tokenizer", "-t"), str, None,
         "Model folder, tokenizer.json, or pkg:NAME (a Python package shipping tokenizer.json)."),
    Flag("model", ("--model", "-m"), str, None, "Model (catalog/hub id or folder): its tokenizer when none is given, "
         "and its KV bytes per token for block waste."),
    Flag("gpu", ("--gpu",), str, None, "GPU for the --model plan (block waste in GiB); default H100."),
    Flag("tensor_parallel_size", ("--tensor-parallel-size", "-tp"), int, 1, ""),
    Flag("chat_template", ("--chat-template",), str, None, "A chat template file overriding the tokenizer's."),
    Flag("max_tokens", ("--max-tokens",), int, None,
         "The output budget you will serve with (overrides the requests' max_tokens)."),
    Flag("percentile", ("--percentile", "-p"), float, 99.0, "Percentile the recommendations cover."),
    Flag("block_size", ("--block-size",), int, 16, "vLLM block size max_model_len is rounded to."),
    Flag("strict", ("--strict",), bool, False, "Stop at the first bad record or file (exit code 1)."),
    Flag("estimate", ("--estimate",), bool, None, "Without a tokenizer, prompts lacking server-reported usage are "
         "estimated from characters (labelled everywhere); --no-estimate skips them instead.", negatable=True),
    Flag("input_format", ("--input-format",), str, "auto", "Force the record shape.", choices=INPUT_FORMATS),
    Flag("container", ("--container",), str, "auto", "Force the file format.", choices=CONTAINERS),
    Flag("session_field", ("--session-field",), str, None, "Conversation id field (dotted path)."),
    Flag("timestamp_field", ("--timestamp-field",), str, None, "Arrival time field."),
    Flag("duration_field", ("--duration-field",), str, None, "Request duration field (_ms = ms)."),
    Flag("max_record_bytes", ("--max-record-bytes",), int, 64 << 20, "Longest line/record read."),
    Flag("max_issues", ("--max-issues",), int, 50, "Skipped records listed with file and line in the output (all "
         "are counted in records.skipped)."),
)


def resolve_tokenizer(tokenizer: Optional[str], model: Optional[str], chat_template: Optional[str],
                      note: Optional[Callable[[str], None]] = None) -> Optional["ChatTokenizer"]:
    """--tokenizer wins; else the tokenizer of --model (local folder, HF cache, or hub); else None
    (and ``note`` is told why, unless it is None)."""
    from pathlib import Path

    from .tokenizer import ChatTokenizer

    if tokenizer:
        return ChatTokenizer.from_path(tokenizer, chat_template)
    if model:
        tok = ChatTokenizer.for_model(model)
        if tok is None:
            if note is not None:
                note(f"kvplan: note: no tokenizer for {model} in a local folder or the Hugging Face cache (and the "
                     "hub is unavailable): only server-reported usage is exact; give --tokenizer DIR, or --estimate.")
            return None
        if chat_template:
            return ChatTokenizer.from_path(str(Path(tok.source).parent), chat_template)
        return tok
    return None


def _plan_for(model: Optional[str], gpu: Optional[str], tp: int):
    if not model:
        return None
    from ..hardware import find_gpu
    from ..memory import PlanRequest, plan
    from ..models import load_model

    try:
        spec = load_model(model)
    except UsageError:
        return None  # a tokenizer-only folder: no config.json, so no bytes per token
    return plan(PlanRequest(spec, find_gpu(gpu or "H100"), tensor_parallel_size=tp), what_ifs=False, fit_search=True)


def lengths_from_values(values: Mapping[str, Any], files: Sequence[str],
                        note: Optional[Callable[[str], None]] = None) -> "LengthsResult":
    """``kvplan lengths FILES``' result for the flags' ``values`` (by field; missing ones at their
    defaults); ``note`` hears what the user should know (no tokenizer found)."""
    from .analysis import LengthsOptions, analyze_lengths
    from .shapes import FieldNames

    v = {f.field: values.get(f.field, f.default) for f in LENGTHS_FLAGS}
    opts = LengthsOptions(percentile=v["percentile"], block_size=v["block_size"], max_tokens=v["max_tokens"],
                          input_format=v["input_format"], container=v["container"], estimate=v["estimate"],
                          strict=v["strict"], fields=FieldNames(v["session_field"], v["timestamp_field"],
                                                               v["duration_field"]),
                          max_record_bytes=v["max_record_bytes"], max_issues=v["max_issues"])
    opts.validate()
    from .sources import expand_paths

    expand_paths(list(files), require_existing=True)  # one rule: file not found: PATH, exit 2
    model = v["model"]
    tok = resolve_tokenizer(v["tokenizer"], model, v["chat_template"], note=note)
    plan = _plan_for(model, v["gpu"], v["tensor_parallel_size"])
    return analyze_lengths(list(files), tok, opts, plan=plan, model=model)
