"""One GET for the setup requests of a run (``/v1/models``, ``/version``), with the rules a load
generator holding an API key needs, on the standard library's ``http.client``.

- **No redirect is followed.** urllib copies every header, ``Authorization`` included, to wherever
  a server redirects; here a 3xx is an error that says where it pointed, so the user can pass that
  URL if it is really the server.
- **A total deadline.** A socket timeout bounds each read, not the answer: a server that sends a byte
  every few seconds kept ``/v1/models`` open for 44 s under ``--timeout 8s``. Each read here gets
  what is left of the deadline.
- **A size cap**, and every failure (refused, reset, a cut body: ``IncompleteRead``, a bad status
  line) is one :class:`HttpError` with a message, never a traceback.
"""
from __future__ import annotations

import http.client
import time
from typing import Optional
from urllib.parse import urljoin, urlsplit

MAX_SETUP_BYTES = 4 << 20


class HttpError(Exception):
    """The request failed; ``status`` the HTTP status when there was one, ``location`` a redirect's target."""

    def __init__(self, message: str, status: Optional[int] = None, location: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.location = location


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def get(url: str, headers: Optional[dict] = None, deadline_s: float = 10.0,
        max_bytes: int = MAX_SETUP_BYTES) -> tuple[int, bytes]:
    """``(status, body)`` of ``GET url`` for a 2xx or 4xx/5xx answer; raises HttpError for a
    redirect, a body over ``max_bytes``, no complete answer within ``deadline_s``, or no answer."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError(f"{url}: not an http(s) URL")
    deadline = time.monotonic() + deadline_s
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn = cls(parts.hostname, parts.port, timeout=deadline_s)
    except (ValueError, http.client.HTTPException) as exc:  # e.g. a port that is not a number
        raise HttpError(f"{url}: {exc}") from None
    try:
        conn.request("GET", path, headers=dict(headers or {}))
        _left(conn, deadline, deadline_s, url)
        resp = conn.getresponse()
        if 300 <= resp.status < 400:
            where = urljoin(url, resp.getheader("Location") or "")
            raise HttpError(f"{url} answered HTTP {resp.status}, a redirect to {where[:200]}: kvplan does not follow "
                            f"redirects (the API key would go with them); if that is the server, pass --url "
                            f"{origin(where)}", resp.status, where)
        body = bytearray()
        while True:
            _left(conn, deadline, deadline_s, url)
            chunk = resp.read1(65536)
            if not chunk:
                break
            body += chunk
            if len(body) > max_bytes:
                raise HttpError(f"{url}: the answer is larger than {max_bytes >> 20} MiB", resp.status)
        if resp.length:  # the connection closed before the Content-Length it announced
            raise http.client.IncompleteRead(bytes(body[-20:]), resp.length)
        return resp.status, bytes(body)
    except HttpError:
        raise
    except (OSError, http.client.HTTPException, ValueError) as exc:  # refused, reset, timeout, IncompleteRead
        if time.monotonic() >= deadline or isinstance(exc, TimeoutError):
            raise HttpError(f"{url}: no complete answer within {deadline_s:g} s") from None
        raise HttpError(f"{url}: {type(exc).__name__}: {str(exc)[:200]}") from None
    finally:
        conn.close()


def _left(conn: http.client.HTTPConnection, deadline: float, deadline_s: float, url: str) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise HttpError(f"{url}: no complete answer within {deadline_s:g} s")
    if conn.sock is not None:
        conn.sock.settimeout(left)
