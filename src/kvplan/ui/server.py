"""``kvplan ui``'s web server (aiohttp, imported only by this command).

Routes: the page and its three assets (package data, served from memory), and one JSON API:
``GET /api/models|gpus|versions``, ``POST /api/plan|simulate|lengths|tune`` with ``{"argv": [...]}``,
``POST /api/upload?kind=config|log`` with the raw file as the body. Errors are JSON
``{"error": MESSAGE}`` with the CLI's message (400 for what the user asked, 413 for an upload over
the limit, 500 with a generic line and no trace for a kvplan bug). The library work runs in a
worker thread so one long simulation does not stall the page's other requests.

The server sets KVPLAN_OFFLINE=1 for its process: no model, tokenizer or anything else is ever
fetched, and the page loads nothing from outside (a strict Content-Security-Policy says so to the
browser too).
"""
from __future__ import annotations

import asyncio
import logging
import os
from importlib import resources
from typing import Callable

from aiohttp import web

from ..errors import KvplanError, UsageError
from . import api

log = logging.getLogger("kvplan.ui")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_ASSETS = {"/": ("index.html", "text/html"), "/app.js": ("app.js", "application/javascript"),
           "/app.css": ("app.css", "text/css")}
UPLOADS = web.AppKey("uploads", api.Uploads)


def _asset(name: str) -> bytes:
    return resources.files("kvplan.ui").joinpath("static", name).read_bytes()


@web.middleware
async def _headers(request: web.Request, handler: Callable) -> web.StreamResponse:
    try:
        resp = await handler(request)
    except web.HTTPRequestEntityTooLarge as exc:
        resp = _error(str(api.UploadTooLarge(getattr(exc, "actual_size", 0) or api.MAX_UPLOAD_BYTES + 1)), 413)
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


def _error(message: str, status: int) -> web.Response:
    return web.json_response({"error": message}, status=status, dumps=api.dumps)


async def _run(fn: Callable, *args) -> web.Response:
    try:
        result = await asyncio.get_running_loop().run_in_executor(None, fn, *args)
    except api.UploadTooLarge as exc:
        return _error(str(exc), 413)
    except UsageError as exc:
        return _error(str(exc), 400)
    except KvplanError as exc:  # e.g. the simulated plan does not start: vLLM's error, as the CLI says it
        return _error(str(exc), 422)
    except Exception:  # a kvplan bug: logged here, never a trace on the page
        log.exception("kvplan ui: internal error")
        return _error("internal error in kvplan (see the terminal running `kvplan ui`)", 500)
    return web.json_response(result, dumps=api.dumps)


async def _argv(request: web.Request, command: str) -> list[str]:
    try:
        body = await request.json()
    except ValueError:
        raise UsageError("the request body must be JSON: {\"argv\": [...]}") from None
    if not isinstance(body, dict) or "argv" not in body:
        raise UsageError("the request body must be JSON: {\"argv\": [...]}")
    return api.vet_argv(command, body["argv"], request.app[UPLOADS])


def _command_handler(command: str, fn: Callable) -> Callable:
    async def handler(request: web.Request) -> web.Response:
        try:
            argv = await _argv(request, command)
        except UsageError as exc:
            return _error(str(exc), 400)
        uploads = request.app[UPLOADS]
        return await _run(lambda: uploads.public(fn(argv)))

    return handler


async def _upload(request: web.Request) -> web.Response:
    kind = request.query.get("kind", "log")
    if kind not in ("config", "log"):
        return _error("kind must be config or log", 400)
    if request.content_length is not None and request.content_length > api.MAX_UPLOAD_BYTES:
        return _error(str(api.UploadTooLarge(request.content_length)), 413)
    data = await request.read()  # aiohttp stops at client_max_size (413 via the middleware)
    name = request.query.get("name", "upload")
    uploads = request.app[UPLOADS]

    def store() -> dict:
        info = uploads.add(name, data, kind)
        if kind == "config":  # read now with the CLI's config validators: errors name the field
            from ..models import load_model

            path = uploads.path(info["id"], "config.json")
            try:
                spec = load_model(path)
            except UsageError as exc:
                raise UsageError(str(exc).replace(path, name)) from None
            info.update(model_id=spec.name, summary=spec.describe())
        return info

    return await _run(store)


async def _tokenizer(request: web.Request) -> web.Response:
    model = request.query.get("model")
    return await _run(lambda: {"model": model, "available": api.has_tokenizer(model)})


def make_app() -> web.Application:
    os.environ["KVPLAN_OFFLINE"] = "1"
    app = web.Application(client_max_size=api.MAX_UPLOAD_BYTES + (64 << 10), middlewares=[_headers])
    app[UPLOADS] = api.Uploads()
    for route, (name, ctype) in _ASSETS.items():
        body = _asset(name)

        async def asset(request: web.Request, body=body, ctype=ctype) -> web.Response:
            return web.Response(body=body, content_type=ctype, charset="utf-8")

        app.router.add_get(route, asset)
    for route, fn in (("/api/models", api.models_json), ("/api/gpus", api.gpus_json),
                      ("/api/versions", api.versions_json)):

        async def listing(request: web.Request, fn=fn) -> web.Response:
            return await _run(fn)

        app.router.add_get(route, listing)
    app.router.add_get("/api/tokenizer", _tokenizer)
    app.router.add_post("/api/plan", _command_handler("plan", api.plan_json))
    app.router.add_post("/api/simulate", _command_handler("simulate", api.simulate_json))
    app.router.add_post("/api/lengths", _command_handler("lengths", api.lengths_json))
    app.router.add_post("/api/tune", _command_handler("tune", api.tune_json))
    app.router.add_post("/api/upload", _upload)

    async def cleanup(app: web.Application) -> None:
        app[UPLOADS].close()

    app.on_cleanup.append(cleanup)
    return app


async def start(host: str = "127.0.0.1", port: int = 8765) -> tuple[web.AppRunner, int]:
    """Start the server in the running loop; returns (runner, the bound port). Port 0 = a free one."""
    runner = web.AppRunner(make_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, bound


def serve(host: str, port: int, open_browser: bool, echo: Callable[[str], None]) -> None:
    """Run until interrupted (``kvplan ui``)."""

    async def main() -> None:
        runner, bound = await start(host, port)
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{bound}/"
        echo(f"kvplan ui: serving {url} (Ctrl-C to stop)")
        if open_browser:
            import webbrowser

            webbrowser.open(url)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
