"""Errors kvplan raises on purpose.

The CLI maps :class:`UsageError` (and its subclasses) to exit code 2, so callers can tell
"you asked for something impossible" apart from crashes. Messages name the file and the
field, because a user debugging a config.json needs to know exactly where to look.
"""
from __future__ import annotations


class KvplanError(Exception):
    """Base class of every error kvplan raises deliberately."""


class UsageError(KvplanError):
    """The user's input cannot be planned: a bad flag, an unknown model, a broken file."""


def file_not_found(path: object) -> UsageError:
    """The one error for an input file that does not exist, in every command and for every flag
    that names a file: ``file not found: PATH`` (the CLI exits 2)."""
    return UsageError(f"file not found: {path}")


class PlanDoesNotStart(KvplanError):
    """The configuration would not start (vLLM's own error text): nothing to simulate or load-test.
    Not a usage error: the flags are well formed, the deployment is not (exit code 1)."""


class UnknownModelError(UsageError):
    def __init__(self, name: str, suggestions: list[str]):
        self.name = name
        self.suggestions = suggestions
        hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(
            f"Unknown model {name!r}: not a config.json, a model folder, nor a model in kvplan's "
            f"catalog (see `kvplan models`).{hint}"
        )


class ConfigFieldError(UsageError):
    """A config.json lacks a field kvplan needs, or holds a value of the wrong kind."""

    def __init__(self, field: str, source: str, detail: str = "is missing"):
        self.field = field
        self.source = source
        super().__init__(f"{source}: field {field!r} {detail}")


class UnknownGpuError(UsageError):
    def __init__(self, name: str, suggestions: list[str]):
        hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(
            f"Unknown GPU {name!r}.{hint} Or give the memory directly: --gpu-memory 24GiB"
        )
