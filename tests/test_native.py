"""The native build (scripts/build_native.py: mypyc compiles the simulator's hot modules) gives the
interpreted build's results byte for byte, is used only while it matches its sources, and its
percentile selection returns the sorted order statistics.

``make test`` sets KVPLAN_REQUIRE_NATIVE=1: there the build must exist and be in use (a failed
build fails here instead of silently testing the interpreted code twice)."""
from __future__ import annotations

import hashlib
import importlib.machinery
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvplan._native as native
from kvplan.quantiles import percentile, percentiles, values_at_ranks, weighted_percentiles, weighted_values_at_ranks

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = os.environ.get("KVPLAN_REQUIRE_NATIVE") == "1"


def _need_native() -> None:
    if native.STATE != "compiled":
        if REQUIRED:
            pytest.fail(f"KVPLAN_REQUIRE_NATIVE=1 but the native build is not in use: {native.STATE} "
                        "(make native; its log: .venv/native-build.log)")
        pytest.skip(f"native build not in use: {native.STATE}")


def test_the_native_build_is_in_use():
    _need_native()
    import kvplan.quantiles
    import kvplan.sim.engine

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    assert kvplan.sim.engine.__file__.endswith(suffix) and kvplan.quantiles.COMPILED


# (scenario, simulate flags): the saturated seed scenario with per-request rows, a run past the
# selection threshold (>= 20,000 latencies and ITL pairs), a closed loop, data parallelism with
# two API servers, preemption on a small GPU, and a hybrid sliding-window model
SCENARIOS = {
    "saturated": ["--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4", "--rate", "50",
                  "--num-requests", "2000", "--input-len", "uniform:800,1200", "--output-len", "512", "--per-request"],
    "large": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--rate", "200", "--num-requests",
              "30000", "--input-len", "uniform:100,2000", "--output-len", "uniform:10,400",
              "--slo", "ttft_p99=1s"],
    "closed_loop": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--max-concurrency", "64",
                    "--num-requests", "1200", "--random-input-len", "1500", "--random-output-len", "400",
                    "--random-range-ratio", "0.9"],
    "dp_api": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--data-parallel-size", "3",
               "--api-server-count", "2", "--rate", "60", "--num-requests", "2500", "--input-len", "1000",
               "--output-len", "300"],
    "preemption": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4", "--max-model-len", "16384",
                   "--gpu-memory-utilization", "0.95", "--rate", "6", "--num-requests", "600",
                   "--input-len", "uniform:2000,12000", "--output-len", "uniform:200,3000"],
    "sliding_window": ["--model", "google/gemma-3-27b-it", "--gpu", "H100", "--max-model-len", "16384", "--rate",
                       "6", "--num-requests", "500", "--random-input-len", "5000", "--random-range-ratio", "0.8",
                       "--random-output-len", "300", "--random-prefix-len", "500"],
}


def _simulate(flags: list, native_env: str) -> bytes:
    env = dict(os.environ, KVPLAN_OFFLINE="1", KVPLAN_NATIVE=native_env)
    p = subprocess.run([sys.executable, "-m", "kvplan.cli.main", "simulate", "--format", "json", *flags],
                       capture_output=True, env=env, timeout=600)
    assert p.returncode in (0, 1), p.stderr.decode()[-2000:]  # 1: an SLO missed
    return p.stdout


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_both_builds_give_the_same_result_byte_for_byte(name):
    _need_native()
    compiled, interpreted = _simulate(SCENARIOS[name], "1"), _simulate(SCENARIOS[name], "0")
    assert json.loads(compiled)["requests"]["completed"] > 0
    if compiled != interpreted:
        a, b = json.loads(compiled), json.loads(interpreted)
        diffs = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        pytest.fail(f"{name}: the builds differ in {diffs}")


# -- the guard --------------------------------------------------------------------------------
def _fake_build(tmp_path: Path, *, built_for_this_python: bool = True) -> tuple[Path, Path]:
    src = tmp_path / "src"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0] if built_for_this_python else ".cpython-299-x.so"
    digests = {}
    for name in native.MODULES:
        source = src / (name.replace(".", "/") + ".py")
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f"# {name}\n")
        source.with_name(source.stem + suffix).write_bytes(b"")
        digests[name] = hashlib.sha256(source.read_bytes()).hexdigest()
    stamp = src / "kvplan" / "_native.stamp"
    stamp.write_text(json.dumps({"modules": digests}))
    return stamp, src


def test_a_build_that_matches_its_sources_is_used(tmp_path):
    stamp, src = _fake_build(tmp_path)
    assert native.decide(stamp, src, {}) == ("compiled", {})


def test_an_edited_source_sends_every_module_to_its_py(tmp_path):
    stamp, src = _fake_build(tmp_path)
    edited = src / "kvplan" / "sim" / "engine.py"
    edited.write_text(edited.read_text() + "x = 1\n")
    state, from_source = native.decide(stamp, src, {})
    assert state == "interpreted (engine.py changed since the build: make native)"
    # all or none: the compiled modules expect each other's compiled classes
    assert set(from_source) == set(native.MODULES)
    assert from_source["kvplan.sim.kvpool"] == src / "kvplan" / "sim" / "kvpool.py"


def test_a_build_for_another_python_or_switched_off_or_unreadable_is_not_used(tmp_path):
    stamp, src = _fake_build(tmp_path, built_for_this_python=False)
    state, from_source = native.decide(stamp, src, {})
    assert state.startswith("interpreted (no quantiles") and "built for another Python" in state
    assert set(from_source) == set(native.MODULES)
    stamp, src = _fake_build(tmp_path / "b")
    assert native.decide(stamp, src, {"KVPLAN_NATIVE": "0"})[0] == "interpreted (KVPLAN_NATIVE=0)"
    stamp.write_text("{not json")
    assert native.decide(stamp, src, {})[0] == "interpreted (_native.stamp unreadable: make native)"
    stamp.unlink()
    assert native.decide(stamp, src, {}) == ("interpreted (not built: make native)", {})


def test_kvplan_native_0_loads_every_module_from_its_source():
    code = ("import kvplan._native as n, kvplan.sim.engine as e, kvplan.quantiles as q; "
            "print(n.STATE, e.__file__.endswith('.py'), q.COMPILED)")
    env = dict(os.environ, KVPLAN_NATIVE="0", KVPLAN_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    if "not built" in out.stdout:
        pytest.skip("no native build to switch off")
    assert out.stdout.split() == ["interpreted", "(KVPLAN_NATIVE=0)", "True", "False"], out.stderr


# -- the selection ----------------------------------------------------------------------------
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, width=64)
# clustered samples (most values within a tiny part of the range) make the bins uneven
samples = st.one_of(st.lists(finite, min_size=1, max_size=300),
                    st.lists(st.sampled_from([0.25, 0.5, 0.5000001, 3.0, -0.0, 0.0]), min_size=1, max_size=300))


def _same(xs: list) -> list:
    return [repr(x) for x in xs]  # (0.0 and -0.0 compare equal; the JSON tells them apart)


@settings(max_examples=200)
@given(values=samples, data=st.data())
def test_values_at_ranks_are_the_sorted_order_statistics(values, data):
    ranks = data.draw(st.lists(st.integers(0, len(values) - 1), min_size=1, max_size=8))
    expected = sorted(values)
    assert _same(values_at_ranks(list(values), ranks)) == _same([expected[k] for k in ranks])


def test_equal_values_keep_their_order_as_sorting_does():
    values = [0.0, -0.0, 0.0, -0.0]
    assert _same(values_at_ranks(values, [0, 1, 2, 3])) == _same(sorted(values))
    pairs = [(0.0, 2), (-0.0, 1), (5.0, 1), (-0.0, 3)]
    expanded = [v for v, c in sorted(pairs, key=lambda p: p[0]) for _ in range(c)]
    assert _same(weighted_values_at_ranks(pairs, list(range(7)))) == _same(expanded)


@settings(max_examples=200)
@given(pairs=st.lists(st.tuples(finite, st.integers(1, 50)), min_size=1, max_size=200), data=st.data())
def test_weighted_values_at_ranks_are_the_expanded_order_statistics(pairs, data):
    # expanded in the order LatencyStats.of_weighted sorts the pairs (by value, stable)
    expanded = [v for v, c in sorted(pairs, key=lambda p: p[0]) for _ in range(c)]
    ranks = data.draw(st.lists(st.integers(0, len(expanded) - 1), min_size=1, max_size=8))
    assert _same(weighted_values_at_ranks(list(pairs), ranks)) == _same([expanded[k] for k in ranks])
    n, points, highest, total = weighted_percentiles(list(pairs), [50.0, 99.9])
    assert (n, highest, total) == (len(expanded), expanded[-1], math.fsum(v * c for v, c in pairs))
    assert points == [percentile(expanded, 50.0), percentile(expanded, 99.9)]


def test_a_span_too_small_to_divide_falls_back_to_sorting():
    # (hypothesis found these: 8 bins over a subnormal span overflow the bin scale)
    for tiny in (2.225073858507e-311, -2.225073858507e-311):
        pairs = [(0.0, 1), (tiny, 1)]
        assert weighted_values_at_ranks(pairs, [0, 1]) == sorted([0.0, tiny])
        assert values_at_ranks([0.0, tiny, 0.0], [0, 2]) == [sorted([0.0, tiny, 0.0])[k] for k in (0, 2)]


def test_a_large_concentrated_sample_selects_the_sorted_percentiles():
    # 60,000 values, nine in ten within a millionth of the range (the bins holding the wanted ranks
    # are split again), past the size from which the native build selects instead of sorting
    values = [1.0 + (i % 997) * 1e-9 for i in range(54_000)] + [float(i) for i in range(6_000)]
    ps = [50.0, 90.0, 95.0, 99.0, 99.9]
    expected = sorted(values)
    assert percentiles(values, ps) == [percentile(expected, p) for p in ps]
    assert values_at_ranks(values, [0, 30_000, 59_999]) == [expected[0], expected[30_000], expected[59_999]]
