"""Read request logs of any size: files, globs or stdin; JSONL, JSON arrays, CSV or vLLM's own
log; plain, gzip or zstd. Everything streams: memory is bounded by the longest record.

The reader never stops at a bad record. Each one becomes an :class:`Item` carrying an
:class:`Issue` (file, line, reason, message) that the caller counts; a file that cannot be read
at all becomes one file-level issue. Compression is recognised by its magic bytes, not by the
file name, so a ``.log`` that is really gzip still reads.
"""
from __future__ import annotations

import codecs
import csv
import glob
import gzip
import io
import json
import math
import os
import re
import sys
import zlib
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from ..errors import UsageError, file_not_found
from .issues import Issue

DEFAULT_MAX_RECORD_BYTES = 64 << 20  # one request of ~10M characters; a bound, not a target
_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# Errors a decompressor raises on a truncated or corrupt stream (zstandard's is added lazily).
_STREAM_ERRORS: tuple[type[BaseException], ...] = (EOFError, zlib.error, gzip.BadGzipFile, OSError)
CSV_HINT_COLUMNS = ("prompt", "text", "messages", "prompt_tokens", "conversations", "completion_tokens")


#: an integer literal longer than this is one Python refuses to convert (its limit: 4,300 digits)
MAX_INT_DIGITS = 4000


class Unreadable(float):
    """A JSON number Python cannot hold as written (an integer of more than :data:`MAX_INT_DIGITS`
    digits, ``1e400``, ``NaN``, ``Infinity``): a NaN that remembers its text, so every field that
    holds it fails its numeric check (only that record is skipped) and a record written back out
    stays valid JSON for Python's writer."""

    __slots__ = ("text",)

    def __new__(cls, text: str) -> "Unreadable":
        self = super().__new__(cls, "nan")
        self.text = text[:40]
        return self

    def __repr__(self) -> str:
        return f"<unreadable number {self.text[:16]}{'...' if len(self.text) > 16 else ''}>"


def _parse_int(text: str) -> Any:
    return int(text) if len(text) <= MAX_INT_DIGITS else Unreadable(text)


def _parse_float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else Unreadable(text)


#: the decoder of every request-log record: numbers it cannot hold become :class:`Unreadable`
RECORD_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float, parse_constant=Unreadable)


def loads_record(text: str) -> Any:
    """One record's JSON. Raises json.JSONDecodeError (malformed) or RecursionError (too deep)."""
    return RECORD_DECODER.decode(text)


@dataclass(frozen=True)
class Item:
    """One unit read from an input: a parsed JSON object, a CSV row, a log line, or an issue."""

    file: str
    line: int
    kind: str  # json | csv | log | blank | issue
    value: Any = None
    issue: Optional[Issue] = None


def expand_paths(patterns: list[str], require_existing: bool = False) -> list[str]:
    """Expand globs (sorted, for reproducible output). A glob that matches nothing is a usage
    error (errors.file_not_found); a plain path that does not exist is one too with
    ``require_existing`` (the commands: one rule), else it is kept and reported by the reader as a
    file-level issue (the library: one missing file among many does not stop the run)."""
    if not patterns:
        raise UsageError("give at least one FILE (or - for stdin)")
    out: list[str] = []
    for pat in patterns:
        if pat != "-" and glob.has_magic(pat) and not os.path.exists(pat):
            found = sorted(glob.glob(pat, recursive=True))
            if not found:
                raise UsageError(f"file not found: {pat} (no file matches this pattern)")
            out.extend(found)
        else:
            if require_existing and pat != "-" and not os.path.exists(pat):
                raise file_not_found(pat)
            out.append(pat)
    return out


def read_items(paths: list[str], max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
               container: str = "auto") -> Iterator[Item]:
    """Every item of every file, in order. ``container`` forces jsonl, json, csv or log."""
    for path in paths:
        yield from _read_file(path, max_record_bytes, container)


def _file_issue(path: str, reason: str, message: str) -> Item:
    return Item(path, 0, "issue", issue=Issue(path, 0, reason, message))


def _open(path: str):
    """A binary stream with decompression applied, or an Item describing why it cannot be."""
    if path == "-":
        raw = sys.stdin.buffer
        name = "<stdin>"
    else:
        if not os.path.exists(path):
            return _file_issue(path, "file_not_found", "no such file")
        if not os.path.isfile(path):
            kind = "a directory" if os.path.isdir(path) else "not a regular file"
            return _file_issue(path, "not_a_file", f"{kind}: give the files inside it (or a glob)")
        try:
            raw = open(path, "rb")  # noqa: SIM115 - closed by _read_file
        except OSError as exc:
            return _file_issue(path, "unreadable", f"cannot open: {exc.strerror or exc}")
        name = path
    stream = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw, _CHUNK)
    magic = stream.peek(4)[:4]
    if magic[:2] == _GZIP_MAGIC:
        # GzipFile buffers by itself in small chunks; an extra large buffer on top would lose a
        # whole megabyte of good lines when a truncated file raises EOFError mid-read.
        return gzip.GzipFile(fileobj=stream, mode="rb")
    if magic == _ZSTD_MAGIC:
        return _zstd_reader(stream, name)
    return stream


def _zstd_reader(stream, name: str):
    global _STREAM_ERRORS
    try:
        import zstandard  # optional: the `zstd` extra

        _STREAM_ERRORS = _STREAM_ERRORS + (zstandard.ZstdError,)
        reader = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
        return io.BufferedReader(reader, _CHUNK)
    except ImportError:
        pass
    try:
        from compression import zstd  # Python 3.14+

        return io.BufferedReader(zstd.ZstdFile(stream), _CHUNK)
    except ImportError:
        return _file_issue(name, "unreadable", "zstd-compressed: install the `zstandard` package "
                           "(pip install 'kvplan[zstd]') or decompress it first")


def _read_file(path: str, limit: int, container: str) -> Iterator[Item]:
    opened = _open(path)
    if isinstance(opened, Item):
        yield opened
        return
    name = "<stdin>" if path == "-" else path
    stream = opened
    position = [0]  # the last line number read, kept by _lines for the truncation message
    line_no = 0
    try:
        lines = _lines(stream, limit, position)
        first: Optional[tuple[int, Optional[bytes]]] = None
        for line_no, raw in lines:
            if raw is not None and not raw.strip():
                yield Item(name, line_no, "blank")
                continue
            first = (line_no, raw)
            break
        if first is None:
            yield _file_issue(name, "empty_file", "empty file: no records")
            return
        kind = container if container != "auto" else _sniff(name, first[1])
        if kind == "json":
            yield from _json_array(name, first, stream, limit)
        elif kind == "csv":
            yield from _csv_rows(name, first, lines, limit)
        else:
            yield from _line_items(name, first, lines, kind, limit)
    except _STREAM_ERRORS as exc:
        line_no = position[0] + 1
        yield Item(name, line_no, "issue", issue=Issue(
            name, line_no, "truncated_file",
            f"the file ends in the middle of a record ({type(exc).__name__}: {exc}): a truncated or corrupt "
            "compressed file; the records before this line were read"))
    finally:
        if path != "-":
            stream.close()


def _lines(stream, limit: int, position: list) -> Iterator[tuple[int, Optional[bytes]]]:
    """(line number, bytes) pairs; bytes is None for a line longer than ``limit``, whose rest is
    read and discarded in bounded chunks so one huge line cannot exhaust memory."""
    n = 0
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        n += 1
        position[0] = n
        if len(raw) > limit and not raw.endswith(b"\n"):
            while True:
                rest = stream.readline(_CHUNK)
                if not rest or rest.endswith(b"\n"):
                    break
            yield n, None
            continue
        yield n, raw


def _sniff(name: str, first: Optional[bytes]) -> str:
    lower = name.lower()
    for ext in (".gz", ".zst", ".zstd"):
        if lower.endswith(ext):
            lower = lower[: -len(ext)]
    if lower.endswith((".csv", ".tsv")):
        return "csv"
    head = (first or b"").lstrip(codecs.BOM_UTF8).lstrip()
    if head.startswith(b"["):
        return "json"
    if head.startswith(b"{") or first is None:
        return "jsonl"
    text = head[:4096].decode("utf-8", "replace").lower()
    if "," in text and any(col in text.split(",")[0:16] or f'"{col}"' in text for col in CSV_HINT_COLUMNS):
        return "csv"
    return "log"


def _decode(name: str, line_no: int, raw: Optional[bytes], limit: int) -> Item | str:
    if raw is None:
        return Item(name, line_no, "issue", issue=Issue(
            name, line_no, "line_too_long", f"line longer than {limit:,} bytes (--max-record-bytes): skipped"))
    if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        return Item(name, line_no, "issue", issue=Issue(
            name, line_no, "not_utf8", f"byte {exc.start + 1} of the line is not UTF-8 ({raw[exc.start:exc.start + 1]!r})"))


def _line_items(name: str, first, lines, kind: str, limit: int) -> Iterator[Item]:
    """JSONL (one object per line) or a text log (one log line per line)."""
    saw_record = False
    for line_no, raw in _chain(first, lines):
        text = _decode(name, line_no, raw, limit)
        if isinstance(text, Item):
            saw_record = True
            yield text
            continue
        if not text.strip():
            yield Item(name, line_no, "blank")
            continue
        if kind == "log":
            saw_record = True
            yield Item(name, line_no, "log", text)
            continue
        saw_record = True
        try:
            value = loads_record(text)
        except json.JSONDecodeError as exc:
            yield Item(name, line_no, "issue", issue=Issue(
                name, line_no, "malformed_json", f"not valid JSON: {exc.msg} at column {exc.colno}"))
            continue
        except RecursionError:
            yield Item(name, line_no, "issue", issue=Issue(name, line_no, "malformed_json", "JSON nested too deeply"))
            continue
        yield Item(name, line_no, "json", value)
    if not saw_record:
        yield _file_issue(name, "no_records", "no records in this file")


def _chain(first, rest):
    yield first
    yield from rest


def _json_array(name: str, first, stream, limit: int) -> Iterator[Item]:
    """Stream the elements of a top-level JSON array without loading the file.

    Each element is decoded with ``raw_decode``; when it fails at the end of the buffer, more
    input is read and it is retried, up to ``limit`` bytes for one element. Line numbers are
    the line where each element starts.
    """
    decoder = RECORD_DECODER
    utf8 = codecs.getincrementaldecoder("utf-8")("strict")
    first_bytes = first[1] if first[1] is not None else b""
    if first_bytes.startswith(codecs.BOM_UTF8):
        first_bytes = first_bytes[len(codecs.BOM_UTF8):]
    buf = ""
    pos = 0
    line = first[0]  # line number at buf[pos]
    eof = False

    def more() -> bool:
        nonlocal buf, eof, pos, line
        if eof:
            return False
        chunk = stream.read(_CHUNK)
        if not chunk:
            eof = True
            tail = utf8.decode(b"", final=True)
            buf += tail
            return bool(tail)
        buf = buf[pos:] + utf8.decode(chunk)
        pos = 0
        return True

    def skip_ws() -> bool:
        nonlocal pos, line
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                if buf[pos] == "\n":
                    line += 1
                pos += 1
            if pos < len(buf):
                return True
            if not more():
                return False

    try:
        buf = utf8.decode(first_bytes)
        skip_ws()
        pos += 1  # the '[' the sniffer saw
        expect_value = True
        index = 0
        while True:
            if not skip_ws():
                yield Item(name, line, "issue", issue=Issue(
                    name, line, "truncated_file", "the JSON array is not closed: the file ends early"))
                return
            if buf[pos] == "]":
                if index == 0:
                    yield _file_issue(name, "no_records", "an empty JSON array")
                return
            if not expect_value:
                if buf[pos] != ",":
                    yield Item(name, line, "issue", issue=Issue(
                        name, line, "malformed_json", f"expected ',' or ']' between array elements, got "
                        f"{buf[pos]!r}; the rest of the file is skipped"))
                    return
                pos += 1
                skip_ws()
            start_line = line
            value: Any = _TOO_DEEP
            while True:
                try:
                    value, end = decoder.raw_decode(buf, pos)
                    break
                except (RecursionError, json.JSONDecodeError) as exc:
                    if isinstance(exc, RecursionError):  # skip the element by its brackets, go on with the next
                        end = _skip_value(buf, pos)
                        if end >= 0:
                            break
                        kind, text = "truncated_file", "the JSON array is not closed: the file ends early"
                    else:
                        kind, text = "malformed_json", f"not valid JSON: {exc.msg}; the rest of the file is skipped"
                    if len(buf) - pos > limit:
                        yield Item(name, start_line, "issue", issue=Issue(
                            name, start_line, "line_too_long", f"array element longer than {limit:,} bytes; "
                            "the rest of the file is skipped"))
                        return
                    if not more():
                        yield Item(name, start_line, "issue", issue=Issue(name, start_line, kind, text))
                        return
            line += buf.count("\n", pos, end)
            pos = end
            index += 1
            expect_value = False
            if value is _TOO_DEEP:
                yield Item(name, start_line, "issue", issue=Issue(name, start_line, "malformed_json",
                                                                  "JSON nested too deeply"))
            elif isinstance(value, dict):
                yield Item(name, start_line, "json", value)
            else:
                yield Item(name, start_line, "issue", issue=Issue(
                    name, start_line, "wrong_type", f"array element {index} is a JSON {type(value).__name__}, "
                    "not an object"))
    except UnicodeDecodeError as exc:
        yield Item(name, line, "issue", issue=Issue(
            name, line, "not_utf8", f"bytes that are not UTF-8 near line {line} ({exc.reason}); the rest of the "
            "file is skipped"))


_TOO_DEEP = object()
_BRACKET_OR_QUOTE = re.compile(r'["\[\]{}]')
_STRING_REST = re.compile(r'(?:[^"\\]|\\.)*"', re.S)


def _skip_value(buf: str, pos: int) -> int:
    """The end of the array or object starting at ``buf[pos]``, found by its brackets (strings
    skipped), without decoding it: -1 when the buffer ends first. For an element nested deeper than
    the JSON decoder's recursion limit, so that only that element is skipped."""
    depth = 0
    i = pos
    while True:
        m = _BRACKET_OR_QUOTE.search(buf, i)
        if m is None:
            return -1
        c = m.group(0)
        if c == '"':
            rest = _STRING_REST.match(buf, m.end())
            if rest is None:
                return -1
            i = rest.end()
            continue
        depth += 1 if c in "[{" else -1
        i = m.end()
        if depth <= 0:
            return i


def _csv_rows(name: str, first, lines, limit: int) -> Iterator[Item]:
    """CSV with a header row. Cells are decoded leniently and a row holding undecodable bytes
    is reported as not_utf8, so one bad row does not end the file."""
    csv.field_size_limit(max(limit, 1 << 20))
    physical = [0]

    def text_lines():
        for line_no, raw in _chain(first, lines):
            physical[0] = line_no
            if raw is None:
                raise _TooLong(line_no)
            if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            yield raw.decode("utf-8", "surrogateescape")

    base = name.lower()
    for ext in (".gz", ".zst", ".zstd"):
        base = base[: -len(ext)] if base.endswith(ext) else base
    delimiter = "\t" if base.endswith(".tsv") else ","
    reader = csv.reader(text_lines(), delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        yield _file_issue(name, "empty_file", "empty CSV file")
        return
    except (csv.Error, _TooLong) as exc:
        yield _file_issue(name, "unreadable", f"cannot read the CSV header: {exc}")
        return
    header = [h.strip() for h in header]
    rows = 0
    while True:
        start = physical[0] + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except _TooLong as exc:
            yield Item(name, exc.line, "issue", issue=Issue(name, exc.line, "line_too_long",
                                                            "CSV line longer than --max-record-bytes"))
            continue
        except csv.Error as exc:
            yield Item(name, start, "issue", issue=Issue(name, start, "malformed_csv", f"not a valid CSV row: {exc}"))
            continue
        if not any(cell.strip() for cell in row):
            yield Item(name, start, "blank")
            continue
        rows += 1
        if any(_has_surrogate(cell) for cell in row):
            yield Item(name, start, "issue", issue=Issue(name, start, "not_utf8", "a cell holds bytes that are not UTF-8"))
            continue
        if len(row) != len(header):
            yield Item(name, start, "issue", issue=Issue(
                name, start, "malformed_csv", f"{len(row)} cells for {len(header)} header columns"))
            continue
        yield Item(name, start, "csv", dict(zip(header, row)))
    if rows == 0:
        yield _file_issue(name, "no_records", "a CSV header but no rows")


class _TooLong(Exception):
    def __init__(self, line: int):
        super().__init__(f"line {line} is longer than --max-record-bytes")
        self.line = line


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True
