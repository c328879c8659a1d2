"""The built-in offline catalog: real config.json files of popular models, kept as data.

Each ``catalog/<org>--<name>.json`` holds the Hugging Face id, short aliases, where the config
came from, the published parameter count and the config itself, verbatim. Lookups are
case-insensitive by id, by the part after the slash, or by alias.
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

CATALOG_DIR = Path(__file__).with_name("catalog")


@dataclass(frozen=True)
class CatalogEntry:
    id: str
    aliases: tuple[str, ...]
    source: str
    published_params: Optional[int]
    path: Path

    def config(self) -> dict[str, Any]:
        return _read(self.path)["config"]


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def entries() -> tuple[CatalogEntry, ...]:
    out = []
    for path in sorted(CATALOG_DIR.glob("*.json")):
        data = _read(path)
        out.append(CatalogEntry(
            id=data["id"], aliases=tuple(dict.fromkeys(a.lower() for a in data.get("aliases", ()))),
            source=data.get("source", ""), published_params=data.get("published_params"),
            path=path,
        ))
    return tuple(out)


@lru_cache(maxsize=1)
def _index() -> dict[str, CatalogEntry]:
    index: dict[str, CatalogEntry] = {}
    for entry in entries():
        for key in (entry.id.lower(), entry.id.split("/")[-1].lower(), *entry.aliases):
            index.setdefault(key, entry)
    return index


def find(name: str) -> Optional[CatalogEntry]:
    """The catalog entry for an id, a bare name or an alias (case-insensitive), else None."""
    key = name.strip().lower()
    direct = CATALOG_DIR / (name.strip().replace("/", "--") + ".json")
    if direct.is_file():  # fast path: no need to read the whole catalog
        data = _read(direct)
        return CatalogEntry(data["id"], tuple(data.get("aliases", ())), data.get("source", ""),
                            data.get("published_params"), direct)
    return _index().get(key)


def suggest(name: str, limit: int = 5) -> list[str]:
    """Close matches for a name the catalog does not know."""
    key = name.strip().lower()
    index = _index()
    keys = list(index)
    found = difflib.get_close_matches(key, keys, n=limit * 3, cutoff=0.5)
    found += [k for k in keys if key and key in k]
    out: list[str] = []
    for k in found:
        ident = index[k].id
        if ident not in out:
            out.append(ident)
    return out[:limit]
