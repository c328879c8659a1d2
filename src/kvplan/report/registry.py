"""Which renderer draws which result in which ``--format``: the one table every command reads.

A command names its result *kind* (``plan``, ``lengths``, ``simulate`` …); its ``--format``
choices are :func:`formats` of that kind (the first is the default) and it prints with
:func:`emit`. Adding an output format is a renderer module plus one line per kind below.

The renderer contract:

* a *text* renderer ``fn(result, **opts) -> str`` returns the whole output, ending in one newline
  (JSON through :func:`kvplan._json.dumps_report`, Markdown cells through :mod:`kvplan.report._markdown`);
* a *drawing* renderer ``fn(result, console=None, **opts)`` draws rich tables and panels on
  ``console`` (its own ``Console()`` on the terminal when none is given).

``opts`` are the kind's own options (``compact``, ``traffic``, ``top``); each entry names the
ones its renderer takes, the others are dropped. Renderers are imported on first use, so a
``--format json`` run never loads rich. Only the standard library at module level (every CLI
module imports this).
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional

#: the width of a table written to a file (``--output``): the same on every terminal
FILE_WIDTH = 160


@dataclass(frozen=True)
class Renderer:
    kind: str
    fmt: str
    target: str  # "module:function", relative to kvplan.report
    draws: bool = False  # True: draws on a rich Console; False: returns the text
    opts: tuple[str, ...] = ()  # the keyword options the function takes

    def load(self) -> Callable[..., Any]:
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(f"kvplan.report.{module}"), name)


_T, _J, _M = "table", "json", "markdown"

#: (kind, format) -> renderer, each kind's formats in the order --format lists them (default first)
RENDERERS: dict[tuple[str, str], Renderer] = {(r.kind, r.fmt): r for r in (
    Renderer("plan", _T, "plan_text:render_table", draws=True, opts=("compact", "traffic")),
    Renderer("plan", _J, "plan_json:render_json", opts=("traffic",)),
    Renderer("plan", _M, "plan_markdown:render_markdown", opts=("traffic",)),
    Renderer("lengths", _T, "lengths_text:render_table", draws=True),
    Renderer("lengths", _J, "lengths_json:render_json"),
    Renderer("lengths", _M, "lengths_markdown:render_markdown"),
    Renderer("simulate", _T, "sim_text:render_table", draws=True),
    Renderer("simulate", _J, "registry:json_of_dict"),
    Renderer("simulate", _M, "sim_markdown:render_markdown"),
    Renderer("tune", _T, "tune_text:render_table", draws=True, opts=("top",)),
    Renderer("tune", _J, "tune_json:render_json"),
    Renderer("tune", _M, "tune_markdown:render_markdown", opts=("top",)),
    Renderer("doctor", _T, "doctor_text:render_text"),
    Renderer("doctor", _J, "registry:json_of_result"),
    Renderer("doctor", _M, "doctor_markdown:render_markdown"),
    Renderer("profile", _T, "profile_text:render_table", draws=True),
    Renderer("profile", _J, "profile_json:render_json"),
    Renderer("profile", _M, "profile_markdown:render_markdown"),
    Renderer("preflight", _T, "preflight_text:render_table", draws=True),
    Renderer("preflight", _J, "preflight_files:render_json"),
    Renderer("preflight", _M, "preflight_markdown:render_markdown"),
    Renderer("bench", _T, "bench_text:render_summary", draws=True),
    Renderer("bench", _J, "registry:json_of_dict"),
    Renderer("bench-compare", _T, "bench_text:render_compare", draws=True),
    Renderer("bench-compare", _J, "registry:json_of_dict"),
    Renderer("calibration", _T, "calibration_text:render_calibration_table", draws=True),
    Renderer("calibration", _J, "registry:json_of_dict"),
)}


def json_of_dict(d: dict) -> str:
    """A result that is already its JSON dict (simulate, bench, calibrate)."""
    from .._json import dumps_report

    return dumps_report(d)


def json_of_result(r: Any) -> str:
    """A result with a ``to_dict()`` (doctor)."""
    from .._json import dumps_report

    return dumps_report(r.to_dict())


def kinds() -> tuple[str, ...]:
    return tuple(dict.fromkeys(k for k, _ in RENDERERS))


def formats(kind: str) -> tuple[str, ...]:
    """The ``--format`` choices of ``kind``, the default first."""
    out = tuple(f for k, f in RENDERERS if k == kind)
    if not out:
        raise KeyError(f"no renderer for result kind {kind!r}")
    return out


def choices_text(kind: str) -> str:
    """``table, json or markdown``: the choices as the usage errors spell them."""
    f = formats(kind)
    return f[0] if len(f) == 1 else ", ".join(f[:-1]) + " or " + f[-1]


def format_enum(kind: str) -> type[Enum]:
    """A ``str`` Enum of the formats (typer lists its members as the option's choices)."""
    return Enum(f"{kind.title().replace('-', '')}Format", [(f, f) for f in formats(kind)], type=str)  # type: ignore[return-value]


def renderer(kind: str, fmt: str) -> Renderer:
    try:
        return RENDERERS[(kind, str(getattr(fmt, "value", fmt)))]
    except KeyError:
        raise KeyError(f"no {fmt!r} renderer for {kind!r} (formats: {', '.join(formats(kind))})") from None


def _call(r: Renderer, result: Any, opts: dict, console=None) -> Any:
    kw = {k: v for k, v in opts.items() if k in r.opts}
    if console is not None:
        kw["console"] = console
    return r.load()(result, **kw)


def _file_console(buf):
    from rich.console import Console

    return Console(file=buf, width=FILE_WIDTH, no_color=True)


def render(kind: str, fmt: str, result: Any, **opts: Any) -> str:
    """The output as text: a drawing renderer draws on a plain console ``FILE_WIDTH`` wide."""
    r = renderer(kind, fmt)
    if not r.draws:
        return _call(r, result, opts)
    import io

    buf = io.StringIO()
    _call(r, result, opts, console=_file_console(buf))
    return buf.getvalue()


def emit(kind: str, fmt: str, result: Any, output: Optional[Path] = None, console=None, **opts: Any) -> None:
    """Print the output on stdout (drawings on ``console``, else the renderer's own terminal
    console), or write it to ``output`` (UTF-8; OSError goes to the caller)."""
    r = renderer(kind, fmt)
    if output is not None:
        Path(output).write_text(render(kind, fmt, result, **opts), encoding="utf-8")
    elif r.draws:
        _call(r, result, opts, console=console)
    else:
        sys.stdout.write(_call(r, result, opts))
