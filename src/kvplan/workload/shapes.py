"""Record shapes → :class:`Request`: what one request sent and, when logged, what came back.

Shapes recognised (auto-detected per record, or forced with ``--input-format``):

* ``openai-chat``: a chat completion body (``messages``, ``max_completion_tokens``/``max_tokens``,
  ``tools``, ``chat_template_kwargs``), alone or inside ``request``/``body`` next to a
  ``response`` (OpenAI batch files included);
* ``openai-completion``: a completion body (``prompt``: text, token ids, or a list of either);
* ``usage``: a record with only server-reported ``usage`` (``prompt_tokens``/``completion_tokens``,
  or ``input_tokens``/``output_tokens``);
* ``sharegpt``: ``conversations`` of ``{"from", "value"}`` turns. One conversation becomes one
  request per human turn (the history so far, answered by the next gpt turn), as a chat server
  sees it;
* ``text``: ``{"prompt": ...}`` or ``{"text": ...}`` treated as raw text;
* ``vllm-log``: vLLM's request-log lines (see :mod:`kvplan.workload.vllm_log`).

Type errors raise :class:`RecordError` naming the field, so the reader can count and go on.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from .issues import RecordError
from .sources import loads_record

SHAPES = ("auto", "openai-chat", "openai-completion", "usage", "sharegpt", "text", "vllm-log")
SESSION_FIELDS = ("session_id", "conversation_id", "session", "thread_id", "chat_id", "conversation")
TIMESTAMP_FIELDS = ("timestamp", "time", "ts", "created_at", "request_time", "start_time", "created")
DURATION_FIELDS = ("latency_ms", "duration_ms", "latency", "duration", "e2e_latency", "elapsed", "latency_s")
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
                  "bing": "assistant", "bard": "assistant", "model": "assistant", "system": "system",
                  "tool": "tool", "observation": "tool", "function": "tool", "function_call": "assistant"}
COMPLETION_DEFAULT_MAX_TOKENS = 16  # vLLM's CompletionRequest.max_tokens default (OpenAI's too)


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the server saw it. Counts set here are server-reported (exact)."""

    file: str
    line: int
    shape: str
    messages: Optional[tuple] = None  # chat messages, as sent
    prompt: Optional[str] = None  # raw prompt text (completions, plain text, vLLM's logged prompt)
    add_special_tokens: bool = False  # vLLM: False for chat, True for completions
    tools: Optional[list] = None
    template_kwargs: Optional[dict] = None  # chat_template_kwargs, add_generation_prompt, …
    max_tokens: Optional[int] = None
    prompt_tokens: Optional[int] = None  # server-reported (usage, or vLLM's prompt_token_ids)
    output_tokens: Optional[int] = None  # server-reported (usage, or vLLM's output_token_ids)
    output_text: Optional[str] = None
    finish_reason: Optional[str] = None
    timestamp: Optional[float] = None
    duration: Optional[float] = None  # seconds
    session: Optional[str] = None
    turn: Optional[int] = None  # 1-based turn index in its conversation, when known
    multimodal: bool = False


@dataclass(frozen=True)
class FieldNames:
    """Where the optional fields live (``--session-field`` etc.); dotted paths are allowed."""

    session: Optional[str] = None
    timestamp: Optional[str] = None
    duration: Optional[str] = None


def _get_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _first(obj: dict, names, explicit: Optional[str]) -> tuple[Optional[str], Any]:
    if explicit:
        return explicit, _get_path(obj, explicit)
    for scope in (obj, obj.get("metadata") if isinstance(obj.get("metadata"), dict) else None):
        if scope is None:
            continue
        for name in names:
            if scope.get(name) is not None:
                return name, scope[name]
    return None, None


#: no model serves a longer context (Llama 4 Scout's 10M tokens is the longest published): a token
#: count above it is a logging or unit error, and one such record would set every percentile
MAX_PLAUSIBLE_TOKENS = 10_000_000
#: a timestamp beyond this many seconds from 1970 (either way) is not one (the year 5138)
MAX_EPOCH_S = 1e11


def _int(value: Any, field: str, allow_none: bool = True) -> Optional[int]:
    """A token count from a record: a non-negative integer no longer than any model's context."""
    if value is None or value == "":
        if allow_none:
            return None
        raise RecordError("wrong_type", f"{field} is missing")
    if isinstance(value, bool):
        raise RecordError("wrong_type", f"{field} must be an integer, got {value!r}")
    if isinstance(value, float) and value.is_integer() and value >= 0:
        value = int(value)
    # isdigit() alone accepts "¹" and other Unicode digits that int() refuses: ASCII only.
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value.strip()) <= 15:
        value = int(value.strip())
    if isinstance(value, int):
        if value < 0:
            raise RecordError("wrong_type", f"{field} must not be negative, got {value}")
        return plausible_tokens(value, field)
    raise RecordError("wrong_type", f"{field} must be an integer, got {type(value).__name__} {str(value)[:40]!r}")


def plausible_tokens(value: Optional[int], field: str) -> Optional[int]:
    """``value``, or a RecordError ("implausible_length") when no model could serve it."""
    if value is not None and value > MAX_PLAUSIBLE_TOKENS:
        raise RecordError("implausible_length", f"{field} {value:,} is above {MAX_PLAUSIBLE_TOKENS:,} tokens, longer "
                          "than any model's context: a logging or unit error, left out of every count")
    return value


def parse_time(value: Any, field: str = "timestamp") -> Optional[float]:
    """Seconds since the epoch from a number (seconds, or milliseconds when > 10^11) or an ISO 8601
    string. An unreadable timestamp is a type error, not a silent None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise RecordError("wrong_type", f"{field} must be a number or ISO 8601 time, got {value!r}")
    if isinstance(value, (int, float)):
        try:
            v = float(value)
        except OverflowError:
            v = math.inf
        v = v / 1000.0 if v > 1e11 else v
        if not -MAX_EPOCH_S <= v <= MAX_EPOCH_S:  # also NaN and infinities
            raise RecordError("wrong_type", f"{field}: {str(value)[:40]} is not a time (seconds or milliseconds "
                              "since 1970)")
        return v
    if isinstance(value, str):
        text = value.strip()
        try:
            return parse_time(float(text), field)
        except ValueError:
            pass
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError, OSError):
            pass
    raise RecordError("wrong_type", f"{field}: cannot read {str(value)[:40]!r} as a time")


def _duration(name: Optional[str], value: Any) -> Optional[float]:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise RecordError("wrong_type", f"{name}: cannot read {value[:40]!r} as a duration") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_EPOCH_S:
        raise RecordError("wrong_type", f"{name} must be a non-negative number of seconds, got {str(value)[:40]}")
    return float(value) / 1000.0 if name and name.endswith("_ms") else float(value)


def _messages(value: Any, field: str = "messages") -> tuple:
    if not isinstance(value, list):
        raise RecordError("wrong_type", f"{field} must be a list, got {type(value).__name__}")
    if not value:
        raise RecordError("empty_prompt", f"{field} is an empty list")
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise RecordError("wrong_type", f"{field}[{i}] must be an object, got {type(m).__name__}")
        if not isinstance(m.get("role"), str):
            raise RecordError("wrong_type", f"{field}[{i}].role must be a string")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise RecordError("wrong_type", f"{field}[{i}].content must be a string or a list of parts, "
                              f"got {type(content).__name__}")
    return tuple(value)


def _is_multimodal(messages: tuple) -> bool:
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") not in (None, "text", "input_text", "output_text"):
                    return True
    return False


def user_turns(messages) -> int:
    return sum(1 for m in messages if m.get("role") == "user")


def _response_fields(obj: dict, resp: Any) -> dict:
    """Usage, completion text and finish reason from a response object (or the record itself)."""
    out: dict[str, Any] = {}
    if isinstance(resp, dict) and isinstance(resp.get("body"), dict):
        resp = resp["body"]  # OpenAI batch output: {"response": {"status_code", "body"}}
    usage = None
    for scope in (resp if isinstance(resp, dict) else None, obj):
        if isinstance(scope, dict) and scope.get("usage") is not None:
            usage = scope["usage"]
            break
    if usage is not None:
        if not isinstance(usage, dict):
            raise RecordError("wrong_type", f"usage must be an object, got {type(usage).__name__}")
        pt = usage.get("prompt_tokens", usage.get("input_tokens"))
        ct = usage.get("completion_tokens", usage.get("output_tokens"))
        out["prompt_tokens"] = _int(pt, "usage.prompt_tokens")
        out["output_tokens"] = _int(ct, "usage.completion_tokens")
    if isinstance(resp, str):
        out["output_text"] = resp
    elif isinstance(resp, dict):
        choices = resp.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            c = choices[0]
            msg = c.get("message")
            if isinstance(msg, dict):
                text = msg.get("content")
                out["output_text"] = text if isinstance(text, str) else None
                if msg.get("tool_calls") and not text:
                    out["output_text"] = json.dumps(msg["tool_calls"], ensure_ascii=False)
            elif isinstance(c.get("text"), str):
                out["output_text"] = c["text"]
            if c.get("finish_reason") is not None:
                out["finish_reason"] = str(c["finish_reason"])
        elif isinstance(resp.get("content"), str):
            out["output_text"] = resp["content"]
        if resp.get("stop_reason") is not None and "finish_reason" not in out:
            out["finish_reason"] = "length" if resp["stop_reason"] == "max_tokens" else str(resp["stop_reason"])
    for key in ("completion", "output_text", "completion_text"):
        if "output_text" not in out and isinstance(obj.get(key), str):
            out["output_text"] = obj[key]
    if "finish_reason" not in out and obj.get("finish_reason") is not None:
        out["finish_reason"] = str(obj["finish_reason"])
    return out


def _common(obj: dict, req: dict, names: FieldNames) -> dict:
    out: dict[str, Any] = {}
    sname, session = _first(obj, SESSION_FIELDS, names.session)
    if session is None and req is not obj:
        sname, session = _first(req, SESSION_FIELDS, names.session)
    if session is not None:
        out["session"] = str(session) if isinstance(session, (str, int)) else json.dumps(session, sort_keys=True)
    tname, ts = _first(obj, TIMESTAMP_FIELDS, names.timestamp)
    if ts is None and req is not obj:
        tname, ts = _first(req, TIMESTAMP_FIELDS, names.timestamp)
    out["timestamp"] = parse_time(ts, tname or "timestamp")
    dname, dur = _first(obj, DURATION_FIELDS, names.duration)
    out["duration"] = _duration(dname, dur)
    return out


def _max_tokens(req: dict) -> Optional[int]:
    # vLLM: max_completion_tokens wins when both are given.
    if req.get("max_completion_tokens") is not None:
        return _int(req["max_completion_tokens"], "max_completion_tokens")
    return _int(req.get("max_tokens"), "max_tokens")


def from_json(obj: dict, file: str, line: int, shape: str = "auto", names: FieldNames = FieldNames()) -> list[Request]:
    """The request(s) in one JSON object (a ShareGPT conversation or a batch prompt gives several)."""
    if not isinstance(obj, dict):
        raise RecordError("wrong_type", f"a JSON {type(obj).__name__}, not an object")
    req = obj
    for key in ("request", "body", "req"):
        if isinstance(obj.get(key), dict):
            req = obj[key]
            break
    resp = obj.get("response", obj.get("resp", obj.get("output")))
    if shape == "auto":
        shape = detect_shape(obj, req)
    if shape == "unknown":
        keys = ", ".join(sorted(obj)[:8]) or "none"
        raise RecordError("unknown_shape", f"no messages, prompt, text, conversations or usage field (keys: {keys})")
    common = _common(obj, req, names)
    if shape == "sharegpt":
        return _sharegpt(obj, req, file, line, common)
    fields = _response_fields(obj, resp)
    base = dict(file=file, line=line, **common, **fields)
    if shape == "openai-chat":
        if "messages" not in req:
            raise RecordError("unknown_shape", "--input-format openai-chat: no messages field")
        msgs = _messages(req["messages"])
        tools = req.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise RecordError("wrong_type", f"tools must be a list, got {type(tools).__name__}")
        kwargs = {}
        ctk = req.get("chat_template_kwargs")
        if ctk is not None:
            if not isinstance(ctk, dict):
                raise RecordError("wrong_type", "chat_template_kwargs must be an object")
            kwargs.update(ctk)
        for key in ("add_generation_prompt", "continue_final_message", "documents"):
            if req.get(key) is not None:
                kwargs[key] = req[key]
        return [Request(shape="openai-chat", messages=msgs, tools=tools or None, template_kwargs=kwargs or None,
                        add_special_tokens=bool(req.get("add_special_tokens", False)), max_tokens=_max_tokens(req),
                        turn=max(user_turns(msgs), 1), multimodal=_is_multimodal(msgs), **base)]
    if shape == "openai-completion":
        return _completion(req, base)
    if shape == "text":
        text = req.get("prompt", req.get("text"))
        if not isinstance(text, str):
            raise RecordError("wrong_type", f"prompt/text must be a string, got {type(text).__name__}")
        return [Request(shape="text", prompt=text, add_special_tokens=True, max_tokens=_max_tokens(req), **base)]
    if shape == "usage":
        if base.get("prompt_tokens") is None:
            raise RecordError("unknown_shape", "--input-format usage: no usage.prompt_tokens")
        return [Request(shape="usage", max_tokens=_max_tokens(req), **base)]
    raise RecordError("unknown_shape", f"input format {shape!r} is not a JSON record shape")


def detect_shape(obj: dict, req: dict) -> str:
    if "messages" in req:
        msgs = req["messages"]
        if isinstance(msgs, list) and msgs and isinstance(msgs[0], dict) and "from" in msgs[0]:
            return "sharegpt"
        return "openai-chat"
    if "conversations" in obj or "conversation" in obj and isinstance(obj.get("conversation"), list):
        return "sharegpt"
    if "prompt" in req:
        return "openai-completion" if ("model" in req or not isinstance(req["prompt"], str)) else "text"
    if "text" in req:
        return "text"
    if isinstance(obj.get("usage"), dict) or isinstance(obj.get("response"), dict) and "usage" in obj["response"]:
        return "usage"
    return "unknown"


def _completion(req: dict, base: dict) -> list[Request]:
    prompt = req.get("prompt")
    mt = _max_tokens(req)
    if mt is None:
        mt = COMPLETION_DEFAULT_MAX_TOKENS
    special = bool(req.get("add_special_tokens", True))
    if isinstance(prompt, str):
        return [Request(shape="openai-completion", prompt=prompt, add_special_tokens=special, max_tokens=mt, **base)]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        base = dict(base, prompt_tokens=len(prompt))  # token ids: the count is exact
        return [Request(shape="openai-completion", max_tokens=mt, **base)]
    if isinstance(prompt, list) and prompt:
        out = []
        for i, p in enumerate(prompt):
            if isinstance(p, str):
                out.append(Request(shape="openai-completion", prompt=p, add_special_tokens=special, max_tokens=mt,
                                   **dict(base, prompt_tokens=None, output_tokens=None)))
            elif isinstance(p, list) and all(isinstance(t, int) for t in p):
                out.append(Request(shape="openai-completion", max_tokens=mt,
                                   **dict(base, prompt_tokens=len(p), output_tokens=None)))
            else:
                raise RecordError("wrong_type", f"prompt[{i}] must be text or a list of token ids")
        return out
    if prompt in ("", [], None):
        raise RecordError("empty_prompt", "prompt is empty")
    raise RecordError("wrong_type", f"prompt must be text or token ids, got {type(prompt).__name__}")


def _sharegpt(obj: dict, req: dict, file: str, line: int, common: dict) -> list[Request]:
    conv = obj.get("conversations", obj.get("conversation", req.get("messages")))
    if not isinstance(conv, list):
        raise RecordError("wrong_type", f"conversations must be a list, got {type(conv).__name__}")
    messages = []
    for i, turn in enumerate(conv):
        if not isinstance(turn, dict):
            raise RecordError("wrong_type", f"conversations[{i}] must be an object")
        who, value = turn.get("from", turn.get("role")), turn.get("value", turn.get("content"))
        if not isinstance(who, str) or not isinstance(value, str):
            raise RecordError("wrong_type", f"conversations[{i}] needs string 'from' and 'value'")
        role = SHAREGPT_ROLES.get(who.lower())
        if role is None:
            raise RecordError("wrong_type", f"conversations[{i}].from: unknown speaker {who!r}")
        messages.append({"role": role, "content": value})
    if not any(m["role"] == "user" for m in messages):
        raise RecordError("empty_prompt", "a conversation without a human turn")
    session = common.get("session")
    if session is None:
        cid = obj.get("id")
        session = str(cid) if isinstance(cid, (str, int)) else f"{file}:{line}"
    out = []
    turn = 0
    for i, m in enumerate(messages):
        if m["role"] != "user":
            continue
        turn += 1
        reply = messages[i + 1] if i + 1 < len(messages) and messages[i + 1]["role"] == "assistant" else None
        out.append(Request(file=file, line=line, shape="sharegpt", messages=tuple(messages[: i + 1]),
                           output_text=reply["content"] if reply else None, session=session, turn=turn,
                           timestamp=common.get("timestamp"), duration=None))
    return out


_CSV_JSON_COLUMNS = ("messages", "tools", "conversations", "request", "response", "usage", "prompt",
                     "chat_template_kwargs", "metadata")
_CSV_INT_COLUMNS = ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "max_tokens",
                    "max_completion_tokens")


def from_csv(row: dict, file: str, line: int, shape: str = "auto", names: FieldNames = FieldNames()) -> list[Request]:
    """A CSV row: JSON-looking cells of the structured columns are decoded, token columns become
    integers, and ``prompt_tokens``/``completion_tokens`` columns count as usage."""
    obj: dict[str, Any] = {}
    for key, cell in row.items():
        if cell == "":
            continue
        if key in _CSV_JSON_COLUMNS and cell.lstrip()[:1] in ("[", "{"):
            try:
                obj[key] = loads_record(cell)
            except json.JSONDecodeError as exc:
                raise RecordError("malformed_json", f"column {key!r}: not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise RecordError("malformed_json", f"column {key!r}: JSON nested too deeply") from None
        elif key in _CSV_INT_COLUMNS:
            obj[key] = _int(cell, key)
        else:
            obj[key] = cell
    usage = {k: obj.pop(k) for k in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")
             if k in obj}
    if usage and "usage" not in obj:
        obj["usage"] = usage
    return from_json(obj, file, line, shape, names)


def from_vllm_entry(entry: dict, names: FieldNames = FieldNames()) -> list[Request]:
    """One request assembled from vLLM's log lines."""
    file, line = entry["file"], entry["line"]
    body = entry.get("body")
    ids = entry.get("prompt_token_count")
    prompt = entry.get("prompt")
    if ids is None and prompt is None and not isinstance(body, dict):
        raise RecordError("no_prompt_logged", f"vLLM logged request {entry['id']} without its prompt: vLLM 0.11+ "
                          "logs prompts only at DEBUG (--log-level DEBUG / VLLM_LOGGING_LEVEL=DEBUG)")
    messages = None
    tools = None
    kwargs = None
    max_tokens = entry.get("max_tokens")
    if isinstance(body, dict):
        if isinstance(body.get("messages"), list):
            messages = _messages(body["messages"])
            tools = body.get("tools") if isinstance(body.get("tools"), list) else None
            kwargs = body.get("chat_template_kwargs") if isinstance(body.get("chat_template_kwargs"), dict) else None
        if max_tokens is None:
            max_tokens = _max_tokens(body)
    out_ids = entry.get("output_token_count")
    plausible_tokens(max_tokens, "max_tokens")
    return [Request(file=file, line=line, shape="vllm-log", messages=messages, tools=tools, template_kwargs=kwargs,
                    prompt=prompt, add_special_tokens=False, max_tokens=max_tokens,
                    prompt_tokens=ids, output_tokens=out_ids, output_text=entry.get("output"),
                    finish_reason=entry.get("finish_reason"), timestamp=entry.get("timestamp"),
                    turn=max(user_turns(messages), 1) if messages else None,
                    multimodal=_is_multimodal(messages) if messages else False)]
