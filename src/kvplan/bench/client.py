"""One request against an OpenAI-compatible server, timed and classified (aiohttp).

aiohttp rather than httpx: on this 2-core machine it sustains several times the streaming
request rate of httpx (benchmarks/loadgen_capacity.py measures both clients). Timestamps are
``time.monotonic()`` offsets from the run's ``t0``; the clock is system-wide on Linux, so worker
processes share the time axis.

Every request ends as exactly one :class:`Record`, successful or not: failures are classified
(:data:`ERROR_CLASSES`) and counted, never dropped.
"""
from __future__ import annotations

import asyncio
import errno
import json
import time
from typing import Optional

import aiohttp

from .sse import SSEParser

#: every way a request can fail; ``http_<status>`` stands for any non-200 answer.
#: How long an idle connection is kept for reuse: under the 5 s after which vLLM's API server
#: closes one (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, uvicorn's timeout_keep_alive; read in 0.12 and 0.32).
#: aiohttp keeps them 15 s, and a connection the server has closed but whose close the client's
#: event loop has not yet read (a starved host) is reused and fails with ServerDisconnectedError.
#: aiohttp drops a pooled connection older than this on reuse.
KEEPALIVE_S = 3.0


def connector(**kwargs) -> aiohttp.TCPConnector:
    """The connection pool of every kvplan client of a server (bench, profile, bench's scrapes)."""
    return aiohttp.TCPConnector(keepalive_timeout=KEEPALIVE_S, **kwargs)


ERROR_CLASSES = (
    "connect_refused",  # nothing listens on the port (server down)
    "connect_error",  # other connection failures (DNS, unreachable, reset during connect)
    "timeout",  # --timeout exceeded (connect, headers or stream)
    "http_<status>",  # non-200 answer; detail keeps the first 500 bytes of the body
    "broken_stream",  # connection closed before [DONE] (or before the full body)
    "malformed_sse",  # bytes that are not a valid event stream / data that is not JSON
    "stream_error",  # the server reported an error inside the stream ({"error": ...})
    "truncated",  # finish_reason "length" before max_tokens: the context window cut the answer
    "empty_output",  # a 200 answer without a single output token
    "overlong_output",  # more output than asked for: chunks beyond max_tokens, a body over MAX_BODY_BYTES
    "cancelled",  # in flight when the run was interrupted
    "client_error",  # anything else the client raised (detail says what)
)
DETAIL_MAX = 500
#: A non-streamed answer larger than this is not one answer to max_tokens (a server that never ends
#: its body grew the client by 4.86 GB in the --timeout): read no further, count overlong_output.
MAX_BODY_BYTES = 4 << 20
#: One event's bytes (its data lines together); vLLM's are a few hundred bytes.
MAX_EVENT_BYTES = 1 << 20
#: Text chunks a request may stream: each carries at least one token, so more than max_tokens means
#: the server ignores it (the slack covers servers that split a token's text).
CHUNK_SLACK = 64


def max_chunks(max_tokens: Optional[int]) -> int:
    return 2 * (max_tokens or 0) + CHUNK_SLACK


async def read_capped(resp: aiohttp.ClientResponse, limit: int) -> Optional[bytes]:
    """The body, or None as soon as it passes ``limit`` bytes (the rest is not read)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


def redirect_detail(resp: aiohttp.ClientResponse, base_url: str) -> str:
    """What a 3xx answer says: kvplan does not follow it (the key would go with it)."""
    where = resp.headers.get("Location", "")
    return (f"redirected to {where[:200] or '(no Location)'}: kvplan sends no request (and no key) to where a "
            f"server redirects; if that is the server, pass --url {_origin(where, base_url)}")


def _origin(location: str, base_url: str) -> str:
    from urllib.parse import urljoin, urlsplit

    target = urlsplit(urljoin(base_url + "/", location))
    return f"{target.scheme}://{target.netloc}" if target.netloc else base_url


class Record:
    """The timeline and outcome of one request. Times are seconds from the run's t0."""

    __slots__ = ("i", "worker", "warmup", "scheduled", "sent", "first_token", "last_token", "end", "chunk_times",
                 "prompt_tokens", "output_tokens", "chunks", "max_tokens", "finish_reason", "status", "error",
                 "detail", "usage_missing", "resent")

    def __init__(self, i: int, worker: int, scheduled: float, warmup: bool, max_tokens: int):
        self.i = i
        self.worker = worker
        self.warmup = warmup
        self.scheduled = scheduled
        self.sent: Optional[float] = None
        self.first_token: Optional[float] = None
        self.last_token: Optional[float] = None
        self.end: Optional[float] = None
        self.chunk_times: list[float] = []
        self.prompt_tokens: Optional[int] = None
        self.output_tokens: Optional[int] = None
        self.chunks = 0
        self.max_tokens = max_tokens
        self.finish_reason: Optional[str] = None
        self.status: Optional[int] = None
        self.error: Optional[str] = None
        self.detail: Optional[str] = None
        self.usage_missing = False
        self.resent = False  # sent again after a pooled connection the server had closed (execute)

    @property
    def ok(self) -> bool:
        return self.error is None

    # vLLM's definitions (benchmarks/serve.py): TTFT from the send; TPOT over tokens after the first.
    @property
    def lag(self) -> Optional[float]:
        return None if self.sent is None else self.sent - self.scheduled

    @property
    def ttft(self) -> Optional[float]:
        return None if self.first_token is None or self.sent is None else self.first_token - self.sent

    @property
    def e2e(self) -> Optional[float]:
        return None if self.end is None or self.sent is None else self.end - self.sent

    @property
    def tpot(self) -> Optional[float]:
        n = self.output_tokens
        if not self.ok or n is None or n < 2 or self.ttft is None or self.e2e is None:
            return None
        return (self.e2e - self.ttft) / (n - 1)

    def itls(self) -> list[float]:
        c = self.chunk_times
        return [b - a for a, b in zip(c, c[1:])]

    def to_dict(self) -> dict:
        r6 = _r6
        return {
            "i": self.i, "worker": self.worker, "warmup": self.warmup, "ok": self.ok, "error": self.error,
            "detail": self.detail, "status": self.status, "scheduled": r6(self.scheduled), "sent": r6(self.sent),
            "lag": r6(self.lag), "first_token": r6(self.first_token), "last_token": r6(self.last_token),
            "end": r6(self.end), "ttft": r6(self.ttft), "tpot": r6(self.tpot), "e2e": r6(self.e2e),
            "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens, "chunks": self.chunks,
            "max_tokens": self.max_tokens, "finish_reason": self.finish_reason, "usage_missing": self.usage_missing,
            "resent": self.resent,
            "itl": [r6(x) for x in self.itls()],
        }


def _r6(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 6)


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """(error class, detail) for an exception raised while sending or reading a request."""
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout", type(exc).__name__
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_err = getattr(exc, "os_error", None)
        refused = isinstance(os_err, ConnectionRefusedError) or getattr(os_err, "errno", None) == errno.ECONNREFUSED \
            or "refused" in str(exc).lower() or "connect call failed" in str(exc).lower()
        return ("connect_refused" if refused else "connect_error"), str(exc)[:DETAIL_MAX]
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionResetError,
                        aiohttp.ClientOSError)):
        return "broken_stream", f"{type(exc).__name__}: {exc}"[:DETAIL_MAX]
    if isinstance(exc, ConnectionRefusedError):
        return "connect_refused", str(exc)[:DETAIL_MAX]
    return "client_error", f"{type(exc).__name__}: {exc}"[:DETAIL_MAX]


def _absorb(rec: Record, obj: dict, t: float) -> bool:
    """Take one decoded event (or a whole non-streamed answer). True if it carried output text."""
    text = False
    for c in obj.get("choices") or ():
        if not isinstance(c, dict):
            continue
        piece = c.get("text")
        if piece is None:
            delta = c.get("delta") or c.get("message") or {}
            if isinstance(delta, dict):
                piece = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
        if piece:
            text = True
        fr = c.get("finish_reason")
        if fr:
            rec.finish_reason = fr
    usage = obj.get("usage")
    if isinstance(usage, dict):
        if usage.get("prompt_tokens") is not None:
            rec.prompt_tokens = int(usage["prompt_tokens"])
        if usage.get("completion_tokens") is not None:
            rec.output_tokens = int(usage["completion_tokens"])
    if text:
        if rec.first_token is None:
            rec.first_token = t
        rec.last_token = t
        rec.chunk_times.append(t)
        rec.chunks += 1
    return text


async def execute(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict, rec: Record, t0: float,
                  stream: bool, timeout: aiohttp.ClientTimeout) -> Record:
    """Send one request and fill ``rec``. Never raises except CancelledError (after marking
    the record ``cancelled``, so the caller still counts it)."""
    now = time.monotonic
    rec.sent = now() - t0
    try:
        try:
            await _post(session, url, body, headers, rec, t0, stream, timeout)
        except aiohttp.ServerDisconnectedError:
            if rec.status is not None:
                raise
            # The server closed the connection before answering: a pooled connection it had closed
            # while idle, whose close this event loop had not yet read (a starved host; see
            # KEEPALIVE_S). The server never saw the request, so it is sent once more, as the OpenAI
            # SDK's clients do on a connection error; its latencies still count from the first send.
            rec.resent = True
            await _post(session, url, body, headers, rec, t0, stream, timeout)
    except asyncio.CancelledError:
        rec.error, rec.detail = "cancelled", "in flight when the run stopped"
        rec.end = now() - t0
        raise
    except Exception as exc:  # noqa: BLE001 - every failure becomes a classified record
        rec.error, rec.detail = classify_exception(exc)
        if rec.resent:  # the first send's fault comes first: a server that died mid-answer reads as such
            rec.detail = f"sent again after the server disconnected before answering; then {rec.detail}"[:DETAIL_MAX]
    finally:
        if rec.end is None:
            rec.end = now() - t0
    if rec.ok:
        _judge(rec)
    return rec


async def _post(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict, rec: Record, t0: float,
                stream: bool, timeout: aiohttp.ClientTimeout) -> None:
    """One POST of the request, its answer read into ``rec``."""
    now = time.monotonic
    # never follow a redirect: a POST re-sent elsewhere would be counted as this server's answer
    async with session.post(url, data=body, headers=headers, timeout=timeout, allow_redirects=False) as resp:
        rec.status = resp.status
        if resp.status != 200:
            rec.error = f"http_{resp.status}"
            if 300 <= resp.status < 400:
                rec.detail = redirect_detail(resp, url.split("/v1/")[0])
            else:
                raw = await resp.content.read(DETAIL_MAX)
                rec.detail = raw.decode("utf-8", "replace")
            return
        if stream:
            await _read_stream(resp, rec, t0)
        else:
            raw = await read_capped(resp, MAX_BODY_BYTES)
            t = now() - t0
            if raw is None:
                rec.error, rec.detail = "overlong_output", f"the answer is larger than {MAX_BODY_BYTES >> 20} MiB"
                return
            try:
                obj = json.loads(raw)
            except ValueError:
                rec.error, rec.detail = "malformed_sse", f"body is not JSON: {raw[:80]!r}"
                return
            if isinstance(obj, dict):
                _absorb(rec, obj, t)
                if obj.get("error"):
                    rec.error, rec.detail = "stream_error", json.dumps(obj["error"])[:DETAIL_MAX]


async def _read_stream(resp: aiohttp.ClientResponse, rec: Record, t0: float) -> None:
    parser = SSEParser(max_event=MAX_EVENT_BYTES)
    done = False
    now = time.monotonic
    chunk_cap = max_chunks(rec.max_tokens)
    async for chunk in resp.content.iter_any():
        t = now() - t0
        events = parser.feed(chunk)
        if parser.overflow:  # a line or an event past its cap: malformed, and nothing more is read
            rec.end = now() - t0
            rec.error, rec.detail = "malformed_sse", "; ".join(parser.problems)[:DETAIL_MAX]
            return
        for ev in events:
            data = ev.data
            if data == "[DONE]":
                done = True
                continue
            try:
                obj = json.loads(data)
            except ValueError:
                rec.error, rec.detail = "malformed_sse", f"event data is not JSON: {data[:80]!r}"
                return
            if not isinstance(obj, dict):
                rec.error, rec.detail = "malformed_sse", f"event data is not an object: {data[:80]!r}"
                return
            if obj.get("error"):
                rec.error, rec.detail = "stream_error", json.dumps(obj["error"])[:DETAIL_MAX]
                return
            _absorb(rec, obj, t)
            if rec.chunks > chunk_cap:
                rec.end = now() - t0
                rec.error, rec.detail = "overlong_output", (f"more than {chunk_cap:,} output chunks for max_tokens "
                                                            f"{rec.max_tokens}: the server does not stop at max_tokens")
                return
    parser.close()
    rec.end = now() - t0
    if parser.malformed:
        rec.error, rec.detail = "malformed_sse", "; ".join(parser.problems)[:DETAIL_MAX]
    elif not done:
        rec.error, rec.detail = "broken_stream", "stream ended without [DONE]"


def _judge(rec: Record) -> None:
    """Post-checks of a complete answer: missing usage, no output, truncation by the context."""
    if rec.output_tokens is None:
        rec.usage_missing = True
        rec.output_tokens = rec.chunks  # one token per chunk: the only fallback without a tokenizer
    if rec.output_tokens == 0 and rec.chunks == 0:
        rec.error, rec.detail = "empty_output", "200 answer without output tokens"
    elif rec.finish_reason == "length" and rec.output_tokens < rec.max_tokens:
        rec.error = "truncated"
        rec.detail = f"finish_reason=length after {rec.output_tokens} of {rec.max_tokens} tokens (context window)"
