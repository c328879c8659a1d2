"""Declared flags as typer options: :func:`flag_options` gives a command every row of a table of
:class:`kvplan.flags.Flag` (the serve flags of :data:`kvplan.serve_flags.SERVE_FLAGS`, the traffic
flags of :data:`kvplan.traffic.flags.TRAFFIC_FLAGS`, ...) in place of one of its parameters, so that
every command that takes a table spells, types and explains its flags the same way. A flag is
added to its table, never here.

Only typer and the standard library at module level: ``kvplan plan`` must start fast.
"""
from __future__ import annotations

import functools
import inspect
from enum import Enum
from typing import Any, Callable, Collection, Mapping, Optional, Sequence

import typer

from .. import serve_flags as sf
from ..flags import Flag
from ..serve_flags import human_int  # noqa: F401 - re-exported: kvplan.cli.main.human_int


def given_flags(ctx: typer.Context) -> frozenset:
    """The names of the parameters the user gave (on the command line or through the environment),
    from click's record of where each value came from, never by comparing with the default: an
    explicit ``-tp 1`` or ``--dtype auto`` is given as much as ``-tp 4``."""
    return frozenset(name for name in ctx.params
                     if (source := ctx.get_parameter_source(name)) is not None and source.name != "DEFAULT")


def option(flag: Flag, *, unset: bool = False, override: Optional[tuple] = None) -> tuple[Any, Any]:
    """(type, typer option with its default) of one table row (``unset``: None unless given, as for
    ``kvplan preflight``, whose config file fills what the command line leaves out; ``override``:
    a command's own (type, help, extra names...) for the flag, None unless given). Built once per
    flag and shared by the commands: the declarations are most of the CLI's start-up."""
    return _option(flag, unset and flag.default is not None, override)


@functools.lru_cache(maxsize=None)
def _option(flag: Flag, unset: bool, override: Optional[tuple]) -> tuple[Any, Any]:
    decls: tuple[str, ...] = flag.names
    if flag.negative:
        decls = (f"{flag.flag}/{flag.negative}", *flag.names[1:])
    if override is not None:
        kind, help_text, *extra = override
        return Optional[kind], typer.Option(None, *decls, *extra, help=help_text)
    kind = choice_enum(flag) if flag.choices else flag.type
    if flag.default is None or unset:
        return Optional[kind], typer.Option(None, *decls, help=flag.help)
    return kind, typer.Option(kind(flag.default) if flag.choices else flag.default, *decls, help=flag.help)


@functools.lru_cache(maxsize=None)
def choice_enum(flag: Flag) -> Any:
    """The str Enum typer shows and checks a flag's choices with (its members' values are the choices)."""
    return Enum(flag.field, {c.replace("-", "_"): c for c in flag.choices}, type=str)


def flag_options(table: Sequence[Flag], param: str, command: Callable, *, given_only: bool = False,
                 overrides: Optional[Mapping[str, tuple]] = None, unset: bool = False,
                 exclude: Collection[str] = ()) -> Callable:
    """Give a typer command every flag of ``table`` (but ``exclude``) in place of its keyword
    parameter ``param``: the signature lists them there (so ``--help`` and click's parser see the
    command's own options), and the command receives ``param`` as one dict, field -> value:
    every flag's, or with ``given_only`` those the user GAVE (by click's parameter source, so
    ``-tp 1`` is given; with ``unset``, those not None).

    ``overrides`` (field -> (type, help, extra names...)) lets a command read a flag its own way
    under the same names (``kvplan tune``'s ``--max-num-seqs 64,128`` lists); ``unset`` makes
    every flag None unless given (``kvplan preflight``)."""
    overrides = dict(overrides or {})
    rows = [f for f in table if f.field not in exclude]
    sig = inspect.signature(command, eval_str=True)
    params = list(sig.parameters.values())
    at = next(i for i, q in enumerate(params) if q.name == param)
    ctx_name = next((q.name for q in params if q.annotation is typer.Context), None)
    added = []
    for f in rows:
        kind, declared = option(f, unset=unset, override=overrides.get(f.field))
        added.append(inspect.Parameter(f.field, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=declared,
                                       annotation=kind))
    new = params[:at] + added + params[at + 1:]
    needs_ctx = given_only and not unset
    if needs_ctx and ctx_name is None:
        ctx_name = f"{param}_ctx"
        new.insert(0, inspect.Parameter(ctx_name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context))
    injected = needs_ctx and ctx_name == f"{param}_ctx"

    @functools.wraps(command)
    def with_flags(**kwargs):
        ctx = kwargs.pop(ctx_name) if injected else kwargs.get(ctx_name)
        values = {f.field: _plain(kwargs.pop(f.field)) for f in rows}
        if given_only:
            values = {k: v for k, v in values.items() if (v is not None if unset else _given(ctx, k))}
        return command(**{param: values}, **kwargs)

    with_flags.__signature__ = sig.replace(parameters=new)  # type: ignore[attr-defined]
    with_flags.__annotations__ = {q.name: q.annotation for q in new if q.annotation is not inspect.Parameter.empty}
    del with_flags.__wrapped__  # typer reads the signature above, not the command's own
    return with_flags


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _given(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def serve_options(command: Optional[Callable] = None, **kwargs: Any) -> Callable:
    """Every serve flag (:data:`kvplan.serve_flags.SERVE_FLAGS`) in place of the parameter ``plan``,
    which receives the flags the user gave, for :func:`kvplan.serve_flags.request_from_values` to
    complete with the defaults (keywords: those of :func:`flag_options`)."""
    if command is None:
        return functools.partial(serve_options, **kwargs)
    return flag_options(sf.SERVE_FLAGS, "plan", command, given_only=True, **kwargs)


def traffic_options(command: Optional[Callable] = None, **kwargs: Any) -> Callable:
    """Every traffic flag (:data:`kvplan.traffic.flags.TRAFFIC_FLAGS`) in place of the parameter
    ``traffic``, which receives all of them (None unless given), for
    :func:`kvplan.traffic.flags.traffic_maker` (keywords: those of :func:`flag_options`)."""
    if command is None:
        return functools.partial(traffic_options, **kwargs)
    from ..traffic.flags import TRAFFIC_FLAGS

    return flag_options(TRAFFIC_FLAGS, "traffic", command, **kwargs)
