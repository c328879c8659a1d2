"""How every kvplan command ends on an error: one line on stderr, then the exit code (2 usage,
1 a failed run). One place, so every command says it the same way."""
from __future__ import annotations

from typing import NoReturn

import typer


def fail(error: object, code: int = 2) -> NoReturn:
    typer.echo(f"kvplan: error: {error}", err=True)
    raise typer.Exit(code)
