"""The serve flags as typer options: :func:`serve_options` gives a command every row of
:data:`kvplan.serve_flags.SERVE_FLAGS` (plan, simulate, tune, calibrate and preflight take the same
flags, spelled, typed and explained the same way), as :func:`~kvplan.cli.traffic_flags.bench_flags`
does for vLLM bench's traffic flags. A flag is added to the table, never here.

Only typer and the standard library at module level: ``kvplan plan`` must start fast.
"""
from __future__ import annotations

import functools
import inspect
from typing import Annotated, Any, Callable, Mapping, Optional

import typer

from .. import serve_flags as sf
from ..serve_flags import human_int  # noqa: F401 - re-exported: kvplan.cli.main.human_int


def given_flags(ctx: typer.Context) -> frozenset:
    """The names of the parameters the user gave (on the command line or through the environment),
    from click's record of where each value came from, never by comparing with the default: an
    explicit ``-tp 1`` or ``--dtype auto`` is given as much as ``-tp 4``."""
    return frozenset(name for name in ctx.params
                     if (source := ctx.get_parameter_source(name)) is not None and source.name != "DEFAULT")


def option(flag: sf.ServeFlag, *, unset: bool = False, override: Optional[tuple] = None) -> Any:
    """The ``Annotated`` typer declaration of one table row (``unset``: None unless given, as for
    ``kvplan preflight``, whose config file fills what the command line leaves out; ``override``:
    a command's own (type, help, extra names...) for the flag, None unless given)."""
    if flag.type is bool:
        decls: tuple[str, ...] = (f"{flag.flag}/{flag.negative}", *flag.names[1:])
    else:
        decls = flag.names
    if override is not None:
        kind, help_text, *extra = override
        return Annotated[Optional[kind], typer.Option(*decls, *extra, help=help_text)]
    kind = flag.type if flag.default is not None and not unset else Optional[flag.type]
    return Annotated[kind, typer.Option(*decls, help=flag.help)]


def serve_options(command: Optional[Callable] = None, *, overrides: Optional[Mapping[str, Any]] = None,
                  unset: bool = False) -> Callable:
    """Give a typer command every serve flag in place of its keyword parameter ``plan``: the
    signature lists them there (so ``--help`` and click's parser see the command's own options),
    and the command receives ``plan``, a dict of the flags the user GAVE (field -> value; given by
    click's parameter source, so ``-tp 1`` is given) for :func:`kvplan.serve_flags.request_from_values`
    to complete with the defaults.

    ``overrides`` (field -> (type, help, extra names...)) lets a command read a flag its own way
    under the same names (``kvplan tune``'s ``--max-num-seqs 64,128`` lists); ``unset`` makes
    every flag None unless given (``kvplan preflight``)."""
    if command is None:
        return functools.partial(serve_options, overrides=overrides, unset=unset)
    overrides = dict(overrides or {})
    sig = inspect.signature(command, eval_str=True)
    params = list(sig.parameters.values())
    at = next(i for i, q in enumerate(params) if q.name == "plan")
    ctx_name = next((q.name for q in params if q.annotation is typer.Context), None)
    added = [inspect.Parameter(f.field, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                               default=None if unset or f.field in overrides else f.default,
                               annotation=option(f, unset=unset, override=overrides.get(f.field)))
             for f in sf.SERVE_FLAGS]
    new = params[:at] + added + params[at + 1:]
    if ctx_name is None:
        new.insert(0, inspect.Parameter("serve_flags_ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        annotation=typer.Context))

    @functools.wraps(command)
    def with_serve_flags(**kwargs):
        ctx = kwargs[ctx_name] if ctx_name else kwargs.pop("serve_flags_ctx")
        values = {name: kwargs.pop(name) for name in sf.FIELDS}
        given = {name for name, value in values.items()
                 if (value is not None if unset else _given(ctx, name))}
        return command(plan={k: v for k, v in values.items() if k in given}, **kwargs)

    with_serve_flags.__signature__ = sig.replace(parameters=new)  # type: ignore[attr-defined]
    with_serve_flags.__annotations__ = {q.name: q.annotation for q in new
                                        if q.annotation is not inspect.Parameter.empty}
    del with_serve_flags.__wrapped__  # typer reads the signature above, not the command's own
    return with_serve_flags


def _given(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


@functools.lru_cache(maxsize=None)
def cli_command(name: str):
    """The click command of ``kvplan NAME`` (built once: typer rebuilds every command's parameters
    from their annotations, ~0.1 s, each time it is asked)."""
    from .main import app

    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
