"""Issue 30, finding 18: every number README.md shows from a command is the command's output
today: scripts/readme_numbers.py regenerates them (the scenario's plan text, the simulated table,
the catalog size, the simulation's and the tune searches' figures) and this test fails, with the
diff, when README.md is stale. The two tune searches take minutes: their answers are read from
scripts/readme_numbers.json, which `--write --slow` refreshes; everything else is recomputed here."""
from __future__ import annotations

import difflib
import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@lru_cache(maxsize=1)
def _script():
    """Loaded once: its command results are cached, so each render after the first is quick."""
    spec = importlib.util.spec_from_file_location("readme_numbers", ROOT / "scripts" / "readme_numbers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_readme_numbers_are_what_the_commands_print_today():
    script = _script()
    current = (ROOT / "README.md").read_text(encoding="utf-8")
    fresh = script.render(current)
    diff = "".join(difflib.unified_diff(current.splitlines(True), fresh.splitlines(True), "README.md", "regenerated"))
    assert fresh == current, "README.md is stale: run make readme (python scripts/readme_numbers.py --write)\n" + diff


def test_the_tune_answers_are_stored_with_their_commands():
    import json

    stored = json.loads((ROOT / "scripts" / "readme_numbers.json").read_text())
    script = _script()
    assert stored["scenario"]["command"] == "kvplan " + " ".join(script.TUNE_SCENARIO)
    assert stored["wide"]["command"] == "kvplan " + " ".join(script.TUNE_WIDE)
    for answer in stored.values():
        assert answer["gpus"] == answer["tp"] * answer["dp"]  # the GPU count is the split's


def test_a_stale_number_is_caught(tmp_path):
    script = _script()
    current = (ROOT / "README.md").read_text(encoding="utf-8")
    import re

    stale = re.sub(r"\((\d+) models, offline\)", lambda m: f"({int(m.group(1)) + 1} models, offline)", current, count=1)
    stale = stale.replace("overloads it ", "overloads it 1", 1)  # 17-fold read as 117-fold
    assert stale != current and script.render(stale) == current
