"""``kvplan preflight --config preflight.yaml|.toml``: the same keys as the command-line flags,
kept in a team's repository. Flags given on the command line override the file.

Keys are the long flag names with ``_`` or ``-`` (``max_model_len`` = ``max-model-len``). An
unknown key, a value of the wrong type, or a file that is not valid YAML/TOML is a usage error
(exit 2) naming the file and the line. YAML is read with ``yaml.safe_load`` semantics (the
SafeLoader: no Python objects), TOML with :mod:`tomllib`.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import UsageError, file_not_found
from ..serve_flags import BY_FIELD, SERVE_FLAGS, config_types

_NUM = (int, float)

#: the serve flags (every row of kvplan/serve_flags.py's table): key -> accepted types
PLAN_KEYS: dict[str, tuple[type, ...]] = {f.field: config_types(f) for f in SERVE_FLAGS}
#: preflight's own flags
PREFLIGHT_KEYS: dict[str, tuple[type, ...]] = {
    "tokenizer": (str,),
    "requests": (str,), "target_qps": _NUM, "load_factor": _NUM, "slo": (str, dict), "duration": (str, int, float),
    "url": (str,), "log": (str,), "launch": (bool,), "vllm_bin": (str,), "vllm_args": (list, str), "baseline": (str,),
    "dry_run": (bool,), "output_dir": (str,), "format": (str,), "max_tokens": (int,), "history_turns": (int,),
    "history_tokens": (int,), "percentile": _NUM, "strict": (bool,), "estimate": (bool,),
    "startup_timeout": (str, int, float), "request_timeout": (str, int, float),
    "gpu_price": (str,),
}
KNOWN_KEYS = {**PLAN_KEYS, **PREFLIGHT_KEYS}


def load_config(path: str | Path) -> dict[str, Any]:
    """The file's settings with canonical (underscore) keys; raises UsageError with file:line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise file_not_found(p) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--config {p}: cannot read: {exc}") from None
    suffix = p.suffix.lower()
    if suffix == ".toml":
        data, lines = _load_toml(p, text)
    elif suffix in (".yaml", ".yml"):
        data, lines = _load_yaml(p, text)
    else:
        raise UsageError(f"--config {p}: expected a .yaml, .yml or .toml file")
    return _validate(p, data, lines)


def _load_yaml(p: Path, text: str) -> tuple[Any, dict[str, int]]:
    try:
        import yaml
    except ImportError:  # PyYAML is a dependency; a broken install still gets a clear message
        raise UsageError(f"--config {p}: reading YAML needs PyYAML (pip install pyyaml), or write the same keys "
                         "as a .toml file") from None

    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)  # the same text, for each key's line
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(p)
        raise UsageError(f"{where}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{p}: not valid YAML: {exc}") from None
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, _ in node.value:
            lines.setdefault(str(key_node.value), key_node.start_mark.line + 1)
    return data, lines


_TOML_AT = re.compile(r"\(at line (\d+), column (\d+)\)")


def _load_toml(p: Path, text: str) -> tuple[Any, dict[str, int]]:
    try:
        import tomllib
    except ImportError:  # Python 3.10: the same parser as the tomli package
        try:
            import tomli as tomllib
        except ImportError:
            raise UsageError(f"--config {p}: reading TOML on Python 3.10 needs tomli (pip install tomli), or write "
                             "the same keys as a .yaml file") from None

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_AT.search(msg)
        where = f"{p}:{m.group(1)}:{m.group(2)}" if m else str(p)
        raise UsageError(f"{where}: not valid TOML: {_TOML_AT.sub('', msg).strip()}") from None
    lines: dict[str, int] = {}
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*[\"']?([A-Za-z0-9_-]+)[\"']?\s*=", line)
        if m:
            lines.setdefault(m.group(1), i)
    return data, lines


def _validate(p: Path, data: Any, lines: dict[str, int]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{p}: expected a mapping of settings (key: value), got {type(data).__name__}")
    out: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        where = f"{p}:{lines[str(raw_key)]}" if str(raw_key) in lines else str(p)
        if key not in KNOWN_KEYS:
            raise UsageError(f"{where}: unknown key {raw_key!r} in {p.name} (known keys: see `kvplan preflight "
                             "--help`; the same names as the flags)")
        types = KNOWN_KEYS[key]
        # bool is an int in Python: a `true` where a number belongs is a mistake, not 1
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            names = " or ".join(t.__name__ for t in types)
            raise UsageError(f"{where}: {raw_key}: expected {names}, got {type(value).__name__} {value!r}")
        choices = BY_FIELD[key].choices if key in BY_FIELD else ()
        if choices and str(value) not in choices:
            raise UsageError(f"{where}: {raw_key}: {value!r} is not one of {', '.join(choices)}")
        if key in out:
            raise UsageError(f"{where}: {raw_key!r} given twice in {p.name}")
        out[key] = _normalise(key, value, where)
    return out


def _normalise(key: str, value: Any, where: str) -> Any:
    if key == "slo" and isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if key == "vllm_args":
        if isinstance(value, str):
            import shlex

            return shlex.split(value)  # argv list; never run through a shell
        if not all(isinstance(v, (str, int, float)) for v in value):
            raise UsageError(f"{where}: vllm_args: expected a list of strings")
        return [str(v) for v in value]
    if key in BY_FIELD and BY_FIELD[key].sizes or key in ("vllm_version", "duration", "startup_timeout",
                                                           "request_timeout"):
        return str(value)
    return value
