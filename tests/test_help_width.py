"""Issue 30, finding 19: every command's --help is readable at 80 columns: every name of every
option appears whole (``--kv-cache-memory`` and ``--kv-cache-memory-bytes`` were both cut to
``--kv-cache-memo…``), no line is wider than the terminal, and the help of an option is not
squeezed into a narrow column (it starts on its own line, under the names)."""
from __future__ import annotations

import pytest
import typer

from first_hour_helpers import kvplan
from kvplan.cli.main import app


def _commands():
    root = typer.main.get_command(app)
    out = []
    for name, cmd in sorted(root.commands.items()):
        subs = getattr(cmd, "commands", None)
        out.append(((name,), cmd))
        for sub, sc in sorted((subs or {}).items()):
            out.append(((name, sub), sc))
    return out


COMMANDS = _commands()


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_help_names_every_option_whole_at_80_columns(path, cmd):
    out = kvplan(*path, "--help", columns=80)
    assert out.exit_code == 0
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    text = " ".join(line.strip("│ ") for line in lines)
    for param in cmd.params:
        for name in (*param.opts, *getattr(param, "secondary_opts", ())):
            if name.startswith("-"):
                assert name in text, (path, name)
    assert not any("…" in line and "--" in line.split("…")[0][-30:] for line in lines), "a name was cut"


def test_plan_help_keeps_both_kv_cache_memory_flags_apart_with_their_help_at_full_width():
    lines = kvplan("plan", "--help", columns=80).stdout.splitlines()
    names = [line.strip("│ ").split("  ")[0] for line in lines]
    assert "--kv-cache-memory" in names and "--kv-cache-memory-bytes" in names
    i = names.index("--kv-cache-memory-bytes")
    assert lines[i + 1].strip("│ ").startswith("vLLM's flag: exact KV bytes per GPU.")
