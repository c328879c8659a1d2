"""Incremental Server-Sent Events parser (the WHATWG event-stream rules), fed raw network chunks.

A chunk may end anywhere: inside a UTF-8 sequence, between ``\\r`` and ``\\n``, inside a field
name. The parser keeps the partial line and only dispatches an event at a blank line, as the
spec says. It never raises on input: what a conforming server would not send (invalid UTF-8,
unknown field names, a line longer than ``max_line``, an event longer than ``max_event``) is
recorded in ``problems`` so the caller can classify the stream as malformed instead of silently
accepting it. Memory is bounded by ``max_line + max_event`` whatever the server sends.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_EOL = re.compile(rb"\r\n|\r|\n")
_KNOWN_FIELDS = frozenset(("data", "event", "id", "retry"))
MAX_PROBLEMS = 20  # keep a few examples, not every garbage line of a broken stream


@dataclass(frozen=True)
class Event:
    data: str
    event: str = "message"


class SSEParser:
    """``feed(bytes) -> list[Event]``; ``close() -> list[Event]`` at end of stream."""

    __slots__ = ("_buf", "_data", "_data_bytes", "_event", "_first", "problems", "problem_count", "max_line",
                 "max_event", "overflow")

    def __init__(self, max_line: int = 1 << 20, max_event: int = 1 << 20):
        self._buf = b""
        self._data: list[str] = []
        self._data_bytes = 0
        self._event = ""
        self._first = True
        self.problems: list[str] = []
        self.problem_count = 0
        self.max_line = max_line
        self.max_event = max_event
        self.overflow = False  # a line or an event passed its cap (what was held of it is dropped)

    def feed(self, chunk: bytes) -> list[Event]:
        buf = self._buf + chunk if self._buf else chunk
        events: list[Event] = []
        pos = 0
        n = len(buf)
        for m in _EOL.finditer(buf):
            if m.end() == n and buf[m.start():m.end()] == b"\r":
                break  # may be the first half of \r\n: wait for the next chunk
            self._line(buf[pos:m.start()], events)
            pos = m.end()
        rest = buf[pos:]
        if len(rest) > self.max_line:
            self._problem(f"line longer than {self.max_line} bytes")
            self.overflow = True
            rest = b""
        self._buf = rest
        return events

    def close(self) -> list[Event]:
        """End of stream. A trailing line is processed; an event without its blank line is
        discarded (spec), and reported as a problem since a server must terminate events."""
        events: list[Event] = []
        if self._buf:
            line = self._buf[:-1] if self._buf.endswith(b"\r") else self._buf
            self._buf = b""
            self._line(line, events)
        if self._data:
            self._problem("stream ended inside an event (no blank line after it)")
            self._data = []
        return events

    @property
    def malformed(self) -> bool:
        return self.problem_count > 0

    # ------------------------------------------------------------------ internals
    def _problem(self, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    def _line(self, raw: bytes, events: list[Event]) -> None:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            self._problem("invalid UTF-8")
            line = raw.decode("utf-8", "replace")
        if self._first:
            self._first = False
            if line.startswith("\ufeff"):
                line = line[1:]
        if not line:
            if self._data:
                events.append(Event("\n".join(self._data), self._event or "message"))
            self._data = []
            self._data_bytes = 0
            self._event = ""
            return
        if line[0] == ":":
            return  # comment (keep-alive)
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_bytes += len(value) + 1
            if self._data_bytes > self.max_event:  # an event that never ends: dropped, never dispatched
                if not self.overflow:
                    self._problem(f"event longer than {self.max_event} bytes (no blank line ends it)")
                self.overflow = True
                self._data = []
                return
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name in _KNOWN_FIELDS:
            pass  # id / retry: nothing to do for a load generator
        else:
            self._problem(f"unknown field {name[:40]!r}")


def encode_event(data: str, eol: str = "\n") -> bytes:
    """Serialise one event (used by the fake server and the property tests)."""
    lines = data.split("\n")
    return ("".join(f"data: {ln}{eol}" for ln in lines) + eol).encode("utf-8")
