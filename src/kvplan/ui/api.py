"""What ``kvplan ui``'s JSON API answers: the CLI's own JSON for the CLI's own flags.

The page sends the argv it would run (``["--model", "llama3-8b", "-tp", "2"]``) and gets back
exactly what ``kvplan plan|simulate|lengths ... --format json`` prints: the flags are read with
the tables the commands' options come from (names, types, defaults), then the same library
functions the commands call build the result (:func:`kvplan.serve_flags.plan_from_args`,
:func:`kvplan.sim.run.run_simulate`, :func:`kvplan.workload.run.lengths_from_values`). Nothing
here decides a number, and nothing here imports the CLI.

What the page may not do is reach outside the page: flags that name a file on this machine
(``--from-log``, ``--profile``, ``--html``, ``--output``, ``--tokenizer``, ...) are refused, a
``--model`` must be a catalog entry or a config.json uploaded to this server, and ``--requests``
an uploaded log (see :class:`Uploads`).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

from ..errors import UsageError
from ..serve_flags import SERVE_FLAGS
from .uploads import MAX_UPLOAD_BYTES, Uploads, UploadTooLarge  # noqa: F401 - the page's uploads

#: vLLM versions whose source docs/vllm-semantics.md says was read in full (the newest first);
#: any other version is accepted too, as on the command line
VERSIONS_READ = ("0.33", "0.32.0", "0.27.0", "0.21.0", "0.15.1", "0.11.0", "0.10.2", "0.8.5")

#: flags of the commands' tables the page may not send: each names a file or a command line on this
#: machine (the page uploads files and has the fields instead; --speculative-config's "model" names a
#: config the server would load)
NOT_FROM_THE_PAGE = {"from_log", "tokenizer", "from_bench_cmd", "from_serve_cmd", "profile", "chat_template",
                     "speculative_config", "saturation_search", "capacity", "per_request", "strict",
                     "max_record_bytes", "max_issues"}


def _allowed(*tables) -> tuple[frozenset, frozenset]:
    """(flags that take a value, flags that take none) of the tables, but those the page may not send."""
    rows = [f for table in tables for f in table if f.field not in NOT_FROM_THE_PAGE]
    return (frozenset(n for f in rows if f.type is not bool for n in f.names),
            frozenset(n for f in rows if f.type is bool for n in f.all_names()))


@lru_cache(maxsize=1)
def _tables() -> dict:
    """command -> the flag tables its argv is read with (the commands' own: kvplan/serve_flags.py,
    kvplan/traffic/flags.py, kvplan/simulate_flags.py, kvplan/workload/run.py)."""
    from ..simulate_flags import SIMULATE_FLAGS
    from ..traffic.flags import TRAFFIC_FLAGS
    from ..tune.flags import NOT_TRAFFIC, SPACE_OVERRIDES, TUNE_FLAGS
    from ..workload.run import LENGTHS_FLAGS

    # tune reads the space's serve flags as lists (its own types), and the server runs the work
    space = tuple(f._replace(type=SPACE_OVERRIDES[f.field][0], names=f.names + tuple(SPACE_OVERRIDES[f.field][2:]))
                  if f.field in SPACE_OVERRIDES else f for f in SERVE_FLAGS)
    tune_own = tuple(f for f in TUNE_FLAGS if f.field not in ("processes", "ray_address", "profile"))
    return {"plan": (SERVE_FLAGS,), "simulate": (SERVE_FLAGS, TRAFFIC_FLAGS, SIMULATE_FLAGS),
            "lengths": (LENGTHS_FLAGS,),
            "tune": (space, tuple(f for f in TRAFFIC_FLAGS if f.field not in NOT_TRAFFIC), tune_own)}


class _Allowed(dict):
    """command -> (value flags, bool flags) the page may send, derived from the tables on first use."""

    def __missing__(self, command: str) -> tuple[frozenset, frozenset]:
        self[command] = _allowed(*_tables()[command])
        return self[command]


ALLOWED = _Allowed()



def vet_argv(command: str, argv: Sequence[Any], uploads: Uploads) -> list[str]:
    """``argv`` with every flag checked against what the page may ask for, and upload ids turned
    into their paths. Raises UsageError naming the first flag that is not allowed."""
    if not isinstance(argv, (list, tuple)) or not all(isinstance(a, (str, int, float)) for a in argv):
        raise UsageError("argv must be a list of strings")
    values, bools = ALLOWED[command]
    out: list[str] = []
    positional: list[str] = []
    items = [str(a) for a in argv]
    i = 0
    while i < len(items):
        flag = items[i]
        if flag in bools:
            out.append(flag)
            i += 1
            continue
        if flag not in values:
            if command == "lengths" and not flag.startswith("-"):
                positional.append(uploads.path(flag, "request log"))
                i += 1
                continue
            raise UsageError(f"{flag}: not a flag the page can set (allowed: {', '.join(sorted(values | bools))})")
        if i + 1 >= len(items):
            raise UsageError(f"{flag} needs a value")
        value = items[i + 1]
        if flag in ("--model", "-m"):
            value = _model_arg(value, uploads)
        elif flag == "--requests":
            value = uploads.path(value, "--requests")
        elif flag == "--gpu-price" and "=" not in value:
            raise UsageError("--gpu-price: the page takes NAME=USD pairs (e.g. A100-80GB=1.8,H100=2.5), not a file")
        out += [flag, value]
        i += 2
    return out + positional


def _model_arg(value: str, uploads: Uploads) -> str:
    if value.startswith("upload:"):
        return uploads.path(value, "--model")
    from ..models import catalog

    if catalog.find(value) is None:
        from ..errors import UnknownModelError

        raise UnknownModelError(value, catalog.suggest(value))  # the CLI's message; never the hub from here
    return value


def _values(command: str, argv: list[str]) -> tuple[dict, list[str]]:
    """The command's flag values for ``argv`` (by field, only those given), read by the tables the
    command's own options come from, and its positional arguments."""
    from ..flags import parse_argv

    table = tuple(f for t in _tables()[command] for f in t)
    return parse_argv(argv, table, what=f"{command} flags", positionals=command == "lengths")


def plan_json(argv: list[str]) -> dict:
    """``kvplan plan ARGV --format json``."""
    from ..serve_flags import plan_from_args

    return plan_from_args(argv).to_dict()


def simulate_json(argv: list[str]) -> dict:
    """``kvplan simulate ARGV --format json``."""
    from ..sim.run import SimulateOptions, run_simulate
    from ..simulate_flags import SIMULATE_FLAGS
    from ..traffic.flags import TRAFFIC_FLAGS

    values, _ = _values("simulate", argv)
    pick = lambda table: {f.field: values[f.field] for f in table if f.field in values}  # noqa: E731
    traffic = {f.field: values.get(f.field) for f in TRAFFIC_FLAGS}
    return run_simulate(SimulateOptions.from_values(pick(SERVE_FLAGS), traffic, pick(SIMULATE_FLAGS))).to_dict()


def tune_json(argv: list[str]) -> dict:
    """``kvplan tune ARGV --format json`` (the page's sizing view sends ``--gpus auto``); the server
    decides the work (one process here, no Ray), not the page."""
    from ..traffic.flags import TRAFFIC_FLAGS
    from ..tune.flags import NOT_TRAFFIC, TUNE_FLAGS
    from ..tune.run import TuneOptions, run_tune

    values, _ = _values("tune", argv)
    serve = {f.field: values[f.field] for f in SERVE_FLAGS if f.field in values}
    traffic = {f.field: values.get(f.field) for f in TRAFFIC_FLAGS if f.field not in NOT_TRAFFIC}
    own = {f.field: values[f.field] for f in TUNE_FLAGS if f.field in values}
    own.update(processes=1, ray_address=None, profile=None)
    return run_tune(TuneOptions(serve=serve, traffic=traffic, own=own)).to_dict()


def lengths_json(argv: list[str]) -> dict:
    """``kvplan lengths ARGV --format json``; without a tokenizer of the model on this machine the
    prompts are estimated from characters (``--estimate``), as the page then says."""
    from ..workload.run import lengths_from_values

    values, files = _values("lengths", argv)
    result = lengths_from_values(values, files)
    if result.records.used == 0:
        skipped = dict(result.records.skipped)
        raise UsageError(f"no usable record in the log (skipped: {skipped or 'none'})"
                         + ("" if values.get("estimate") else "; without the model's tokenizer here, try --estimate"))
    return result.to_dict()


def has_tokenizer(model: str | None) -> bool:
    """Whether the model's tokenizer is on this machine (a local folder or the HF cache; offline)."""
    if not model:
        return False
    from ..workload.tokenizer import ChatTokenizer

    try:
        return ChatTokenizer.for_model(model) is not None
    except UsageError:
        return False


@lru_cache(maxsize=1)
def models_json() -> list[dict]:
    """``kvplan models --format json`` (the catalog)."""
    from ..memory.listing import catalog_rows

    return catalog_rows()


@lru_cache(maxsize=1)
def gpus_json() -> list[dict]:
    """``kvplan gpus --format json``."""
    from dataclasses import asdict

    from ..hardware import catalog

    return [asdict(g) | {"memory_gib": round(g.memory_gib, 2)} for g in catalog()]


def versions_json() -> dict:
    from ..memory.semantics import LATEST

    return {"latest": ".".join(map(str, LATEST)), "read": list(VERSIONS_READ)}


def dumps(d: Any) -> str:
    """An answer's body: kvplan's one JSON policy (:mod:`kvplan._json`; a NaN would break the page's JSON.parse)."""
    from .._json import dumps_line

    return dumps_line(d)
