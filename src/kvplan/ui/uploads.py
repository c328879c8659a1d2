"""Files the page uploaded: kept in one private temporary folder, within a budget, never shown.

Each upload lives in ``<tmp>/kvplan-ui-uploads-<pid>-<random>/<sha256[:16]>/<name>`` and is named
``upload:<hash>`` in argv (the hash of the content, so a re-drop is the same id). The budget is a
count and a total of bytes: a new upload evicts the least recently used ones to fit, and is
refused (507) when the disk would keep less than :data:`MIN_FREE_BYTES` free. The folder goes when
the server stops (Ctrl-C, SIGTERM, SIGHUP); a server that was killed cannot clean up, so each start
removes the folders of servers whose process is gone (uploaded request logs hold users' prompts).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Optional

from ..errors import UsageError

#: largest upload (a config.json or a request log) the server reads
MAX_UPLOAD_BYTES = 20 << 20
#: uploads kept at once, and their total size (the least recently used go first)
MAX_UPLOADS = 16
MAX_TOTAL_BYTES = 128 << 20
#: free space an upload must leave on the temporary folder's disk
MIN_FREE_BYTES = 512 << 20
PREFIX = "kvplan-ui-uploads-"
_FOLDER = re.compile(r"^" + re.escape(PREFIX) + r"(\d+)-[A-Za-z0-9_]+$")
_UPLOAD_ID = re.compile(r"^upload:([0-9a-f]{16})$")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class UploadTooLarge(UsageError):
    def __init__(self, size: int):
        self.size = size
        super().__init__(f"upload too large: {size / (1 << 20):.1f} MiB; the limit is "
                         f"{MAX_UPLOAD_BYTES >> 20} MiB (run the CLI on bigger files: kvplan lengths FILE)")


class UploadNoSpace(UsageError):
    """The disk of the temporary folder is (nearly) full: answered 507."""


def safe_name(name: str) -> str:
    """A file name for ``name`` inside the upload's own folder: no separators, no ``.``/``..``,
    no leading dot."""
    base = _SAFE_NAME.sub("_", Path(name or "upload").name)[-80:].lstrip(".")
    return base or "upload"


def remove_stale(parent: Path) -> list[Path]:
    """Remove the upload folders of servers (of this user) whose process is gone; returns them."""
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _FOLDER.match(entry.name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            if not entry.is_dir() or entry.is_symlink() or entry.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        if _alive(int(m.group(1))):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    except OSError:
        return True
    return True


class Uploads:
    """See the module docstring. ``parent``: where the private folder is made (the system's
    temporary folder by default)."""

    def __init__(self, parent: Optional[Path] = None, max_count: int = MAX_UPLOADS,
                 max_bytes: int = MAX_TOTAL_BYTES, min_free: int = MIN_FREE_BYTES):
        parent = Path(parent or tempfile.gettempdir())
        self.stale_removed = remove_stale(parent)
        self.root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent))
        self.max_count, self.max_bytes, self.min_free = max_count, max_bytes, min_free
        self._entries: OrderedDict[str, tuple[Path, int]] = OrderedDict()  # digest -> (path, bytes); LRU first

    @property
    def _paths(self) -> dict[str, Path]:
        return {d: p for d, (p, _) in self._entries.items()}

    @property
    def total_bytes(self) -> int:
        return sum(n for _, n in self._entries.values())

    def add(self, name: str, data: bytes, kind: str) -> dict:
        if len(data) > MAX_UPLOAD_BYTES:
            raise UploadTooLarge(len(data))
        digest = hashlib.sha256(data).hexdigest()[:16]
        safe = "config.json" if kind == "config" else safe_name(name)  # load_model reads a *.json as a config.json
        if digest in self._entries:
            self.forget(digest)
        while self._entries and (len(self._entries) >= self.max_count
                                 or self.total_bytes + len(data) > self.max_bytes):
            self.forget(next(iter(self._entries)))
        free = shutil.disk_usage(self.root).free
        if free - len(data) < self.min_free:
            raise UploadNoSpace(f"not enough free disk space for this upload on the server ({free >> 20} MiB free; "
                                f"kvplan ui keeps at least {self.min_free >> 20} MiB free)")
        folder = self.root / digest
        folder.mkdir(exist_ok=True)
        path = folder / safe
        path.write_bytes(data)
        self._entries[digest] = (path, len(data))
        return {"id": f"upload:{digest}", "name": Path(name or "upload").name, "bytes": len(data)}

    def forget(self, digest: str) -> None:
        self._entries.pop(digest, None)
        shutil.rmtree(self.root / digest, ignore_errors=True)

    def known(self, token: str) -> bool:
        m = _UPLOAD_ID.match(token)
        return bool(m) and m.group(1) in self._entries

    def path(self, token: str, flag: str) -> str:
        m = _UPLOAD_ID.match(token)
        if not m or m.group(1) not in self._entries:
            raise UsageError(f"{flag}: {token!r} is not a file uploaded to this page (drop the file on the page; "
                             f"the page keeps the last {self.max_count} uploads)")
        self._entries.move_to_end(m.group(1))  # recently used: evicted last
        return str(self._entries[m.group(1)][0])

    def close(self) -> None:
        self._entries.clear()
        shutil.rmtree(self.root, ignore_errors=True)
