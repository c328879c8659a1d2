"""The clock's validation numbers (what every simulate result quotes as "how far to trust this clock")
are a versioned data file shipped in the package, written by benchmarks/gpu_fidelity.py and read by
kvplan.sim.validation."""
from __future__ import annotations

import json
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import kvplan
from kvplan.sim import opmodel, validation

REPO = Path(__file__).resolve().parents[1]
SOURCE_ROOT = Path(kvplan.__file__).parent


def test_the_shipped_file_says_what_produced_it_and_names_no_machine_path():
    data = json.loads(validation.DATA_FILE.read_text(encoding="utf-8"))
    assert data["format"] == validation.FORMAT
    made = validation.produced_by()
    assert made["command"].startswith("python benchmarks/gpu_fidelity.py") and "--write-validation" in made["command"]
    assert made["date"] and made["dev_set"] == "dev_cases.json"
    assert not any(str(v).startswith("/") or "/work/" in str(v) or "/tmp/" in str(v) for v in made.values())
    for gpu, row in validation.by_gpu().items():
        assert row["cases"] >= 1, gpu
        assert all(row[m] is None or 0 <= row[m] < 5 for m in ("output_throughput", "ttft", "tpot")), gpu


def test_every_data_file_in_the_package_is_shipped_as_package_data():
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"]
    unshipped = []
    for path in sorted(SOURCE_ROOT.rglob("*.json")):
        rel = path.relative_to(SOURCE_ROOT.parent)
        shipped = False
        for package, globs in package_data.items():
            package_dir = Path(*package.split("."))
            if rel.is_relative_to(package_dir):
                inner = rel.relative_to(package_dir).as_posix()
                shipped = shipped or any(fnmatch(inner, g) for g in globs)
        if not shipped:
            unshipped.append(str(rel))
    assert unshipped == []


def test_the_benchmark_writes_a_file_the_simulator_quotes(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_fidelity

    err = {"output_throughput": 0.05, "ttft": 0.2, "tpot": 0.04}
    fit = {"output_throughput": 0.03, "ttft": 0.1, "tpot": 0.02}
    entry = {"cases": 4, "loso_err": err, "user_err": fit}
    result = {"gpu": {"all": entry, "H100-SXM5-80GB": entry}, "regime": {"burst": entry}, "source": {"s1": entry},
              "complete": {"gpu": {"H100-SXM5-80GB": {"cases": 3, "loso_err": {**err, "ttft": 0.12}}}}}
    cases = tmp_path / "dev_cases.json"
    cases.write_text("[]", encoding="utf-8")
    written = gpu_fidelity.write_validation(result, cases, rounds=2, path=tmp_path / "validation.json")

    monkeypatch.setattr(validation, "DATA_FILE", written)
    validation._load.cache_clear()
    try:
        assert validation.produced_by()["command"] == "python benchmarks/gpu_fidelity.py --rounds 2 --write-validation"
        assert validation.produced_by()["dev_set"] == "dev_cases.json"
        assert str(tmp_path) not in written.read_text(encoding="utf-8")
        assert set(validation.by_gpu()) == {"H100-SXM5-80GB"}  # "all" is not a GPU
        quoted = opmodel.validation_error("H100-SXM5-80GB")
        assert quoted["measured"] and quoted["ttft"] == 0.2 and quoted["fit"]["ttft"] == 0.1
        assert quoted["complete"] == {"cases": 3, "output_throughput": 0.05, "ttft": 0.12, "tpot": 0.04}
        assert "complete" not in validation.by_regime()["burst"]  # no complete cases given for the regime
        from kvplan.report.sim_common import clock_line

        line = clock_line({"clock": {"kernel_tables": "H100-SXM5-80GB", "kernels_vllm_version": "0.19.0",
                                     "validation": quoted}})
        assert "median |error| on 4 published runs of this GPU: output throughput 5%, ttft 20%, tpot 4%" in line
        assert "(3 of them state their whole setup: output throughput 5%, ttft 12%, tpot 4%)" in line
        assert opmodel.validation_error("L4")["measured"] is False

        class BurstTrace:
            max_concurrency = None
            bench = {"request_rate": "inf"}
            requests = ()

        assert opmodel.regime_validation(BurstTrace())["burst"]["tpot"] == 0.04
    finally:
        validation._load.cache_clear()


def test_the_benchmark_sets_apart_cases_whose_user_view_omits_a_documented_setup():
    """gpu_fidelity's USER VIEW COMPLETENESS table: a case whose scenario view adds the source's pod
    layout or warm cache (or the curator's hardware flag) is grouped by what it adds, so the user
    view's error on the complete cases measures the clock alone."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_fidelity

    pods = {"notes": ["one GPU per pod: TP over the network (--gpus-per-node 1)", "KV memory as the start-up log printed it",
                      "documented warm prefix cache: the server served x just before (200 prompts of 1024 tokens, same seed)"]}
    flagged = {"notes": ["data_warning: the hardware behaves like H100-PCIE-80GB"]}
    plain = {"notes": ["KV memory as the start-up log printed it"]}
    assert gpu_fidelity.completeness(pods) == ["setup: one GPU per pod", "setup: warm prefix cache"]
    assert gpu_fidelity.completeness(flagged) == ["curator: hardware flag"]
    assert gpu_fidelity.completeness(plain) == [gpu_fidelity.USER_VIEW_COMPLETE]
