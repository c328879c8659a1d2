"""One option given by two of its names with different values is refused.

click keeps the last value of a repeated option, so ``-tp 2 --tensor-parallel-size 4`` planned TP 4
and ``kvplan trim --budget 100 --max-model-len 200`` trimmed to 200, without a word: two names
that read as two settings. The same name repeated (the usual "the last one wins" override), an
on/off pair (``--x`` then ``--no-x``), the same value twice and options meant to repeat
(``multiple=True``) pass.
Two different options that mean one quantity (``--rate`` and ``--request-rate``) are checked where
they are merged (traffic/flags.traffic_maker).
"""
from __future__ import annotations

from typing import Any, Optional


def install() -> None:
    """Check every command's argv before click parses it (once)."""
    from typer.core import TyperCommand

    try:  # typer >= 0.20 vendors click; its own exceptions are the ones its main() reports
        from typer._click.exceptions import UsageError as ClickUsageError
    except ImportError:  # pragma: no cover - an older typer over the click package
        from click import UsageError as ClickUsageError

    original = TyperCommand.parse_args
    if getattr(original, "_kvplan_aliases", False):
        return

    def parse_args(self, ctx, args):
        clash = repeated_option(self, list(args))
        if clash:
            raise ClickUsageError(clash, ctx=ctx)
        return original(self, ctx, args)

    parse_args._kvplan_aliases = True  # type: ignore[attr-defined]
    TyperCommand.parse_args = parse_args


def repeated_option(command: Any, args: list[str]) -> Optional[str]:
    """The message for the first option given by two of its names with different values, or None."""
    names: dict[str, Any] = {}
    for param in command.params:
        if getattr(param, "multiple", False) or getattr(param, "count", False) or getattr(param, "is_flag", False):
            continue
        aliases = [n for n in getattr(param, "opts", ()) if n.startswith("-")]
        if len(aliases) > 1:
            for name in aliases:
                names[name] = param
    seen: dict[str, tuple[str, str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        name, _, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        param = names.get(name)
        if param is None:
            i += 1
            continue
        if inline or "=" in arg:
            value, i = inline, i + 1
        elif i + 1 < len(args):
            value, i = args[i + 1], i + 2
        else:
            break  # a missing value: click says so
        before = seen.get(param.name)
        if before is not None and before[0] != name and before[1] != value:
            return (f"{before[0]} {before[1]} and {name} {value} both set {param.name.replace('_', '-')}: "
                    "give one of them")
        seen[param.name] = (name, value)
    return None
