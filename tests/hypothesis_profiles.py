"""The hypothesis profiles of the suite and the example budget of every property test.

- ``ci``: derandomized (the examples are a function of the test's source, so a commit that did not
  touch a test cannot turn it red), the budget each test states, no deadline (a loaded machine is
  not a bug), no example database, failures printed with their ``@reproduce_failure`` blob.
  Selected by ``CI=true`` (any non-empty ``CI`` but "false"/"0") and by ``make test``.
- ``dev`` (the default for a plain ``pytest``): a fresh random seed each run and the example
  database under .hypothesis/, so development runs keep exploring and replay what they found.
- ``explore``: ``dev`` with every budget multiplied by $HYPOTHESIS_EXPLORE_FACTOR (default 10):
  ``make test-explore``.

``HYPOTHESIS_PROFILE`` names a profile explicitly. A counterexample any run finds is pinned in its
test with ``@example`` so that every profile replays it.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, Verbosity, settings

EXPLORE_FACTOR = 10


def _explore_factor() -> int:
    return max(1, int(os.environ.get("HYPOTHESIS_EXPLORE_FACTOR", EXPLORE_FACTOR)))


def _factor() -> int:
    return _explore_factor() if active() == "explore" else 1


def active() -> str:
    """The profile this run uses: $HYPOTHESIS_PROFILE, else ``ci`` under CI, else ``dev``."""
    named = os.environ.get("HYPOTHESIS_PROFILE", "").strip()
    if named:
        return named
    ci = os.environ.get("CI", "").strip().lower()
    return "ci" if ci not in ("", "0", "false", "no") else "dev"


def examples(n: int) -> int:
    """A property test's example budget: ``n`` under ``ci`` and ``dev``, ``n`` × the factor under ``explore``."""
    return n * _factor()


def register() -> str:
    common = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("ci", derandomize=True, database=None, **common)
    settings.register_profile("dev", **common)
    # (a test without its own budget gets hypothesis' default 100, times the factor)
    settings.register_profile("explore", max_examples=100 * _explore_factor(), verbosity=Verbosity.normal, **common)
    name = active()
    if name not in ("ci", "dev", "explore"):
        raise RuntimeError(f"HYPOTHESIS_PROFILE={name!r}: the suite's profiles are ci, dev and explore")
    settings.load_profile(name)
    return name
