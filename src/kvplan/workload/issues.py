"""Why a record or a file was not used: one reason code, one message naming the file and line.

Reasons are stable identifiers (they are keys of ``records.skipped`` in the JSON output), so a
CI job can fail on, say, any ``not_utf8`` record. Nothing is dropped without one of them.
"""
from __future__ import annotations

from dataclasses import dataclass

# Record-level reasons (keys of records.skipped) and file-level ones (keys of files.skipped).
RECORD_REASONS = {
    "malformed_json": "not valid JSON",
    "malformed_csv": "not a valid CSV row",
    "not_utf8": "bytes that are not UTF-8",
    "line_too_long": "a single line above --max-record-bytes",
    "wrong_type": "a field of the wrong type",
    "implausible_length": "a token count above 10,000,000 (longer than any model's context): a logging or unit error",
    "unknown_shape": "no field kvplan recognises (messages, prompt, text, conversations, usage)",
    "empty_prompt": "no prompt text at all",
    "multimodal": "image/audio parts: their tokens depend on the model's processor",
    "no_tokenizer": "needs a tokenizer (give --tokenizer or --model); only with --no-estimate",
    "template_error": "the chat template refused the request (vLLM would answer 400)",
    "no_prompt_logged": "a vLLM log entry without the prompt (log at DEBUG to get it)",
    "truncated_file": "the file ends in the middle of a record",
    "max_tokens_exceeds_budget": "kvplan trim: max_tokens alone fills the budget (written, with its last turn)",
}
FILE_REASONS = {
    "file_not_found": "no such file",
    "not_a_file": "a directory or special file",
    "empty_file": "an empty file",
    "unreadable": "cannot be opened or decompressed",
    "no_records": "no JSON record and no vLLM request-log line",
}


class RecordError(Exception):
    """Raised by the record parsers; caught by the reader, which counts it and goes on."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Issue:
    file: str
    line: int  # 0 for a file-level issue
    reason: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message} [{self.reason}]"


class StrictModeError(Exception):
    """--strict: the first bad record or file ends the run (exit code 1)."""

    def __init__(self, issue: Issue):
        super().__init__(str(issue))
        self.issue = issue
