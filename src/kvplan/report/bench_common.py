"""What the bench renderers (text, HTML) say alike, so that the two never word a count apart."""
from __future__ import annotations


def requests_summary(req: dict) -> str:
    """'40 (39 ok, 1 failed)', plus the requests sent again on a fresh connection when there were
    any (bench's client.execute: the server had closed the pooled connection before answering)."""
    resent = f", {req['resent']:,} sent again on a fresh connection" if req.get("resent") else ""
    return f"{req['total']:,} ({req['ok']:,} ok, {req['failed']:,} failed{resent})"
