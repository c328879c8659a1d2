"""kvplan's one Markdown escaping: every Markdown renderer puts untrusted text (log lines, file
names, model names, notes) through these, so a ``|`` never splits a table cell, a newline never
ends a row and a backtick never opens a code span.

* :func:`cell`: text in a table cell or a paragraph. A backslash is doubled first (so ``a\\|b`` keeps
  its backslash and a trailing backslash cannot escape the cell's closing pipe), ``|`` becomes
  ``\\|``, CR/LF become a space, a backtick becomes ``'``.
* :func:`code`: text inside a code span (`` `...` ``): the same without doubling backslashes (a code
  span shows backslashes literally); the pipe is still escaped (GFM splits a table row before it
  reads code spans).
* :func:`fence`: text inside a fenced block: a ```` ``` ```` in it would close the block, it becomes ``'''``.
* :func:`row`: one table row of escaped cells.
"""
from __future__ import annotations

from typing import Iterable


def _line(text: str) -> str:
    return text.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


def code(value: object) -> str:
    """``value`` for the inside of a code span."""
    return _line(str(value)).replace("|", "\\|").replace("`", "'")


def cell(value: object) -> str:
    """``value`` as Markdown text for a table cell (or a paragraph)."""
    return code(str(value).replace("\\", "\\\\"))


def fence(text: object) -> str:
    """``text`` for a fenced code block (a ```` ``` ```` inside would end it)."""
    return str(text).replace("```", "'''")


def row(cells: Iterable[object]) -> str:
    """``| a | b |`` with each cell escaped by :func:`cell`."""
    return "| " + " | ".join(cell(c) for c in cells) + " |"
