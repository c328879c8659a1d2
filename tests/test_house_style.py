"""House style that a reader can check by grep: code carries provenance (vLLM's file and version, what a
constant was fitted to), never a machine's paths or the project's own process history — those go in docs/."""
from __future__ import annotations

import re
from pathlib import Path

import kvplan

SOURCE_ROOT = Path(kvplan.__file__).parent
# A path of one machine, or a reference to this project's own sessions / issues (vLLM's issues are
# cited as "vLLM issue #N" and are provenance, so the pattern wants a bare number).
FORBIDDEN = re.compile(r"/work/|/home/|/Users/|/tmp/|\bin session \d|\bsession \d+\b|\(issue \d+\)|\brefit(ted)? in\b")


def test_no_source_file_names_a_machine_path_or_the_projects_history():
    offending = []
    for path in sorted(SOURCE_ROOT.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if FORBIDDEN.search(line):
                offending.append(f"{path.relative_to(SOURCE_ROOT)}:{number}: {line.strip()}")
    assert offending == []
