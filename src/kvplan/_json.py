"""kvplan's one JSON writer: every ``--format json`` output, result file and JSON line goes through here.

The contract (one policy for every command):

* NaN and ±Infinity are written as ``null`` (JSON has neither; strict parsers reject the
  ``NaN``/``Infinity`` extensions Python writes by default), and ``allow_nan=False`` makes sure no
  non-standard token is ever written;
* ASCII only: any other character is a ``\\uXXXX`` escape (the bytes do not depend on the
  terminal's or the locale's encoding; every JSON reader decodes them back);
* keys in the order the result's ``to_dict`` gives them (never sorted: the order is documented);
* a value JSON has no type for (a path, an enum) is written as its ``str``;
* :func:`dumps_report`: two-space indent, the document ends with one newline;
  :func:`dumps_line`: one compact line (JSONL records), no newline.

A base module (no kvplan imports): the bench layer writes its run files with it, the report layer
its renderers, the CLI the few listings it prints itself.
"""
from __future__ import annotations

import json
import math
from typing import Any

INDENT = 2


def finite(x: Any) -> Any:
    """``x`` with every non-finite float (at any depth) replaced by None; tuples become lists."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def dumps_report(obj: Any) -> str:
    """The JSON document of a report: indent 2, ASCII, NaN/inf as null, one trailing newline."""
    return json.dumps(finite(obj), indent=INDENT, ensure_ascii=True, allow_nan=False, sort_keys=False,
                      default=str) + "\n"


def dumps_line(obj: Any) -> str:
    """One compact JSON line (no spaces, no newline), same NaN and ASCII policy."""
    return json.dumps(finite(obj), separators=(",", ":"), ensure_ascii=True, allow_nan=False, sort_keys=False,
                      default=str)
