"""Who may drive ``kvplan ui``: only the page this server served, never another web site.

A browser lets any page send requests to ``127.0.0.1``; what it withholds is the answer, unless
the attacker's own host name is re-resolved to 127.0.0.1 (DNS rebinding), which makes the attack
page same-origin. Four checks close both doors:

- ``Host`` must name an address this server was started on (``127.0.0.1``, ``localhost``,
  ``[::1]``, or the ``--host`` given) with its port. A rebinding page's requests carry the
  attacker's name and are refused before anything is read. On a wildcard bind (``0.0.0.0``,
  ``::``) teammates use the machine's own names and addresses: an IP literal (a rebinding attack
  needs a name the attacker controls) and this machine's host name are accepted.
- ``Origin``, when a browser sends it (every POST, every cross-origin fetch), must be this very
  server: ``http://`` + the ``Host`` it asked for. ``Sec-Fetch-Site: cross-site`` is refused too.
- Command routes take ``application/json`` and uploads ``application/octet-stream`` only: a
  cross-site page can send neither without a CORS preflight, and preflights are never answered.
- On a non-loopback bind, every API call carries the random token of the URL ``kvplan ui``
  printed (``?token=...``, as Jupyter does), which the page sends back as ``X-Kvplan-Token``.
"""
from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket
from dataclasses import dataclass, field
from typing import Callable, Optional

from aiohttp import web

JSON = "application/json"
UPLOAD = "application/octet-stream"
TOKEN_HEADER = "X-Kvplan-Token"  # noqa: S105 - a header name, not a secret
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
_WILDCARD = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 - names to recognise, not to bind


class Refused(Exception):
    """A request the page's server does not serve, with its HTTP status."""

    def __init__(self, message: str, status: int = 403):
        super().__init__(message)
        self.status = status


def is_loopback(host: str) -> bool:
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(24)


def _split_host(value: str) -> tuple[str, Optional[int]]:
    """``Host`` header -> (lower-case name without brackets, port or None). Raises ValueError."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.index("]")
        name, rest = value[1:end], value[end + 1:]
    else:
        name, sep, rest = value.rpartition(":")
        if not sep:
            name, rest = value, ""
        else:
            rest = ":" + rest
    if rest and not rest.startswith(":"):
        raise ValueError(value)
    port = int(rest[1:]) if rest else None
    if not name or (port is not None and not 0 < port < 65536):
        raise ValueError(value)
    return name, port


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


@dataclass
class Guard:
    """The checks for a server bound to ``host``; ``token`` required on API calls when set."""

    host: str = "127.0.0.1"
    token: Optional[str] = None
    _names: frozenset = field(init=False)

    def __post_init__(self) -> None:
        bound = self.host.strip("[]").lower()
        names = set(LOOPBACK_NAMES) | {bound}
        if bound in _WILDCARD:
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        self._names = frozenset(n for n in names if n)

    @property
    def wildcard(self) -> bool:
        return self.host.strip("[]") in _WILDCARD

    def host_ok(self, value: str, port: int) -> bool:
        try:
            name, asked_port = _split_host(value)
        except ValueError:
            return False
        if (asked_port or 80) != port:
            return False
        return name in self._names or (self.wildcard and _is_ip(name))

    def check(self, request: web.Request) -> None:
        """Raise :class:`Refused` unless ``request`` comes from this server's own page."""
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        port = sock[1] if sock else None
        host = request.headers.get("Host", "")
        if port is None or not self.host_ok(host, port):
            raise Refused(f"Host {host[:100]!r} is not an address this server was started on: refused (a page on "
                          f"another site, or a DNS name re-pointed at this machine). Open the address `kvplan ui` "
                          "printed, or start it with --host NAME", 403)
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() != f"http://{host.lower()}":
            raise Refused(f"cross-site request refused: Origin {origin[:100]!r} is not this page", 403)
        if request.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
            raise Refused("cross-site request refused (Sec-Fetch-Site: cross-site)", 403)
        if self.token and request.path.startswith("/api/"):
            given = request.headers.get(TOKEN_HEADER, "")
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                raise Refused("this server needs the token of the URL `kvplan ui` printed (…/?token=…): open that "
                              "URL", 403)


def require_type(request: web.Request, ctype: str) -> None:
    """Refuse a body of another Content-Type (415): a cross-site page can only send text/plain,
    form data or multipart without a preflight."""
    if request.content_type != ctype:
        raise Refused(f"{request.path} takes Content-Type: {ctype}, got {request.content_type or 'none'!r}", 415)


GUARD = web.AppKey("guard", Guard)


@web.middleware
async def middleware(request: web.Request, handler: Callable) -> web.StreamResponse:
    try:
        request.app[GUARD].check(request)
    except Refused as exc:
        return web.json_response({"error": str(exc)}, status=exc.status)
    return await handler(request)
