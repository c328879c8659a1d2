"""Trim a conversation's history to a token budget, measured with the real chat template.

A *turn* starts at a user message and runs to the next one: the assistant's answer, its tool
calls and their results all belong to it, so keeping whole turns never separates a tool call
from its result. Leading system (or developer) messages are the system prompt; messages before
the first user message form a turn of their own. The kept history is always a suffix of whole
turns: the longest one whose rendered prompt fits ``budget_tokens - reserve_output``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from .chat_template import TemplateError

SYSTEM_ROLES = ("system", "developer")
EXACT_SCAN_TURNS = 32  # up to this many turns every suffix is counted (one encode batch)


@dataclass(frozen=True)
class TrimResult:
    messages: tuple  # the trimmed conversation (system prompt + kept turns)
    tokens: int  # its prompt tokens, with the template
    limit: int  # budget_tokens - reserve_output
    fits: bool
    kept_turns: int
    dropped_turns: int
    dropped_messages: tuple  # what was removed, in order
    system_kept: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "limit": self.limit, "fits": self.fits, "kept_turns": self.kept_turns,
                "dropped_turns": self.dropped_turns, "dropped_messages": len(self.dropped_messages),
                "system_kept": self.system_kept, "note": self.note}


def split_turns(messages: Sequence[dict]) -> tuple[list[dict], list[list[dict]]]:
    """(system prompt messages, turns)."""
    msgs = list(messages)
    i = 0
    while i < len(msgs) and msgs[i].get("role") in SYSTEM_ROLES:
        i += 1
    system, rest = msgs[:i], msgs[i:]
    turns: list[list[dict]] = []
    for m in rest:
        if m.get("role") == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return system, turns


def trim_messages(messages: Sequence[dict], budget_tokens: int, tokenizer, keep_system: bool = True,
                  max_turns: Optional[int] = None, reserve_output: int = 0, tools: Optional[list] = None,
                  **template_kwargs: Any) -> TrimResult:
    """The longest suffix of whole turns that fits ``budget_tokens - reserve_output`` tokens.

    ``tokenizer`` is a :class:`~kvplan.workload.tokenizer.ChatTokenizer` (exact) or an
    :class:`~kvplan.workload.tokenizer.Estimator`. The system prompt is kept when
    ``keep_system`` (and counted in the budget). ``max_turns`` caps the kept turns even when more
    would fit. When even the last turn alone does not fit, that turn is returned with
    ``fits=False``: a request cannot drop the message it is answering.
    """
    if budget_tokens < 1:
        raise ValueError(f"budget_tokens must be positive, got {budget_tokens}")
    if reserve_output < 0:
        raise ValueError(f"reserve_output must not be negative, got {reserve_output}")
    if max_turns is not None and max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    limit = budget_tokens - reserve_output
    system, turns = split_turns(messages)
    head = system if keep_system else []
    dropped_system = () if keep_system else tuple(system)
    if not turns:
        n = _count(tokenizer, head, tools, template_kwargs)
        return TrimResult(tuple(head), n, limit, n is not None and n <= limit, 0, 0, dropped_system, keep_system,
                          "no user turn to trim")
    top = len(turns) if max_turns is None else min(max_turns, len(turns))

    def build(k: int) -> list[dict]:
        return head + [m for t in turns[len(turns) - k:] for m in t]

    counts: dict[int, Optional[int]] = {}
    if top <= EXACT_SCAN_TURNS:
        batch = [(build(k), tools, template_kwargs) for k in range(1, top + 1)]
        for k, n in zip(range(1, top + 1), _count_batch(tokenizer, batch)):
            counts[k] = n
        fitting = [k for k, n in counts.items() if n is not None and n <= limit]
        best = max(fitting) if fitting else None
    else:
        # Long histories: binary search, which assumes dropping a turn never adds tokens (true of
        # every template we know: they render each message independently of the ones dropped).
        lo, hi, best = 1, top, None
        while lo <= hi:
            mid = (lo + hi) // 2
            counts[mid] = _count(tokenizer, build(mid), tools, template_kwargs)
            if counts[mid] is not None and counts[mid] <= limit:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
    k = best if best is not None else 1
    n = counts.get(k)
    if n is None:
        n = _count(tokenizer, build(k), tools, template_kwargs)
    kept = build(k)
    dropped_turn_msgs = tuple(m for t in turns[: len(turns) - k] for m in t)
    note = ""
    if best is None:
        note = (f"even the last turn alone needs {n:,} tokens, above the limit of {limit:,}"
                if n is not None else "the chat template refused the last turn")
    elif k < len(turns) and max_turns is not None and k == top:
        note = f"capped at max_turns={max_turns}"
    return TrimResult(tuple(kept), n if n is not None else -1, limit, best is not None, k, len(turns) - k,
                      dropped_system + dropped_turn_msgs, keep_system, note)


def _count(tokenizer, messages, tools, kwargs) -> Optional[int]:
    if not messages:
        return 0
    try:
        return tokenizer.count_messages(messages, tools, **kwargs)
    except TemplateError:
        return None


def _count_batch(tokenizer, batch) -> list[Optional[int]]:
    try:
        return list(tokenizer.count_message_batch(batch))
    except TemplateError:
        return [_count(tokenizer, m, t, kw) for m, t, kw in batch]
