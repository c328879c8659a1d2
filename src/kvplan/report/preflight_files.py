"""The files ``kvplan preflight --output-dir DIR`` writes: preflight.json, preflight.md and
preflight.html, all from the same ``PreflightResult.to_dict()`` (the alert rules and dashboard
are written by the alerts check itself). Each file is written atomically."""
from __future__ import annotations

from pathlib import Path

from .._json import dumps_report

REPORT_FILES = {"json": "preflight.json", "markdown": "preflight.md", "html": "preflight.html"}


def render_json(d: dict) -> str:
    return dumps_report(d)


def write_reports(d: dict, output_dir: Path) -> dict:
    """Write the three reports; returns ``d`` with their paths added under ``files``."""
    from ..bench.io import _atomic_write
    from .preflight_html import render_html
    from .preflight_markdown import render_markdown

    out = Path(output_dir)
    paths = {f"report_{k}": str(out / name) for k, name in REPORT_FILES.items()}
    d = {**d, "files": {**(d.get("files") or {}), **paths}}
    for kind, text in (("json", render_json(d)), ("markdown", render_markdown(d)), ("html", render_html(d))):
        _atomic_write(out / REPORT_FILES[kind], lambda f, t=text: f.write(t))
    return d
