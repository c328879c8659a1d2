"""vLLM's API server as a resource in front of the engine (``vllm serve``: an asyncio event loop in
one Python process, ``--api-server-count`` of them), following ``entrypoints/openai/serving_engine.py``
/ ``serving_chat.py`` and ``v1/engine/async_llm.py`` / ``output_processor.py`` (read in 0.11.0):

* **ingest**, per request, in two turns of the event loop: first HTTP parsing, validation and, on
  the chat endpoint, the chat template's rendering (``apply_hf_chat_template``: transformers'
  Jinja, synchronous on the loop; gpt-oss's Harmony renderer is native code); then, once its
  prompt is tokenized (``AsyncMicrobatchTokenizer``: one worker thread, off the loop, one request
  after another), ``add_request`` hands it to the engine core;
* **output**, per engine step: the output handler detokenizes the streams that got a token
  (``output_processor.process_outputs``) and each stream's handler frames one SSE chunk. A stream
  whose previous output is still waiting for its consumer gets the new one merged into it
  (``RequestOutputCollector.put``): a step whose tokens find a batch still queued costs nothing
  more and goes out with it.

The loop runs work in the order it became ready (its ready queue is first in, first out): a
burst's first turns all run before any request's second turn and before any output batch that
became ready after them, so under a 1,000-request burst the engine sees the first requests only
after every request was parsed and rendered, and the first tokens reach clients late and
together. Request ``i`` is served by API server ``i mod count`` (connections spread over the
processes); each process has its own loop and tokenizer thread."""
from __future__ import annotations

from heapq import heappop, heappush  # (names, not the module's attributes: one lookup fewer)
import math
from typing import Callable, Final, Optional

_INF: Final = math.inf
_RENDER: Final = 0
_HANDOFF: Final = 1
_OUTPUT: Final = 2


class _Server:
    """One API server process: its loop's ready queue (a heap by ready time, first in first out
    among equals), the time its loop is busy until, and its tokenizer thread. An output batch
    given while nothing else waits is placed by arithmetic (``tail_start``/``tail_end``: the last
    batch, merged into while it has not started) instead of through the queue."""

    __slots__ = ("queue", "busy", "tokenizer_free", "output_item", "seq", "tail_start", "tail_end")

    def __init__(self) -> None:
        self.queue: list = []  # [ready, seq, kind, cost, payload]
        self.busy = -_INF
        self.tokenizer_free = -_INF
        self.output_item: Optional[list] = None  # the output batch queued and not yet started
        self.seq = 0
        self.tail_start = -_INF
        self.tail_end = -_INF


class FrontEnd:
    __slots__ = ("count", "request_s", "prompt_token_s", "chunk_s", "servers", "on_handoff", "on_first",
                 "on_last", "waiting")

    def __init__(self, *, count: int = 1, request_s: float, prompt_token_s: float, chunk_s: float):
        self.count = max(1, int(count))
        self.request_s = request_s  # the loop's first turn per request (HTTP, validation, template)
        self.prompt_token_s = prompt_token_s  # the tokenizer thread, per prompt token
        self.chunk_s = chunk_s  # the loop, per stream per output batch (detokenize + SSE chunk)
        self.servers = [_Server() for _ in range(self.count)]
        self.waiting = 0  # items in the servers' queues
        # set by the engine: a request reaches it, a first / last token reaches its client
        self.on_handoff: Callable = lambda r, t: None
        self.on_first: Callable = lambda r, t: None
        self.on_last: Callable = lambda r, t: None

    def _push(self, s: _Server, ready: float, kind: int, cost: float, payload) -> list:
        item = [ready, s.seq, kind, cost, payload]
        s.seq += 1
        heappush(s.queue, item)
        self.waiting += 1
        return item

    def send(self, r, t: float, next_send: float = _INF) -> Optional[float]:
        """The client sent request ``r`` at ``t``: its first turn joins its server's queue. When
        nothing waits there and the next send (``next_send``) comes after this request is handed
        on, its turns run now and the hand-off time is returned (the second turn is taken to run
        as soon as the tokenizer is done: an output batch that becomes ready in between is not put
        ahead of it, an error of at most that batch); else None (the engine hears of it through
        ``on_handoff``)."""
        s = self.servers[r.i % self.count]
        if not s.queue:
            start = t if t > s.busy else s.busy
            end = start + self.request_s
            tok_start = end if end > s.tokenizer_free else s.tokenizer_free
            handoff = tok_start + self.prompt_token_s * r.num_prompt_tokens
            if next_send > handoff:
                s.busy, s.tokenizer_free = end, handoff
                return handoff
        self._push(s, t, _RENDER, self.request_s, r)
        return None

    def outputs(self, t: float, streams: int, firsts, lasts) -> None:
        """An engine step ending at ``t`` gave ``streams`` streams a token (``firsts``: first
        tokens, ``lasts``: last ones): one output batch per server, merged into one still queued.
        Call :meth:`advance` to ``t`` first."""
        count = self.count
        if count == 1 and not self.waiting:  # the common case, inline
            s = self.servers[0]
            if s.tail_start <= t:
                start = t if t > s.busy else s.busy
                s.tail_start = start
                s.tail_end = s.busy = start + self.chunk_s * streams
            if firsts or lasts:
                end = s.tail_end
                for r in firsts:
                    self.on_first(r, end)
                for r in lasts:
                    self.on_last(r, end)
            return
        cost = self.chunk_s * streams / count
        for j, s in enumerate(self.servers):
            if not s.queue:  # nothing else waits: the batch's place is known now
                if s.tail_start <= t:  # the last batch has started: a new one
                    start = t if t > s.busy else s.busy
                    s.tail_start = start
                    s.tail_end = s.busy = start + cost
                end = s.tail_end
                for r in firsts:
                    if count == 1 or r.i % count == j:
                        self.on_first(r, end)
                for r in lasts:
                    if count == 1 or r.i % count == j:
                        self.on_last(r, end)
                continue
            item = s.output_item  # still queued: merged into
            if item is None:
                item = s.output_item = self._push(s, t, _OUTPUT, cost, ([], []))
            if firsts or lasts:
                f, last = item[4]
                for r in firsts:
                    if count == 1 or r.i % count == j:
                        f.append(r)
                for r in lasts:
                    if count == 1 or r.i % count == j:
                        last.append(r)

    def advance(self, t: float) -> None:
        """Run every server's loop over the work that starts by ``t`` (nothing is started later
        than the engine's clock: work that becomes ready later cannot be ahead of it)."""
        if not self.waiting:
            return
        for s in self.servers:
            queue = s.queue
            while queue:
                item = queue[0]
                start = item[0] if item[0] > s.busy else s.busy
                if start > t:
                    break
                heappop(queue)
                self.waiting -= 1
                end = s.busy = start + item[3]
                kind = item[2]
                if kind == _RENDER:
                    r = item[4]
                    # the tokenizer thread, one prompt after another, off the loop
                    tok_start = end if end > s.tokenizer_free else s.tokenizer_free
                    s.tokenizer_free = tok_start + self.prompt_token_s * r.num_prompt_tokens
                    self._push(s, s.tokenizer_free, _HANDOFF, 0.0, r)
                elif kind == _HANDOFF:
                    self.on_handoff(item[4], end)
                else:
                    if s.output_item is item:
                        s.output_item = None
                    s.tail_start, s.tail_end = start, end
                    firsts, lasts = item[4]
                    for r in firsts:
                        self.on_first(r, end)
                    for r in lasts:
                        self.on_last(r, end)

    def next_start(self) -> float:
        """The earliest time a server's loop starts its next queued work (infinity when none)."""
        best = _INF
        if not self.waiting:
            return best
        for s in self.servers:
            if s.queue:
                ready = s.queue[0][0]
                start = ready if ready > s.busy else s.busy
                if start < best:
                    best = start
        return best
