"""A FAKE OpenAI-compatible streaming server, for what a real server cannot be made to do on
demand (HTTP 429/500/503, streams cut before ``[DONE]``, garbage bytes, stalls) and as a no-op
target that measures the load generator itself (benchmarks/loadgen_capacity.py).

It is not vLLM and says so (``owned_by: "kvplan-fake"`` unless told otherwise). It binds
127.0.0.1 only, exits by itself after ``--max-lifetime`` seconds, and is a raw asyncio protocol
(HTTP/1.1 keep-alive, chunked SSE) so that it stays cheaper than any client that drives it.

    python -m kvplan.bench.fake_server --port 0 [--mode normal|status:503|drop|garbage|slow|truncate|hangup]
        [--fault-every K] [--itl S] [--ttft S] [--owned-by vllm] [--max-lifetime S]

Hostile modes (what a server kvplan does not control may do to the client's memory and keys):
``redirect`` answers every generation with a 307 to ``--redirect-to``; ``endless_event`` streams one
SSE event that never ends (data lines, no blank line); ``endless_body`` a non-streamed body that
never ends; ``overlong`` streams tokens past ``max_tokens`` until the client hangs up. They write
only as fast as the client reads (transport flow control). ``--models-mode`` makes ``/v1/models``
``redirect``, ``slow`` (a byte every 0.5 s, never done) or ``cut`` (a body shorter than its
Content-Length, then the connection closes).

It prints ``LISTENING <port>`` on stdout once ready. ``/metrics`` serves vLLM-named counters,
gauges and histograms that count what it really sent, so metric scraping can be tested without
vLLM; ``/fake/seen`` says how many requests it got and how many carried an ``Authorization``
header (the target of a redirect test).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Optional

MODES = ("normal", "drop", "garbage", "slow", "truncate", "redirect", "endless_event", "endless_body",
         "overlong", "hangup")  # plus status:<code>
MODELS_MODES = ("normal", "redirect", "slow", "cut")
_HOSTILE_PIECE = 64 << 10  # bytes per write of the endless modes
_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
            80.0, 160.0, 640.0, 2560.0)


class _Hist:
    def __init__(self) -> None:
        self.counts = [0] * (len(_BUCKETS) + 1)
        self.sum = 0.0
        self.n = 0

    def observe(self, v: float) -> None:
        self.sum += v
        self.n += 1
        for i, le in enumerate(_BUCKETS):
            if v <= le:
                self.counts[i] += 1
                return
        self.counts[-1] += 1

    def render(self, name: str, labels: str) -> str:
        out = [f"# TYPE {name} histogram"]
        acc = 0
        for le, c in zip(_BUCKETS, self.counts):
            acc += c
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {float(acc)}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(self.n)}')
        out.append(f"{name}_count{{{labels}}} {float(self.n)}")
        out.append(f"{name}_sum{{{labels}}} {self.sum}")
        return "\n".join(out)


class State:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.requests = 0
        self.running = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success = 0
        self.ttft = _Hist()
        self.e2e = _Hist()
        self.seen = 0  # requests received (any path)
        self.seen_authorization = 0  # of them, with an Authorization header

    def metrics(self) -> str:
        lab = 'engine="0",model_name="fake-model"'
        lines = [
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} {float(self.running)}",
            "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} 0.0",
            "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{lab}}} {min(1.0, self.running / 100)}",
            "# TYPE vllm:prompt_tokens_total counter", f"vllm:prompt_tokens_total{{{lab}}} {float(self.prompt_tokens)}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lab}}} {float(self.generation_tokens)}",
            "# TYPE vllm:num_preemptions_total counter", f"vllm:num_preemptions_total{{{lab}}} 0.0",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{{lab},finished_reason="length"}} {float(self.success)}',
            self.ttft.render("vllm:time_to_first_token_seconds", lab),
            self.e2e.render("vllm:e2e_request_latency_seconds", lab),
        ]
        return "\n".join(lines) + "\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class FakeProtocol(asyncio.Protocol):
    def __init__(self, state: State):
        self.state = state
        self.buf = b""
        self.transport: Optional[asyncio.Transport] = None
        self.busy = False
        self.writable = asyncio.Event()
        self.writable.set()

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def pause_writing(self) -> None:  # the client reads slower than we write: wait for it
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc) -> None:  # type: ignore[override]
        self.writable.set()  # wake a writer so it sees the closed transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buf[:head_end].decode("latin-1")
        lines = head.split("\r\n")
        try:
            method, path, _ = lines[0].split(" ", 2)
        except ValueError:
            self._respond(400, b'{"error":"bad request line"}', close=True)
            return
        length = 0
        self.state.seen += 1
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            if k.strip().lower() == "content-length":
                length = int(v.strip() or 0)
            elif k.strip().lower() == "authorization":
                self.state.seen_authorization += 1
        if len(self.buf) < head_end + 4 + length:
            return
        body = self.buf[head_end + 4: head_end + 4 + length]
        self.buf = self.buf[head_end + 4 + length:]
        self.busy = True
        asyncio.ensure_future(self._handle(method, path.split("?")[0], body))

    def _respond(self, status: int, body: bytes, ctype: str = "application/json", close: bool = False,
                 extra: str = "") -> None:
        reason = {200: "OK", 307: "Temporary Redirect", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests",
                  500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "Status")
        hdr = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n{extra}"
               f"connection: {'close' if close else 'keep-alive'}\r\n\r\n").encode()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(hdr + body)
            if close:
                self.transport.close()

    async def _handle(self, method: str, path: str, body: bytes) -> None:
        try:
            if method == "GET" and path == "/v1/models":
                await self._models()
            elif method == "GET" and path == "/fake/seen":
                self._respond(200, json.dumps({"requests": self.state.seen,
                                               "with_authorization": self.state.seen_authorization}).encode())
            elif method == "GET" and path == "/metrics":
                self._respond(200, self.state.metrics().encode(), "text/plain; version=0.0.4")
            elif method == "GET" and path == "/health":
                self._respond(200, b"")
            elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
                await self._generate(path.endswith("chat/completions"), body)
            else:
                self._respond(404, b'{"error":"not found"}')
        finally:
            self.busy = False
            if self.buf and self.transport is not None and not self.transport.is_closing():
                self._next()

    async def _models(self) -> None:
        args, tr = self.state.args, self.transport
        listing = json.dumps({"object": "list", "data": [
            {"id": "fake-model", "object": "model", "owned_by": args.owned_by}]}).encode()
        if args.models_mode == "redirect":
            self._respond(307, b"", extra=f"location: {args.redirect_to}/v1/models\r\n")
        elif args.models_mode == "cut" and tr is not None:
            tr.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                     % (len(listing) + 100, listing[:10]))
            tr.close()
        elif args.models_mode == "slow" and tr is not None:
            tr.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n")
            while not tr.is_closing():  # a byte every 0.5 s: each read is quick, the answer never ends
                tr.write(b" ")
                await asyncio.sleep(0.5)
        else:
            self._respond(200, listing)

    async def _endless(self, head: bytes, piece: bytes) -> None:
        """Write ``head`` then ``piece`` forever, as fast as the client reads, until it hangs up."""
        tr = self.transport
        if tr is None:
            return
        tr.write(head)
        while not tr.is_closing():
            await self.writable.wait()
            if tr.is_closing():
                return
            tr.write(_chunk(piece))
            await asyncio.sleep(0)

    async def _generate(self, chat: bool, body: bytes) -> None:
        st, args = self.state, self.state.args
        t_in = time.monotonic()
        st.requests += 1
        try:
            req = json.loads(body)
        except ValueError:
            self._respond(400, b'{"error":"body is not JSON"}')
            return
        faulty = args.fault_every > 0 and st.requests % args.fault_every == 0
        mode = args.mode if faulty else "normal"
        if mode == "hangup":  # closed without an answer, as a server closes an idle keep-alive connection
            if self.transport is not None:
                self.transport.close()
            return
        if mode.startswith("status:"):
            code = int(mode.split(":", 1)[1])
            self._respond(code, json.dumps({"error": {"message": f"fake {code}", "code": code}}).encode())
            return
        sse_head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                    b"connection: keep-alive\r\n\r\n")
        if mode == "redirect":
            self._respond(307, b"", extra=f"location: {args.redirect_to}{'/v1/chat/completions' if chat else '/v1/completions'}\r\n")
            return
        if mode == "endless_event":  # data lines of one event, never a blank line
            await self._endless(sse_head, b"data: " + b"x" * (_HOSTILE_PIECE - 8) + b"\n")
            return
        if mode == "endless_body":
            await self._endless(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n"
                                b"connection: keep-alive\r\n\r\n", b"[" * _HOSTILE_PIECE)
            return
        if mode == "overlong":  # valid token events past max_tokens, until the client hangs up
            event = (b'data: {"id":"fake","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}\n\n'
                     if chat else b'data: {"id":"fake","choices":[{"index":0,"text":" tok","finish_reason":null}]}\n\n')
            await self._endless(sse_head, event * 64)
            return
        n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        prompt = req.get("prompt") if not chat else " ".join(str(m.get("content", "")) for m in req.get("messages", []))
        p_tok = max(1, len(str(prompt).split()))
        stream = bool(req.get("stream"))
        usage = bool((req.get("stream_options") or {}).get("include_usage"))
        n_out = max(1, n // 2) if mode == "truncate" else n
        st.running += 1
        try:
            if mode == "slow":
                await asyncio.sleep(args.slow_s)
            elif args.ttft > 0:
                await asyncio.sleep(args.ttft)
            if not stream:
                text = " tok" * n_out
                choice = {"index": 0, "message": {"role": "assistant", "content": text}} if chat else \
                    {"index": 0, "text": text}
                choice["finish_reason"] = "length"
                self._respond(200, json.dumps({"id": "fake", "choices": [choice], "usage": {
                    "prompt_tokens": p_tok, "completion_tokens": n_out, "total_tokens": p_tok + n_out}}).encode())
                st.ttft.observe(time.monotonic() - t_in)
                self._account(p_tok, n_out, t_in)
                return
            tr = self.transport
            if tr is None or tr.is_closing():
                return
            tr.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                     b"connection: keep-alive\r\n\r\n")
            tok = (b'data: {"id":"fake","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
                   b'{"content":" tok"},"finish_reason":null}]}\n\n') if chat else \
                (b'data: {"id":"fake","object":"text_completion","choices":[{"index":0,"text":" tok",'
                 b'"finish_reason":null}]}\n\n')
            last = (b'data: {"id":"fake","choices":[{"index":0,"delta":{"content":" end"},"finish_reason":"length"}]}'
                    b'\n\n') if chat else \
                b'data: {"id":"fake","choices":[{"index":0,"text":" end","finish_reason":"length"}]}\n\n'
            stop_at = n_out // 2 if mode in ("drop", "garbage") else n_out
            if args.itl <= 0:
                parts = [tok] * max(0, min(stop_at, n_out - 1))
                tr.write(_chunk(b"".join(parts)) if parts else b"")
            else:
                for k in range(min(stop_at, n_out - 1)):
                    if k:
                        await asyncio.sleep(args.itl)
                    if tr.is_closing():
                        return
                    tr.write(_chunk(tok))
                    if k == 0:
                        st.ttft.observe(time.monotonic() - t_in)
                if min(stop_at, n_out - 1) < 1:
                    st.ttft.observe(time.monotonic() - t_in)
            if args.itl <= 0:
                st.ttft.observe(time.monotonic() - t_in)
            if mode == "drop":
                tr.close()  # the stream stops without its last chunk or [DONE]
                return
            if mode == "garbage":
                tr.write(_chunk(b"\xff\xfe\x00garbage{{{ not sse\n\n"))
            tail = last
            if usage:
                tail += b'data: {"id":"fake","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,' \
                        b'"total_tokens":%d}}\n\n' % (p_tok, n_out, p_tok + n_out)
            tail += b"data: [DONE]\n\n"
            tr.write(_chunk(tail) + b"0\r\n\r\n")
            self._account(p_tok, n_out, t_in)
        finally:
            st.running -= 1

    def _account(self, p_tok: int, n_out: int, t_in: float) -> None:
        st = self.state
        st.prompt_tokens += p_tok
        st.generation_tokens += n_out
        st.success += 1
        st.e2e.observe(time.monotonic() - t_in)


async def serve(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    state = State(args)
    server = await loop.create_server(lambda: FakeProtocol(state), "127.0.0.1", args.port, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"LISTENING {port}\n")
    sys.stdout.flush()
    async with server:
        await asyncio.sleep(args.max_lifetime)  # exits by itself: a leaked fake never outlives this


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m kvplan.bench.fake_server", description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--mode", default="normal", help="normal, status:CODE, drop, garbage, slow, truncate, hangup")
    ap.add_argument("--fault-every", type=int, default=1, help="apply --mode to every K-th request (1 = all)")
    ap.add_argument("--itl", type=float, default=0.0, help="seconds between tokens (0: all at once)")
    ap.add_argument("--ttft", type=float, default=0.0, help="seconds before the first token")
    ap.add_argument("--slow-s", type=float, default=30.0, help="stall of --mode slow")
    ap.add_argument("--owned-by", default="kvplan-fake")
    ap.add_argument("--models-mode", default="normal", choices=MODELS_MODES, help="how GET /v1/models answers")
    ap.add_argument("--redirect-to", default="http://127.0.0.1:9", help="where the redirect modes point")
    ap.add_argument("--max-lifetime", type=float, default=600.0)
    ap.add_argument("--uvloop", action="store_true", help="use uvloop when installed")
    args = ap.parse_args(argv)
    if args.mode not in MODES and not args.mode.startswith("status:"):
        ap.error(f"--mode: one of {', '.join(MODES)} or status:CODE")
    if args.uvloop:
        try:
            import uvloop  # type: ignore[import-not-found]

            uvloop.install()
        except ImportError:
            pass
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
