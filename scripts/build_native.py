"""Compile the simulator's hot modules with mypyc (``make native``; ``make demo`` and ``make test`` run it).

The step loop of ``kvplan simulate`` runs once per engine step: a million requests at saturation are
two million steps, and the interpreter's attribute lookups are most of their cost. mypyc compiles
these pure-Python, type-annotated modules to C extensions beside their sources, with the same
semantics (the same floats in the same order: tests/test_native.py compares both builds byte for
byte). ``kvplan._native`` uses the build only while every source matches the digest written here;
otherwise, and with ``KVPLAN_NATIVE=0``, the modules run interpreted.

    python scripts/build_native.py           # build (needs mypy, a dev dependency, and a C compiler)
    python scripts/build_native.py --clean   # remove the build: everything runs interpreted

Without mypy or a compiler it says so and exits 0: kvplan works the same, only slower.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
LOG = ROOT / ".venv" / "native-build.log"
sys.path.insert(0, str(SRC))
from kvplan._native import GROUP, MODULES, STAMP  # noqa: E402


def _clean() -> None:
    for name in MODULES:
        base = SRC / name.replace(".", "/")
        for so in base.parent.glob(base.name + ".*.so"):
            so.unlink()
    for so in SRC.glob(f"{GROUP}__mypyc.*.so"):
        so.unlink()
    STAMP.unlink(missing_ok=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clean", action="store_true", help="remove the compiled modules")
    args = ap.parse_args()
    _clean()  # a half-replaced build must never be imported
    if args.clean:
        print("native build removed: the simulator runs interpreted")
        return 0
    try:
        from mypyc.build import mypycify
        from setuptools import setup
    except ImportError as e:
        print(f"native build skipped ({e}): the simulator runs interpreted (same results, slower)")
        return 0
    paths = [str(Path(name.replace(".", "/") + ".py")) for name in MODULES]
    # the sources as compiled (read first: a source edited during the build then fails the check)
    digests = {name: hashlib.sha256((SRC / (name.replace(".", "/") + ".py")).read_bytes()).hexdigest()
               for name in MODULES}
    cwd = os.getcwd()
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kvplan-native-") as tmp, open(LOG, "w") as log:
        os.chdir(SRC)
        saved = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)  # mypyc's and the compiler's output (the C compiler writes to the fds)
        os.dup2(log.fileno(), 2)
        try:
            setup(name="kvplan-native",
                  ext_modules=mypycify(["--follow-imports=silent", "--cache-dir", str(Path(tmp) / "mypy"), *paths],
                                       opt_level="3", group_name=GROUP, target_dir=str(Path(tmp) / "c")),
                  script_args=["build_ext", "--inplace", "--build-temp", str(Path(tmp) / "o"),
                               "--build-lib", str(Path(tmp) / "lib")])
            failed = None
        # mypy exits on a type error, setuptools raises its own errors for a compiler's: any of them
        # leaves kvplan interpreted
        except (Exception, SystemExit) as e:  # noqa: BLE001
            failed = e
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.chdir(cwd)
    if failed is not None:
        _clean()
        print("".join(LOG.read_text().splitlines(keepends=True)[-20:]), end="")
        print(f"native build failed ({failed}; log above, in full in {LOG}): the simulator runs interpreted "
              "(same results, slower)")
        return 0
    STAMP.write_text(json.dumps({"group": GROUP, "modules": digests}, indent=1) + "\n")
    print(f"native build: {len(MODULES)} simulator modules compiled with mypyc (log: {LOG.relative_to(ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
