"""Writing and reading run files: the result JSON, the per-request records (JSONL, or Parquet
when the path ends in .parquet and pyarrow is installed). The format lives in one module,
:mod:`kvplan.runs.files` (below sim and bench: ``kvplan calibrate`` reads the same files);
these are its names, as bench's callers import them.
"""
from __future__ import annotations

from ..runs.files import (  # noqa: F401 - re-exported
    PathLike, _atomic_write, check_records_path, load_result, records_path_for, write_records,
    write_result,
)

__all__ = ["PathLike", "check_records_path", "load_result", "records_path_for", "write_records",
           "write_result"]
