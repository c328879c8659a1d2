"""JSON rendering of ``kvplan profile`` (``ProfileResult.to_dict``, schema_version 1; fields are only added)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .._json import dumps_report

if TYPE_CHECKING:  # the result type only: report sits below ops (tests/test_layering.py)
    from ..ops.profile import ProfileResult


def render_json(result: ProfileResult) -> str:
    return dumps_report(result.to_dict())
