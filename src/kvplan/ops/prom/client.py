"""A small Prometheus HTTP API client on urllib (no new dependency).

Every request goes to the URL the user gave (``--prometheus URL``; its path is kept, so a
Prometheus behind ``/prometheus`` works). Queries are POSTed as form data (Prometheus accepts
``application/x-www-form-urlencoded`` on every query endpoint), so long PromQL never hits URL
length limits. Failures raise :class:`PromError` naming the Prometheus URL and the query:
unreachable, HTTP errors (Prometheus' own error text when it sent one), malformed answers.
"""
from __future__ import annotations

import http.client
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional, Sequence

from .parse import PromResponseError, Result, parse_response

MAX_BODY = 64 << 20  # a query answer larger than this is refused (ask a shorter range / larger step)


class PromError(RuntimeError):
    """Prometheus could not answer ``query``; ``unreachable`` when no answer came at all."""

    def __init__(self, url: str, query: str, why: str, unreachable: bool = False) -> None:
        self.url, self.query, self.why, self.unreachable = url, query, why, unreachable
        super().__init__(f"Prometheus at {url}: query {query!r}: {why}")


class PromClient:
    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"--prometheus: expected an http(s) URL, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _post(self, path: str, form: Sequence[tuple[str, str]], query: str, endpoint: str) -> Result:
        target = self.url + path
        data = urllib.parse.urlencode(list(form)).encode()
        req = urllib.request.Request(target, data=data, method="POST",  # noqa: S310 - scheme checked in __init__
                                     headers={"Content-Type": "application/x-www-form-urlencoded",
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:  # noqa: S310 - scheme checked in __init__
                body = r.read(MAX_BODY + 1)
                if getattr(r, "length", None) and len(body) <= MAX_BODY:  # closed before its Content-Length
                    raise http.client.IncompleteRead(body[-20:], r.length)
        except urllib.error.HTTPError as exc:
            # Prometheus answers 400 (bad_data), 422 (execution), 503 (unavailable) with its JSON error body.
            try:
                body = exc.read(MAX_BODY)
            except OSError:
                body = b""
            try:
                parse_response(body, query, endpoint)
            except PromResponseError as perr:
                if "Prometheus answered" in perr.why:
                    raise PromError(self.url, query, f"HTTP {exc.code}; {perr.why}") from None
            raise PromError(self.url, query, f"HTTP {exc.code} {exc.reason} from {path}") from None
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            # refused, reset, timeout, and what a broken server sends: a cut body (IncompleteRead),
            # a bad status line, a closed connection (RemoteDisconnected)
            reason = getattr(exc, "reason", exc)
            raise PromError(self.url, query, f"unreachable ({type(exc).__name__}: {reason})", unreachable=True) from None
        if len(body) > MAX_BODY:
            raise PromError(self.url, query, f"answer larger than {MAX_BODY >> 20} MiB; use a shorter range or a larger step")
        try:
            return parse_response(body, query, endpoint)
        except PromResponseError as exc:
            raise PromError(self.url, query, exc.why) from None

    def query(self, expr: str, at: Optional[float] = None) -> Result:
        form = [("query", expr)] + ([("time", _t(at))] if at is not None else [])
        return self._post("/api/v1/query", form, expr, "query")

    def query_range(self, expr: str, start: float, end: float, step: float) -> Result:
        form = [("query", expr), ("start", _t(start)), ("end", _t(end)), ("step", _t(step))]
        return self._post("/api/v1/query_range", form, expr, "query_range")

    def series(self, matchers: Sequence[str], start: float, end: float) -> Result:
        form = [("match[]", m) for m in matchers] + [("start", _t(start)), ("end", _t(end))]
        return self._post("/api/v1/series", form, " ".join(matchers), "series")


def _t(x: float) -> str:
    return repr(round(float(x), 3))
