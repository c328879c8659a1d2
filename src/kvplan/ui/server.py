"""``kvplan ui``'s web server (aiohttp, imported only by this command).

Routes: the page and its three assets (package data, served from memory), and one JSON API:
``GET /api/models|gpus|versions|jobs``, ``GET /api/tokenizer?model=ID``, ``POST
/api/plan|simulate|lengths|tune`` with ``{"argv": [...]}``, ``POST /api/upload?kind=config|log`` with
the raw file as the body. Errors are JSON ``{"error": MESSAGE}`` with the CLI's message: 400 for
what the user asked (a cap included, named), 403 for a request from elsewhere, 413 for an upload
over the limit, 415 for a body of another type, 429 when every job slot is busy, 503 for a job
stopped at its deadline, 500 with a generic line and no trace for a kvplan bug.

No other web page may drive it (:mod:`kvplan.ui.guard`): a request whose ``Host`` is not an
address this server was started on (DNS rebinding) or whose ``Origin`` is another site is refused,
command routes take only ``application/json`` and uploads only ``application/octet-stream`` (types
a cross-site page cannot send without a CORS preflight, which is never answered), and on a
non-loopback bind every API call carries the random token of the printed URL, as Jupyter does.

The work a request asks for runs in a killable job process (:mod:`kvplan.ui.jobs`) under the page's
caps (:data:`kvplan.limits.PAGE`); uploads are kept within a budget (:mod:`kvplan.ui.uploads`)
and the server's folder for them never appears in an answer (the page sees the file's own name,
and ``MODEL_DIR`` for an uploaded config's folder). Ctrl-C, SIGTERM and SIGHUP stop the jobs, the
server and delete the uploads.

The server sets KVPLAN_OFFLINE=1 for its process: no model, tokenizer or anything else is ever
fetched, and the page loads nothing from outside (a strict Content-Security-Policy says so to the
browser too).
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
from importlib import resources
from typing import Any, Callable, Optional

from aiohttp import web

from ..errors import UsageError
from . import api, guard, jobs
from .uploads import Uploads, UploadNoSpace, UploadTooLarge

log = logging.getLogger("kvplan.ui")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_ASSETS = {"/": ("index.html", "text/html"), "/app.js": ("app.js", "application/javascript"),
           "/app.css": ("app.css", "text/css")}
UPLOADS = web.AppKey("uploads", Uploads)
JOBS = web.AppKey("jobs", jobs.JobPool)
RECEIVING = web.AppKey("receiving", list)  # [uploads whose body is arriving]
#: uploads received at once (each up to 20 MiB in memory), and the time one may take to arrive
MAX_RECEIVING = 4
UPLOAD_READ_S = 60.0
#: seconds the server waits for open connections once its jobs are stopped (Ctrl-C answers in 2 s)
SHUTDOWN_S = 1.0
_COMMANDS = {"plan": "kvplan.ui.api:plan_json", "simulate": "kvplan.ui.api:simulate_json",
             "lengths": "kvplan.ui.api:lengths_json", "tune": "kvplan.ui.api:tune_json"}


def _asset(name: str) -> bytes:
    return resources.files("kvplan.ui").joinpath("static", name).read_bytes()


@web.middleware
async def _headers(request: web.Request, handler: Callable) -> web.StreamResponse:
    try:
        resp = await handler(request)
    except web.HTTPRequestEntityTooLarge as exc:
        resp = _error(str(UploadTooLarge(getattr(exc, "actual_size", 0) or api.MAX_UPLOAD_BYTES + 1)), 413)
    except web.HTTPException as exc:
        if exc.status >= 400:
            resp = _error(exc.reason or "error", exc.status)
        else:
            raise
    resp.headers["Content-Security-Policy"] = CSP
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
    resp.headers["Cache-Control"] = "no-store"
    return resp


def _error(message: str, status: int, request: Optional[web.Request] = None) -> web.Response:
    return _answer({"error": message}, request, status)


def _answer(d: Any, request: Optional[web.Request], status: int = 200) -> web.Response:
    text = api.dumps(d)
    if request is not None:
        text = _scrub(text, request.app[UPLOADS])
    return web.Response(text=text, status=status, content_type="application/json")


def _scrub(text: str, uploads: Uploads) -> str:
    """The answer without the server's upload folder: ``<root>/<hash>/name`` -> ``name``,
    ``<root>/<hash>`` (an uploaded config's model folder) -> ``MODEL_DIR``."""
    root = str(uploads.root)
    if root not in text:
        return text
    pattern = re.compile(re.escape(root) + r"(?:/([0-9a-f]{16})(/)?)?")
    return pattern.sub(lambda m: "" if m.group(2) else "MODEL_DIR" if m.group(1) else "UPLOADS", text)


async def _job(request: web.Request, target: str, *args: Any) -> tuple[Any, Optional[web.Response]]:
    """Run ``target(*args)`` in the job pool: (its result, None), or (None, the error answer)."""
    try:
        return await request.app[JOBS].run(target, *args), None
    except jobs.PoolFull as exc:
        return None, _error(str(exc), 429, request)
    except (jobs.JobTimeout, jobs.JobFailed) as exc:
        return None, _error(str(exc), 503, request)
    except jobs.JobError as exc:
        if exc.kind in ("usage", "memory"):
            return None, _error(exc.message, 400, request)
        if exc.kind == "kvplan":  # e.g. the simulated plan does not start: vLLM's error, as the CLI says it
            return None, _error(exc.message, 422, request)
        log.error("kvplan ui: internal error in a job:\n%s", exc.message)
        return None, _error("internal error in kvplan (see the terminal running `kvplan ui`)", 500, request)


async def _argv(request: web.Request, command: str) -> list[str]:
    guard.require_type(request, guard.JSON)
    try:
        body = await request.json()
    except ValueError:
        raise UsageError("the request body must be JSON: {\"argv\": [...]}") from None
    if not isinstance(body, dict) or "argv" not in body:
        raise UsageError("the request body must be JSON: {\"argv\": [...]}")
    return api.vet_argv(command, body["argv"], request.app[UPLOADS])


def _command_handler(command: str) -> Callable:
    async def handler(request: web.Request) -> web.Response:
        try:
            argv = await _argv(request, command)
        except guard.Refused as exc:
            return _error(str(exc), exc.status, request)
        except UsageError as exc:
            return _error(str(exc), 400, request)
        result, failed = await _job(request, _COMMANDS[command], argv)
        return failed or _answer(result, request)

    return handler


async def _upload(request: web.Request) -> web.Response:
    try:
        guard.require_type(request, guard.UPLOAD)
    except guard.Refused as exc:
        return _error(str(exc), exc.status, request)
    kind = request.query.get("kind", "log")
    if kind not in ("config", "log"):
        return _error("kind must be config or log", 400, request)
    if request.content_length is not None and request.content_length > api.MAX_UPLOAD_BYTES:
        return _error(str(UploadTooLarge(request.content_length)), 413, request)
    receiving = request.app[RECEIVING]
    if receiving[0] >= MAX_RECEIVING:  # each body is held in memory while it arrives
        return _error(f"{MAX_RECEIVING} uploads are already arriving: try again when one is done", 429, request)
    receiving[0] += 1
    try:  # aiohttp stops at client_max_size (413 via the middleware); a stalled sender at the deadline
        data = await asyncio.wait_for(request.read(), UPLOAD_READ_S)
    except asyncio.TimeoutError:
        return _error(f"the upload did not arrive within {UPLOAD_READ_S:g} s", 408, request)
    finally:
        receiving[0] -= 1
    name = request.query.get("name", "upload")
    uploads = request.app[UPLOADS]
    try:
        info = uploads.add(name, data, kind)
    except UploadTooLarge as exc:
        return _error(str(exc), 413, request)
    except UploadNoSpace as exc:
        return _error(str(exc), 507, request)
    except UsageError as exc:
        return _error(str(exc), 400, request)
    if kind != "config":
        return _answer(info, request)
    # a config.json is read now, with the CLI's validators (in a job: a hostile config is work too)
    path = uploads.path(info["id"], "config")
    model, failed = await _job(request, "kvplan.ui.job_main:read_config", path, info["name"])
    if failed is not None:
        uploads.forget(info["id"].split(":", 1)[1])  # a config the page cannot use is not kept
        return failed
    return _answer(info | model, request)


async def _tokenizer(request: web.Request) -> web.Response:
    """Whether a catalog model's tokenizer is on this machine. Only catalog and upload ids: a path
    or a hub name would let a page probe the server's files (an uploaded config has no tokenizer)."""
    model = request.query.get("model") or ""
    uploads = request.app[UPLOADS]
    if model.startswith("upload:"):
        if not uploads.known(model):
            return _error(f"model: {model!r} is not a file uploaded to this page", 400, request)
        return _answer({"model": model, "available": False}, request)
    from ..models import catalog

    if catalog.find(model) is None:
        return _error(f"model: {model!r} is not in kvplan's catalog (see `kvplan models`); the page asks only "
                      "about catalog models and uploaded configs", 400, request)
    available, failed = await _job(request, "kvplan.ui.api:has_tokenizer", model)
    return failed or _answer({"model": model, "available": bool(available)}, request)


async def _jobs_state(request: web.Request) -> web.Response:
    pool = request.app[JOBS]
    return _answer({"running": pool.running, "slots": pool.slots, "deadline_s": pool.deadline_s,
                    "started": pool.started}, request)


def make_app(host: str = "127.0.0.1", token: Optional[str] = None, *, job_slots: int = jobs.DEFAULT_SLOTS,
             job_deadline_s: float = jobs.DEFAULT_DEADLINE_S) -> web.Application:
    """The page's application for a server bound to ``host``; ``token``, when given, is required on
    every API call (``X-Kvplan-Token``)."""
    os.environ["KVPLAN_OFFLINE"] = "1"
    app = web.Application(client_max_size=api.MAX_UPLOAD_BYTES + (64 << 10), middlewares=[_headers, guard.middleware])
    app[UPLOADS] = Uploads()
    app[guard.GUARD] = guard.Guard(host, token)
    app[JOBS] = jobs.JobPool(job_slots, job_deadline_s)
    app[RECEIVING] = [0]
    for route, (name, ctype) in _ASSETS.items():
        body = _asset(name)

        async def asset(request: web.Request, body=body, ctype=ctype) -> web.Response:
            return web.Response(body=body, content_type=ctype, charset="utf-8")

        app.router.add_get(route, asset)
    for route, fn in (("/api/models", api.models_json), ("/api/gpus", api.gpus_json),
                      ("/api/versions", api.versions_json)):

        async def listing(request: web.Request, fn=fn) -> web.Response:  # fixed answers, cached: no job
            return _answer(await asyncio.get_running_loop().run_in_executor(None, fn), request)

        app.router.add_get(route, listing)
    app.router.add_get("/api/tokenizer", _tokenizer)
    app.router.add_get("/api/jobs", _jobs_state)
    for command in _COMMANDS:
        app.router.add_post(f"/api/{command}", _command_handler(command))
    app.router.add_post("/api/upload", _upload)

    async def startup(app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, app[JOBS].warm)

    async def cleanup(app: web.Application) -> None:
        app[JOBS].close()
        app[UPLOADS].close()

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    return app


async def start(host: str = "127.0.0.1", port: int = 8765, token: Optional[str] = None,
                **app_kw: Any) -> tuple[web.AppRunner, int]:
    """Start the server in the running loop; returns (runner, the bound port). Port 0 = a free one.
    A request's handler is cancelled when its client disconnects (its job is killed)."""
    runner = web.AppRunner(make_app(host, token, **app_kw), access_log=None, handler_cancellation=True,
                           shutdown_timeout=SHUTDOWN_S)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:  # e.g. the port is taken: no job process or upload folder is left behind
        await runner.cleanup()
        raise
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, bound


async def stop(runner: web.AppRunner) -> None:
    """Stop the jobs first (a handler waiting for one then answers at once), then the server, then
    delete the uploads."""
    app = runner.app
    app[JOBS].close()
    await runner.cleanup()


def page_url(host: str, port: int, token: Optional[str]) -> str:
    """The URL ``kvplan ui`` prints and opens (with its token on a non-loopback bind)."""
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def serve(host: str, port: int, open_browser: bool, echo: Callable[[str], None], **app_kw: Any) -> None:
    """Run until Ctrl-C, SIGTERM or SIGHUP (``kvplan ui``); each stops the jobs and deletes the uploads."""
    token = None if guard.is_loopback(host) else guard.new_token()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        runner, bound = await start(host, port, token, **app_kw)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, stopping.set)
        try:
            url = page_url(host, bound, token)
            echo(f"kvplan ui: serving {url} (Ctrl-C to stop)")
            if open_browser:
                import webbrowser

                webbrowser.open(url)
            await stopping.wait()
            echo("kvplan ui: stopping (jobs stopped, uploads deleted)")
        finally:
            await stop(runner)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
