"""``kvplan ui``: the planner as a local web page (kvplan.ui; aiohttp is imported only here, so
``kvplan plan`` does not pay for it)."""
from __future__ import annotations

import typer

from ._exit import fail as _fail

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def ui_cmd(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback unless you mean to share it)."),
    port: int = typer.Option(8765, "--port", help="Port (0 = any free port)."),
    open_browser: bool = typer.Option(False, "--open", help="Open the page in the default browser."),
) -> None:
    """The planner as a local web page: change a flag, see vLLM's numbers move (offline, no remote code)."""
    if not 0 <= port <= 65535:
        _fail(f"--port must be 0-65535, got {port}")
    if host not in _LOOPBACK:
        typer.echo(f"kvplan ui: warning: binding {host}, not 127.0.0.1: anyone who can reach this address and has "
                   "the printed URL (it carries a random token) can use the page and upload files to it", err=True)
    from ..ui.server import serve

    try:
        serve(host, port, open_browser, lambda line: typer.echo(line, err=True))
    except OSError as exc:
        _fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}")


def register(app: typer.Typer) -> None:
    app.command("ui")(ui_cmd)
