"""The clients' side of the step loop (:mod:`kvplan.sim.engine`): when requests are sent (an open
loop's arrivals, a closed loop's free slots: vllm bench's ``--max-concurrency``), when the API
server in front (:mod:`kvplan.sim.frontend`) hands them to the engine, and when their tokens
reach the client. Mixed into :class:`kvplan.sim.engine.Engine`, which owns ``reqs``, ``slots``,
``fe`` and the loop's clock."""
from __future__ import annotations

import math
from heapq import heappop, heappush  # (names, not the module's attributes: one lookup fewer)
from typing import Final

from .._native import mypyc_attr
from .engine_kv import DecodeBookkeeping, Req

_INF: Final = math.inf


@mypyc_attr(allow_interpreted_subclasses=True)  # (Engine's bases: see Engine)
class ClientSide(DecodeBookkeeping):
    def _next_arrival(self, nxt: int, limit: int, sends: bool = True) -> float:
        """The next time a request can reach the engine: the next one handed on by the front end,
        else (``sends``) the next client send, which first enters the front end's queue."""
        reqs = self.reqs
        if self.fe is None:
            return reqs[nxt].handoff if nxt < limit else _INF
        best = reqs[nxt].handoff if nxt < limit else _INF
        c = self._committed
        if (sends or self.slots is not None) and c < len(reqs) and reqs[c].arrival < best:
            best = reqs[c].arrival
        nxt_api = self.fe.next_start()  # the API server's loop may hand a request on then
        return nxt_api if nxt_api < best else best

    def _commit_sends(self, until: float) -> None:
        """Clients' sends up to ``until``, in order, into the front end's queue (a closed loop's
        client sends when a slot is free: ``_gate``); each gets its hand-off time."""
        reqs, n, fe, slots = self.reqs, len(self.reqs), self.fe, self.slots
        c = self._committed
        if fe is None or c >= n or (slots is None and reqs[c].arrival > until):
            return  # (called with a front end only)
        while c < n:
            if slots is not None:
                self._gate(c)
            r = reqs[c]
            if r.arrival > until:
                break
            if slots is not None:
                heappop(slots)
                self._in_flight += 1
                if self._in_flight > self.peak_in_flight:
                    self.peak_in_flight = self._in_flight
            # None: the API server's queue decides (on_handoff)
            handoff = fe.send(r, r.arrival, reqs[c + 1].arrival if c + 1 < n and slots is None else _INF)
            r.handoff = _INF if handoff is None else handoff
            c += 1
        self._committed = c

    def _on_handoff(self, r: Req, t: float) -> None:
        r.handoff = t
        self._handoff_seen = True

    def _on_first_delivered(self, r: Req, t: float) -> None:
        r.d_first = t

    def _on_last_delivered(self, r: Req, t: float) -> None:
        r.d_end = t
        if self.slots is not None:  # the client has the whole response: its slot is free
            heappush(self.slots, t + self._ovh)
            self._in_flight -= 1

    # -- the closed loop ----------------------------------------------------------------------
    def _gate(self, nxt: int) -> None:
        """Request ``nxt`` is sent when it is due and a client slot is free: its arrival becomes
        that time (what the client measures TTFT and E2E from); with no free slot yet, never
        (until a request in flight finishes and calls this again)."""
        if nxt >= len(self.reqs):
            return
        r = self.reqs[nxt]
        slots = self.slots
        if slots:
            due = self._due[nxt]
            r.arrival = r.handoff = due if due >= slots[0] else slots[0]
        else:
            r.arrival = r.handoff = _INF

    def _client_done(self, t: float) -> None:
        if self.slots is not None:
            heappush(self.slots, t)
            self._in_flight -= 1

