"""Declared flags: a :class:`Flag` names one option once (its field, its spellings, the type its
text is read as, its default and help), and tables of them are every front end's vocabulary: the
CLI's options (``kvplan.cli.options``), the page's argv and a pasted command line
(:func:`parse_argv`, :func:`split_argv`). The tables live with their domain:
:data:`kvplan.serve_flags.SERVE_FLAGS` (vLLM's serve flags), :data:`kvplan.traffic.flags.TRAFFIC_FLAGS`
(vllm bench serve's and kvplan's traffic), :data:`kvplan.simulate_flags.SIMULATE_FLAGS`.

Only the standard library: the CLI imports the tables to declare its options, and ``kvplan plan``
must start fast.
"""
from __future__ import annotations

from typing import Any, Collection, Iterable, Mapping, NamedTuple, Optional, Sequence

from .errors import UsageError


class Flag(NamedTuple):
    """One option: how every front end spells, reads and defaults it. Immutable and hashable (a
    named tuple: cheaper to declare than a dataclass, and the CLI declares its tables at start-up)."""

    field: str  # the key in a values mapping (and the parameter of the CLI command)
    names: tuple[str, ...]  # ("--tensor-parallel-size", "-tp"): the long name first
    type: type  # what the text is read as: int, float, str or bool
    default: Any  # the value when nobody gives one
    help: str
    negatable: bool = False  # a bool flag with a --no- form
    choices: tuple[str, ...] = ()  # the values a str flag takes (none: any)
    # a serve flag's (kvplan.serve_flags.ServeFlag): how it meets a start-up log and vLLM's command line
    from_log: bool = False  # a start-up log's "non-default args" fills it when the flag is not given
    vllm: bool = False  # a `vllm serve` flag (False: kvplan's own description of the deployment)
    sizes: bool = False  # a str read later as a number or size (32k, 30GiB): a config may give a number

    @property
    def flag(self) -> str:
        """The long name: ``--tensor-parallel-size``."""
        return self.names[0]

    @property
    def negative(self) -> Optional[str]:
        """``--no-enforce-eager`` for a negatable bool flag, else None."""
        return "--no-" + self.names[0][2:] if self.type is bool and self.negatable else None

    def all_names(self) -> tuple[str, ...]:
        return self.names + ((self.negative,) if self.negative else ())

    def read(self, raw: Any, name: Optional[str] = None) -> Any:
        """The value of a split flag (``raw``: its text, or True for a bool flag, spelled ``name``)."""
        if self.type is bool:
            return name != self.negative
        if self.type in (int, float):
            return read_number(raw, self.flag, self.type)
        if self.choices and str(raw) not in self.choices:
            raise UsageError(f"{self.flag}: {str(raw)!r} is not one of {', '.join(self.choices)}")
        return str(raw)


def read_number(value: Any, flag: str, kind: type = float) -> Any:
    """``kind(value)``, or a UsageError naming the flag."""
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise UsageError(f"{flag}: cannot read {value!r} as a number") from None


def kinds(table: Iterable[Flag]) -> dict[str, str]:
    """Every spelling of every flag -> "flag" (takes no value) or "value", for :func:`split_argv`."""
    return {n: ("flag" if f.type is bool else "value") for f in table for n in f.all_names()}


def by_name(table: Iterable[Flag]) -> dict[str, Flag]:
    return {n: f for f in table for n in f.all_names()}


def values_from_split(split: Mapping[str, Any], table: Iterable[Flag]) -> dict[str, Any]:
    """Split flags (``{"--max-num-seqs": "64", "--no-enforce-eager": True}``, any spelling of a flag
    of ``table``; others are left out) -> values by field, each read as its type."""
    names = by_name(table)
    return {names[n].field: names[n].read(raw, n) for n, raw in split.items() if n in names}


def parse_argv(argv: Iterable[Any], table: Sequence[Flag], *, what: str,
               positionals: bool = False) -> tuple[dict[str, Any], list[str]]:
    """kvplan's spelling of flags (``["--model", "x", "-tp", "2", "--enforce-eager"]``, also
    ``--flag=value``; no abbreviations) -> (values by field, the positional arguments). An unknown
    flag, a missing or malformed value, or a positional argument where none is taken is a
    UsageError naming it."""
    split, rest, _ = split_argv([str(a) for a in argv], {"flags": kinds(table)}, what, abbreviate=False)
    if rest and not positionals:
        raise UsageError(f"{what}: unexpected argument(s) {' '.join(rest)}")
    return values_from_split(split, table), rest


def _canon(flag: str) -> str:
    """--random_input_len -> --random-input-len (vLLM's FlexibleArgumentParser)."""
    if flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-")
    return flag


def split_argv(argv: Sequence[str], tables: Mapping[str, Mapping[str, str]], what: str,
               exact: Collection[str] = frozenset(),
               abbreviate: bool = True) -> tuple[dict[str, Any], list[str], list[str]]:
    """argv -> ({flag: value or True or [values]}, positionals, ignored flags), as vLLM's argparse
    splits it: ``--flag value`` and ``--flag=value``, underscores as dashes. ``tables`` maps a
    flag to "value" (one argument), "flag" (none) or "multi" (nargs="+"); those in the tables
    named "ignored" are listed, those in "unsupported" are an error. Errors name unknown and
    unsupported flags together. With ``abbreviate`` a prefix of a flag is the flag when it is the
    only one it begins (argparse's allow_abbrev), but never for the names in ``exact`` (kvplan's
    own words, which vLLM's parser does not have)."""
    known: dict[str, str] = {}
    for table in tables.values():
        known.update(table)
    out: dict[str, Any] = {}
    positionals: list[str] = []
    ignored: list[str] = []
    unknown: list[str] = []
    unsupported: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("-") or tok == "-":
            positionals.append(tok)
            continue
        name, eq, inline = tok.partition("=")
        name = _canon(name)
        if name not in known and name.startswith("--") and abbreviate:
            matches = [k for k in known if k.startswith(name) and k not in exact]
            if len(matches) == 1:  # argparse's allow_abbrev
                name = matches[0]
            elif len(matches) > 1:
                raise UsageError(f"{what}: {tok} is ambiguous (could be {', '.join(sorted(matches))})")
        kind = known.get(name)
        if kind is None:
            unknown.append(name)
            # skip its value, if it seems to have one
            if not eq and i < len(argv) and not argv[i].startswith("-"):
                i += 1
            continue
        if kind == "flag":
            if eq:  # argparse: "ignored explicit argument"
                raise UsageError(f"{what}: {name} takes no value (got {tok!r})")
            value: Any = True
        elif kind == "value":
            if eq:
                value = inline
            elif i < len(argv):
                value = argv[i]
                i += 1
            else:
                raise UsageError(f"{what}: {name} needs a value")
        else:
            vals = [inline] if eq else []
            while i < len(argv) and not argv[i].startswith("--"):
                vals.append(argv[i])
                i += 1
            value = vals
        if name in tables.get("unsupported", {}):
            unsupported.append(name)
        elif name in tables.get("ignored", {}):
            ignored.append(name)
        else:
            out[name] = value
    if unknown or unsupported:
        parts = []
        if unsupported:
            parts.append(f"not modelled by kvplan: {', '.join(unsupported)}")
        if unknown:
            parts.append(f"unknown flag(s): {', '.join(unknown)}")
        raise UsageError(f"{what}: " + "; ".join(parts))
    return out, positionals, ignored
