"""``--help`` that a person can read at 80 columns.

typer's rich help puts every option in one table row: long names, short names, the ``--no-``
names, the type and the help. With ``plan``'s 40 options that leaves the help an 18-character
column at 80 columns and cuts long names (``--kv-cache-memory`` and ``--kv-cache-memory-bytes``
both printed ``--kv-cache-memo…``). Below :data:`WIDE` columns each option gets its own lines
instead: all its names and its type on the first, the help (and default) under it, indented, at
the full width. Wider terminals keep typer's table.
"""
from __future__ import annotations

#: at or above this width typer's own table has room for names, types and help side by side
WIDE = 120


def install_on_help() -> None:
    """Install :func:`install` the first time typer formats a help page, not at import: typer's
    rich help module imports rich's markdown, pretty and traceback (about 60 ms), which a command
    that prints no help (``kvplan plan``) should not pay for."""
    from typer.core import TyperCommand, TyperGroup

    for cls in (TyperCommand, TyperGroup):
        original = cls.format_help
        if getattr(original, "_kvplan_narrow", False):
            continue

        def format_help(self, ctx, formatter, _original=original):
            install()
            return _original(self, ctx, formatter)

        format_help._kvplan_narrow = True  # type: ignore[attr-defined]
        cls.format_help = format_help


def install() -> None:
    """Replace typer's options panel with :func:`_options_panel` (once)."""
    from typer import rich_utils

    original = rich_utils._print_options_panel
    if getattr(original, "_kvplan_narrow", False):
        return

    def panel(*, name, params, ctx, markup_mode, console):
        if console.width >= WIDE or not params:
            return original(name=name, params=params, ctx=ctx, markup_mode=markup_mode, console=console)
        return _options_panel(rich_utils, name=name, params=params, ctx=ctx, markup_mode=markup_mode,
                              console=console)

    panel._kvplan_narrow = True  # type: ignore[attr-defined]
    rich_utils._print_options_panel = panel


def _names(rich_utils, param, ctx) -> str:
    """``--tensor-parallel-size, -tp <int>`` / ``--enforce-eager, --no-enforce-eager``: every name
    the option answers to (never cut), then its type as typer shows it."""
    from typer.core import TyperArgument

    if isinstance(param, TyperArgument):
        label = param.metavar or (param.name or "").upper()
        kind = param.type.get_metavar(param=param, ctx=ctx) or f"<{param.type.name}>"
        return f"{label}  {kind}"
    names = [o for o in param.opts if o.startswith("--")] + [o for o in param.opts if not o.startswith("--")]
    names += list(param.secondary_opts)
    kind = ""
    if not getattr(param, "is_flag", False):
        metavar = param.make_metavar(ctx=ctx)
        if metavar and "bool" not in metavar.lower():
            kind = f"  {metavar}"
    required = f" {rich_utils.REQUIRED_SHORT_STRING}" if param.required else ""
    return ", ".join(names) + kind + required


def _options_panel(rich_utils, *, name, params, ctx, markup_mode, console) -> None:
    from rich.console import Group
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.text import Text

    parts = []
    for param in params:
        parts.append(Text(_names(rich_utils, param, ctx), style=rich_utils.STYLE_OPTION, overflow="fold"))
        helped = rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
        parts.append(Padding(helped, (0, 0, 0, 4)))
    console.print(Panel(Group(*parts), border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER, title=name,
                        title_align=rich_utils.ALIGN_OPTIONS_PANEL))
