"""``kvplan trim``: apply :func:`trim_messages` to every chat request of a JSONL stream."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Optional

from .chat_template import TemplateError
from .issues import Issue, RecordError
from .shapes import _int, _messages
from .sources import expand_paths, read_items
from .trim import trim_messages

NO_ROOM = "max_tokens_exceeds_budget"  # the record's own reason (not a malformed one)


@dataclass
class TrimSummary:
    read: int = 0
    written: int = 0
    trimmed: int = 0
    unchanged: int = 0
    passed_through: int = 0  # no messages: written as they came
    not_fitting: int = 0  # even the last turn is too long: written with that turn only
    no_room_for_output: int = 0  # max_tokens >= the budget: no prompt fits (written with the last turn)
    dropped_turns: int = 0
    dropped_messages: int = 0
    skipped: Counter = field(default_factory=Counter)
    issues: list = field(default_factory=list)
    failed_strict: bool = False
    estimated: bool = False  # counted by characters per token (no tokenizer)

    def line(self) -> str:
        skipped = ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items())) or "none"
        head = "\n".join(f"kvplan: {i}" for i in self.issues[:10])
        return ((head + "\n") if head else "") + (
            f"kvplan trim: {self.read:,} records read, {self.written:,} written: {self.trimmed:,} trimmed "
            f"({self.dropped_turns:,} turns, {self.dropped_messages:,} messages dropped), {self.unchanged:,} already "
            f"fit, {self.not_fitting:,} do not fit even with their last turn"
            + (f" ({self.no_room_for_output:,} of them reserve max_tokens >= the budget)" if self.no_room_for_output
               else "")
            + f", {self.passed_through:,} without messages passed through; skipped: {skipped}"
            + ("\nkvplan trim: ESTIMATE: no tokenizer, so every count is characters per token, not the model's "
               "tokenizer and chat template: a kept request can be a few percent over the budget; give --tokenizer "
               "for exact counts" if self.estimated else ""))


def run_trim(paths, tokenizer, budget: int, out: IO[str], reserve_output: Optional[int] = None,
             max_turns: Optional[int] = None, keep_system: bool = True, strict: bool = False) -> TrimSummary:
    from .tokenizer import Estimator

    s = TrimSummary(estimated=isinstance(tokenizer, Estimator))

    def bad(issue: Issue) -> bool:
        s.skipped[issue.reason] += 1
        s.issues.append(issue)
        if strict:
            s.failed_strict = True
        return strict

    for item in read_items(expand_paths(list(paths), require_existing=True), container="jsonl"):
        if item.kind == "blank":
            continue
        if item.kind == "issue":
            if item.line:
                s.read += 1
            if bad(item.issue):
                return s
            continue
        s.read += 1
        obj = item.value
        if not isinstance(obj, dict):
            if bad(Issue(item.file, item.line, "wrong_type", "not a JSON object")):
                return s
            continue
        req = next((obj[k] for k in ("request", "body") if isinstance(obj.get(k), dict)), obj)
        if "messages" not in req:
            out.write(json.dumps(obj, ensure_ascii=False) + "\n")
            s.written += 1
            s.passed_through += 1
            continue
        try:
            msgs = _messages(req["messages"])
            mt = req.get("max_completion_tokens", req.get("max_tokens"))
            reserve = reserve_output if reserve_output is not None else (_int(mt, "max_tokens") or 0)
            if reserve >= budget:
                # Not a malformed record: its output budget alone fills the context (vLLM answers 400
                # whatever the prompt). Like any request that cannot fit, it is written with its last
                # turn and counted; the issue line says why.
                s.no_room_for_output += 1
                s.issues.append(Issue(item.file, item.line, NO_ROOM,
                                      f"max_tokens {reserve:,} leaves no room for a prompt in a budget of "
                                      f"{budget:,}: written with its last turn only (vLLM would answer 400)"))
            res = trim_messages(msgs, budget, tokenizer, keep_system=keep_system, max_turns=max_turns,
                                reserve_output=reserve, tools=req.get("tools") or None,
                                **(req.get("chat_template_kwargs") or {}))
        except RecordError as exc:
            if bad(Issue(item.file, item.line, exc.reason, exc.message)):
                return s
            continue
        except TemplateError as exc:
            if bad(Issue(item.file, item.line, "template_error", str(exc))):
                return s
            continue
        req["messages"] = list(res.messages)
        out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        s.written += 1
        if not res.fits:
            s.not_fitting += 1
        if res.dropped_messages:
            s.trimmed += 1
            s.dropped_turns += res.dropped_turns
            s.dropped_messages += len(res.dropped_messages)
        elif res.fits:
            s.unchanged += 1
    return s
