"""Writing and reading run files: the result JSON, the per-request records (JSONL, or Parquet
when the path ends in .parquet and pyarrow is installed). Writes go to a temporary file first and
are renamed into place, so an interrupted write never leaves a half file behind.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Iterable, Union

from .._json import dumps_line, dumps_report, finite
from ..errors import UsageError

PathLike = Union[str, os.PathLike]


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a result file is an ordinary file
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_result(d: dict, path: PathLike) -> None:
    _atomic_write(Path(path), lambda f: f.write(dumps_report(d)))


def records_path_for(output: PathLike) -> Path:
    p = Path(output)
    stem = p.name[:-5] if p.name.endswith(".json") else p.name
    return p.with_name(stem + ".records.jsonl")


def check_records_path(path: PathLike) -> None:
    """Usage check before the run: a .parquet path needs pyarrow."""
    if str(path).endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UsageError(f"{path}: Parquet needs pyarrow (pip install 'kvplan[parquet]'), or use .jsonl") from None


def write_records(records: Iterable, path: PathLike) -> None:
    path = Path(path)
    rows = (r.to_dict() for r in records)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist([finite(r) for r in rows])  # NaN as null, as in the JSON
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, path)
        return

    def write(f) -> None:
        for r in rows:
            f.write(dumps_line(r) + "\n")

    _atomic_write(path, write)


def load_result(path: PathLike) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable result JSON ({exc})") from None
    if not isinstance(d, dict) or d.get("kind") != "kvplan.bench":
        raise UsageError(f"{path}: not a kvplan bench result (no \"kind\": \"kvplan.bench\")")
    return d
