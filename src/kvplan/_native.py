"""Whether the simulator's hot modules run compiled, and the guard that keeps a stale build out.

``scripts/build_native.py`` (``make native``, run by ``make demo`` and ``make test``) compiles
:data:`MODULES` with mypyc into C extensions beside their sources, and writes the SHA-256 of each
source it compiled to :data:`STAMP`. Python imports an extension before a ``.py`` of the same name,
so an edited source would silently run its old compiled code; this module, imported first by
``kvplan``, makes every one of them load from its ``.py`` instead when any source differs from its
digest, when the stamp is unreadable, or with ``KVPLAN_NATIVE=0``. All or none: compiled modules
share one extension and expect each other's compiled classes. Both builds give the same results
byte for byte (tests/test_native.py); the compiled one is about twice as fast
(benchmarks/sim_speed.py).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from typing import Mapping

#: the compiled modules (one mypyc group: they call each other's compiled code directly)
MODULES = ("kvplan.quantiles", "kvplan.sim.kvpool", "kvplan.sim.engine_kv", "kvplan.sim.engine_clients",
           "kvplan.sim.recorder", "kvplan.sim.kvmanager", "kvplan.sim.clock_core", "kvplan.sim.frontend",
           "kvplan.sim.engine", "kvplan.sim.saturation", "kvplan.sim.bench_summary")
GROUP = "kvplan_native"
_SRC = Path(__file__).resolve().parents[1]
STAMP = _SRC / "kvplan" / "_native.stamp"

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # installed without the build's tools: the decorator only speaks to mypyc
    def mypyc_attr(*attrs, **kwattrs):  # type: ignore[no-redef]
        return lambda cls: cls

NOT_BUILT = "interpreted (not built: make native)"
#: "compiled", or "interpreted (why)"
STATE = NOT_BUILT


class _FromSource:
    """A meta-path finder that loads the named modules from their ``.py`` files."""

    def __init__(self, sources: dict) -> None:
        self.sources = sources

    def find_spec(self, fullname, path=None, target=None):
        source = self.sources.get(fullname)
        return importlib.util.spec_from_file_location(fullname, source) if source is not None else None


def decide(stamp: Path, src: Path, env: Mapping[str, str]) -> tuple[str, dict]:
    """(state, the modules to load from their ``.py``: name -> path; empty when the build is used)
    for the build described by ``stamp`` under the source root ``src``."""
    if not stamp.exists():
        return NOT_BUILT, {}
    import hashlib  # (here: an interpreted install never pays for them at start-up)
    import json

    sources = {name: src / (name.replace(".", "/") + ".py") for name in MODULES}
    if env.get("KVPLAN_NATIVE", "1") == "0":
        return "interpreted (KVPLAN_NATIVE=0)", sources
    try:
        digests = json.loads(stamp.read_text()).get("modules", {})
    except (OSError, ValueError, AttributeError):
        return f"interpreted ({stamp.name} unreadable: make native)", sources
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]  # this interpreter's (.cpython-311-x86_64-linux-gnu.so)
    for name, source in sources.items():
        if not source.with_name(source.stem + suffix).exists():
            return f"interpreted (no {source.stem}{suffix}: built for another Python; make native)", sources
        if digests.get(name) != hashlib.sha256(source.read_bytes()).hexdigest():
            return f"interpreted ({source.name} changed since the build: make native)", sources
    return "compiled", {}


def _install() -> str:
    state, from_source = decide(STAMP, _SRC, os.environ)
    if from_source:
        sys.meta_path.insert(0, _FromSource(from_source))
    return state


STATE = _install()
