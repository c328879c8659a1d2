"""The run files of ``kvplan bench``, written and read in one place: the result JSON and the
per-request records (JSONL, or Parquet when the path ends in .parquet and pyarrow is installed).
``kvplan bench`` writes them (:mod:`kvplan.bench.io` re-exports the writers) and reads results back
(``bench compare``, ``preflight --baseline``); ``kvplan calibrate`` (:mod:`kvplan.sim.calibrate`)
reads both. Here, below sim and bench, so that both may import it.

Writes go to a temporary file first and are renamed into place, so an interrupted write never
leaves a half file behind. JSON has no NaN/Infinity: they are written as null.

Read errors are :class:`~kvplan.errors.UsageError` naming the file (and the line, for a records
file and for calibrate's result reader).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Iterable, Optional, Union

from .._json import dumps_line, dumps_report, finite
from ..errors import UsageError, file_not_found

PathLike = Union[str, os.PathLike]

#: the kind every kvplan bench result JSON declares
RESULT_KIND = "kvplan.bench"
#: the records file beside a result ``run.json``: ``run.records.jsonl``
RECORDS_SUFFIX = ".records.jsonl"


# --------------------------------------------------------------------------- writing
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
    """The records file that goes with the result file ``output`` (``run.json`` ->
    ``run.records.jsonl``)."""
    p = Path(output)
    stem = p.name[:-5] if p.name.endswith(".json") else p.name
    return p.with_name(stem + RECORDS_SUFFIX)


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


# --------------------------------------------------------------------------- reading
def _not_a_result(path: PathLike, hint: Optional[str]) -> UsageError:
    return UsageError(f"{path}: not a kvplan bench result (no \"kind\": \"{RESULT_KIND}\")"
                      + (f"; {hint}" if hint else ""))


def load_result(path: PathLike, hint: Optional[str] = None) -> dict:
    """A result JSON of ``kvplan bench``. ``hint``: what the reading command expects, added to the
    error for a JSON that is no bench result; a reader that gives one (calibrate) also has the
    read and parse errors name the line (``FILE:LINE: not JSON: ...``), bench's own readers say
    ``not a readable result JSON (...)``."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise file_not_found(path) from None
    except OSError as exc:
        if hint is None:
            raise UsageError(f"{path}: not a readable result JSON ({exc})") from None
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:  # not UTF-8
        raise UsageError(f"{path}: not a readable result JSON ({exc})") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        if hint is None:
            raise UsageError(f"{path}: not a readable result JSON ({exc})") from None
        raise UsageError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(d, dict) or d.get("kind") != RESULT_KIND:
        raise _not_a_result(path, hint)
    return d


def find_records(result_path: Path, result: dict, given: Optional[Union[str, Path]], why: str = "") -> Path:
    """The records file of the result at ``result_path``: ``given``, else the result's
    ``records_file`` (relative to the result's folder, as given, or its bare name there), else
    :func:`records_path_for` of the result; the first that exists. ``why``: added to the error when
    none does."""
    if given is not None:
        return Path(given)
    candidates = []
    rf = result.get("records_file")
    if isinstance(rf, str) and rf:
        p = Path(rf)
        candidates += [p] if p.is_absolute() else [result_path.parent / p, p, result_path.parent / p.name]
    candidates.append(records_path_for(result_path))
    for c in candidates:
        if c.exists():
            return c
    raise UsageError(f"{result_path}: its per-request records were not found (tried "
                     f"{', '.join(str(c) for c in dict.fromkeys(candidates))}); pass --records FILE" + why)


def iter_records(path: Path) -> Iterable[tuple[int, dict]]:
    """(line number, record) of a records file (Parquet: the row number)."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UsageError(f"{path}: reading Parquet needs pyarrow (pip install 'kvplan[parquet]')") from None
        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds for a bad file
            raise UsageError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc})") from None
        yield from enumerate(rows, 1)
        return
    try:
        f = open(path, encoding="utf-8")  # noqa: SIM115 - `with f` below closes it; opening errors are named first
    except FileNotFoundError:
        raise file_not_found(path) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{lineno}: not a JSON record: {exc.msg}") from None
            if not isinstance(obj, dict):
                raise UsageError(f"{path}:{lineno}: a record is a JSON object, got {type(obj).__name__}")
            yield lineno, obj
