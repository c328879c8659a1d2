"""How much work one command may ask for: the caps that keep one request from exhausting the machine.

A simulated request costs about 1.2 KB while it is simulated (200,000 requests: 0.27 GB of
resident memory and 16 s on one core, measured with ``kvplan simulate --num-requests 200000``), a
timeline sample about 0.4 KB. The command line is run by the person who owns the machine, so its
caps are far away and only stop what no run needs (a typo of three zeros too many); ``kvplan ui``
answers anyone who can load the page, so its caps keep each job under a few seconds and a few
hundred MB. The front end picks its caps (:func:`using`); the library checks them where the work
is sized, before anything is built, and names the cap in a usage error.

``None`` is "no cap" (the CLI reads request logs of any length: they stream in bounded memory).
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Iterator, Optional

from .errors import UsageError


@dataclass(frozen=True)
class WorkLimits:
    who: str  #: who sets the caps, as the messages say it ("kvplan ui", "kvplan")
    max_requests: int  #: requests in one simulated trace (synthetic, vllm bench's or replayed)
    max_timeline_samples: int  #: rows of one simulation's timeline (run span / --timeline-interval)
    max_log_records: Optional[int]  #: records read from request logs in one command
    beyond: str  #: what to do instead, as the messages say it

    def requests(self, n: float, what: str) -> None:
        """Refuse a trace of ``n`` requests (``what`` names the flags that asked for it)."""
        if not n <= self.max_requests:  # also NaN
            shown = f"{n:,.0f}" if n == n and n != float("inf") else str(n)
            raise UsageError(f"{what}: {shown} requests is above {self.who}'s cap of {self.max_requests:,} requests "
                             f"per run ({self.beyond})")


#: the command line: about 12 GB of simulated requests, a million-second timeline
CLI = WorkLimits(who="kvplan", max_requests=10_000_000, max_timeline_samples=1_000_000, max_log_records=None,
                 beyond="split the traffic into several runs")
#: the page: a job of a few seconds and at most a few hundred MB
PAGE = WorkLimits(who="kvplan ui", max_requests=100_000, max_timeline_samples=100_000, max_log_records=100_000,
                  beyond="run the same flags with the kvplan CLI for more")

_ACTIVE: contextvars.ContextVar[WorkLimits] = contextvars.ContextVar("kvplan_work_limits", default=CLI)


def active() -> WorkLimits:
    """The caps of the running front end (the CLI's unless :func:`using` says otherwise)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def using(limits: WorkLimits) -> Iterator[WorkLimits]:
    token = _ACTIVE.set(limits)
    try:
        yield limits
    finally:
        _ACTIVE.reset(token)
