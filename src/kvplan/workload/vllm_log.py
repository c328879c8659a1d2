"""vLLM's own request logging (``--enable-log-requests`` / ``--enable-log-outputs``), read back.

The formats, from ``vllm/entrypoints/logger.py`` (≤ 0.10) and
``vllm/entrypoints/serve/utils/request_logger.py`` (0.11 … 0.33):

* old, one INFO line per request::

    Received request <id>: prompt: '<repr>', params: SamplingParams(..., max_tokens=512, ...),
    prompt_token_ids: [1, 2, ...], [prompt_embeds shape: None, ]lora_request: None[, prompt_adapter_request: None].

  (0.4 wrote ``sampling_params:`` instead of ``params:``.)
* 0.11+: INFO ``Received request <id>: params: SamplingParams(...), lora_request: None.`` and, at
  DEBUG only, ``Request <id> details: prompt: '<repr>', prompt_token_ids: [...], prompt_embeds
  shape: None.`` and ``Request <id> JSON body: {...}``.
* outputs: ``Generated response <id>[ (streaming complete)]: output: '<repr>', [output_token_ids:
  [...], ]finish_reason: stop`` and, at DEBUG (0.11+), ``Generated response <id> details:
  output_token_ids: [...]``. Streaming deltas are ignored; the complete line carries the text.

A request's lines are joined by id. Pending requests are kept in a bounded window (the oldest
is emitted with what is known when the window is full), so memory stays flat on any log.
Prompts are Python ``repr`` literals and are decoded with ``ast.literal_eval`` (never eval).
"""
from __future__ import annotations

import ast
import json
import re
from collections import OrderedDict
from datetime import datetime
from typing import Any, Optional

from .sources import loads_record

_STR = r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|None)"""
_IDS = r"(?:\[[0-9,\s]*\]|None)"
_RECEIVED = re.compile(r"Received request (?P<id>\S+?): ")
_OLD_BODY = re.compile(rf"prompt: (?P<prompt>{_STR}), (?:sampling_)?params: (?P<params>.*?), "
                       rf"prompt_token_ids: (?P<ids>{_IDS})(?:, prompt_embeds shape: [^,]*)?, lora_request: ", re.S)
_NEW_BODY = re.compile(r"params: (?P<params>.*?), lora_request: ", re.S)
_DETAILS = re.compile(rf"Request (?P<id>\S+?) details: prompt: (?P<prompt>{_STR}), prompt_token_ids: (?P<ids>{_IDS})",
                      re.S)
_JSON_BODY = re.compile(r"Request (?P<id>\S+?) JSON body: (?P<json>\{.*)$", re.S)
_GENERATED = re.compile(rf"Generated response (?P<id>\S+?)(?P<stream> \(streaming (?:delta|complete)\))?: "
                        rf"output: (?P<out>{_STR}), (?:output_token_ids: (?P<ids>{_IDS}), )?"
                        r"finish_reason: (?P<finish>\S+?)\.?\s*$", re.S)
_GENERATED_DETAILS = re.compile(rf"Generated response (?P<id>\S+?)(?: \(streaming (?:delta|complete)\))? details: "
                                rf"output_token_ids: (?P<ids>{_IDS})")
_MAX_TOKENS = re.compile(r"\bmax_tokens=(\d{1,15}|None)\b")
# vLLM's prefix: "INFO 07-09 09:47:45 [file.py:39]" (year-less), or an ISO stamp from a log shipper.
_STAMP = re.compile(r"(?:INFO|DEBUG|WARNING)\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_ISO = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)")
MARKERS = ("Received request ", "Generated response ", " details: prompt: ", " JSON body: ")


def looks_like_vllm_line(text: str) -> bool:
    return any(m in text for m in MARKERS)


def _literal(text: Optional[str]) -> Optional[str]:
    if text is None or text == "None":
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, str) else None


def _count_ids(ids: Optional[str]) -> Optional[int]:
    if ids is None or ids == "None":
        return None
    inner = ids.strip()[1:-1].strip()
    return inner.count(",") + 1 if inner else 0


def _timestamp(line: str) -> Optional[float]:
    m = _ISO.search(line[:80])
    if m:
        try:
            return datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    m = _STAMP.search(line[:200])
    if m:
        mon, day, hh, mm, ss = (int(g) for g in m.groups())
        # vLLM's stamp has no year: seconds since the start of a leap year, enough for rates.
        try:
            return datetime(2000, mon, day, hh, mm, ss).timestamp()
        except ValueError:
            return None
    return None


class VllmLogAssembler:
    """Joins a request's log lines by id into one entry (a dict) once its output is logged."""

    def __init__(self, window: int = 4096):
        self.window = window
        self.pending: "OrderedDict[str, dict[str, Any]]" = OrderedDict()

    def _entry(self, rid: str, file: str, line: int) -> dict[str, Any]:
        entry = self.pending.get(rid)
        if entry is None:
            entry = {"id": rid, "file": file, "line": line}
            self.pending[rid] = entry
        return entry

    def feed(self, text: str, file: str, line: int) -> Optional[list[dict[str, Any]]]:
        """The entries completed by this line ([] if none); None when the line is not a vLLM
        request-log line at all (the caller counts it as ignored)."""
        done: list[dict[str, Any]] = []
        at = text.find("Received request ")
        if at >= 0:
            m = _RECEIVED.match(text, at)
            if not m:
                return None
            entry = self._entry(m.group("id"), file, line)
            entry.setdefault("timestamp", _timestamp(text))
            rest = text[m.end():]
            old = _OLD_BODY.match(rest)
            if old:
                entry["prompt"] = _literal(old.group("prompt"))
                entry["prompt_token_count"] = _count_ids(old.group("ids"))
                params = old.group("params")
            else:
                new = _NEW_BODY.match(rest)
                params = new.group("params") if new else rest
            mt = _MAX_TOKENS.search(params)
            if mt:
                entry["max_tokens"] = None if mt.group(1) == "None" else int(mt.group(1))
            entry["received"] = True
            return self._evict(done)
        if "Generated response " in text:
            m = _GENERATED_DETAILS.search(text)
            if m:
                entry = self._entry(m.group("id"), file, line)
                entry["output_token_count"] = _count_ids(m.group("ids"))
                return done
            m = _GENERATED.search(text)
            if not m:
                return None
            if m.group("stream") == " (streaming delta)":
                return done  # partial text: the "(streaming complete)" line carries the whole output
            rid = m.group("id")
            entry = self._entry(rid, file, line)
            entry["output"] = _literal(m.group("out"))
            if m.group("ids") is not None and m.group("ids") != "None":
                entry["output_token_count"] = _count_ids(m.group("ids"))
            entry["finish_reason"] = m.group("finish")
            entry["generated"] = True
            if entry.get("received") or "prompt" in entry:
                done.append(self.pending.pop(rid))
            return done
        m = _DETAILS.search(text)
        if m:
            entry = self._entry(m.group("id"), file, line)
            entry["prompt"] = _literal(m.group("prompt"))
            entry["prompt_token_count"] = _count_ids(m.group("ids"))
            entry.setdefault("timestamp", _timestamp(text))
            return self._evict(done)
        m = _JSON_BODY.search(text)
        if m:
            entry = self._entry(m.group("id"), file, line)
            try:
                body = loads_record(m.group("json"))
            except (json.JSONDecodeError, RecursionError):
                body = None  # cut by --max-log-len: the prompt ids still count exactly
            if isinstance(body, dict):
                entry["body"] = body
            entry.setdefault("timestamp", _timestamp(text))
            return self._evict(done)
        return None

    def _evict(self, done: list) -> list:
        while len(self.pending) > self.window:
            _, entry = self.pending.popitem(last=False)
            done.append(entry)
        return done

    def flush(self) -> list[dict[str, Any]]:
        out = list(self.pending.values())
        self.pending.clear()
        return out
