"""How far to trust the GPU clock: the median |error| of the step-time model on the development set,
measured by ``benchmarks/gpu_fidelity.py`` (leave-one-source-out, each case typed as a user would type
it), per GPU, per traffic regime and per source group. Every simulate/tune result quotes the rows of
its GPU and its regime.

The numbers are measurements, so they live in a versioned data file beside this module
(``validation.json``, format :data:`FORMAT`) that says what produced it; ``gpu_fidelity.py
--write-validation`` rewrites that file and nothing else. It is read on first use only: ``kvplan plan``
never pays for it."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Mapping

FORMAT = "kvplan-clock-validation/1"
DATA_FILE = Path(__file__).with_name("validation.json")


@lru_cache(maxsize=1)
def _load() -> dict:
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{DATA_FILE.name}: format {data.get('format')!r}, expected {FORMAT!r}")
    return data


def by_gpu() -> Mapping[str, dict]:
    """GPU name -> {cases, output_throughput, ttft, tpot, ...}: its cases' median |relative error|.
    Shared by every caller: copy a row before changing it."""
    return _load()["by_gpu"]


def by_regime() -> Mapping[str, dict]:
    """Traffic regime (``opmodel.traffic_regimes``) -> the same; empty where none was measured."""
    return _load().get("by_regime", {})


def by_source() -> Mapping[str, dict]:
    """Source group of the development set -> the same; empty where none was measured."""
    return _load().get("by_source", {})


def produced_by() -> Mapping[str, str]:
    """The command, date and development-set file that produced the numbers."""
    return _load()["produced_by"]
