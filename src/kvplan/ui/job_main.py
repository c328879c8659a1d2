"""What a page job runs (:mod:`kvplan.ui.jobs`), imported once by the jobs' forkserver.

Importing this module loads what the page's commands use (the flag tables and the library
behind them) and reads the catalogs, so each forked job process starts with them in memory. It must
not raise: the forkserver would die with it.
"""
from __future__ import annotations


def read_config(path: str, name: str) -> dict:
    """An uploaded config.json read with the CLI's validators: errors name the field and the file
    by the name the page gave it, never the server's path."""
    from ..errors import UsageError
    from ..models import load_model

    try:
        spec = load_model(path)
    except UsageError as exc:
        raise UsageError(str(exc).replace(path, name)) from None
    return {"model_id": spec.name, "summary": spec.describe()}


def _warm() -> None:
    """Load and fill once what every job process would otherwise build again: the flag tables'
    parsers, the catalogs, the planner's and the simulator's tables."""
    try:
        from ..hardware import catalog as gpus
        from ..models import catalog
        from ..workload import run as _lengths  # noqa: F401 - loaded for the jobs
        from . import api

        catalog.entries()
        gpus()
        api.plan_json(["--model", "llama3-8b", "--gpu", "H100"])
        api.simulate_json(["--model", "llama3-8b", "--gpu", "H100", "--request-rate", "10", "--num-prompts", "20",
                           "--random-input-len", "128", "--random-output-len", "16"])
    except Exception:  # noqa: BLE001, S110 - a job imports what failed here and reports it itself
        pass


_warm()
