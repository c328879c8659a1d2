"""Hypothesis fuzzing of the doctor's log reading: garbage, truncated real logs and interleaved
lines never crash it, and every evidence line points at a real line of the input."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from kvplan.ops.doctor import diagnose

FIX = Path(__file__).parent / "fixtures"
REAL = [p.read_text(errors="replace").splitlines() for p in
        sorted((FIX / "doctor_logs").glob("*.log")) + sorted((FIX / "vllm_logs").glob("*.log"))
        + sorted((FIX / "vllm_cpu").glob("*.log"))]
ALL_LINES = [ln for log in REAL for ln in log]


def _check(text: str) -> None:
    r = diagnose([("f.log", text)])
    lines = text.splitlines()
    for f in r.findings:
        f.to_dict()
        for e in f.evidence:
            assert 1 <= e.line <= len(lines)
    r.to_dict()


@settings(max_examples=examples(150), deadline=None)
@given(st.text(max_size=3000))
def test_random_text(text):
    _check(text)


@settings(max_examples=examples(100), deadline=None)
@given(st.sampled_from(range(len(REAL))), st.integers(0, 200), st.integers(0, 400))
def test_truncated_real_logs(i, start, cut):
    log = "\n".join(REAL[i][start:])
    _check(log[: max(0, len(log) - cut)])


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.sampled_from(ALL_LINES), max_size=60), st.lists(st.text(max_size=80), max_size=20),
       st.randoms(use_true_random=False))
def test_interleaved_lines(lines, noise, rnd):
    mixed = lines + noise
    rnd.shuffle(mixed)
    # chop some lines mid-way, as an interleaved multi-process log does
    mixed = [ln[: rnd.randint(0, len(ln))] if rnd.random() < 0.2 else ln for ln in mixed]
    _check("\n".join(mixed))


@settings(max_examples=examples(50), deadline=None)
@given(st.sampled_from(ALL_LINES), st.sampled_from(["\x1b[31m", "\x1b[0m", "\x1b[1;32m", "\x00", "\r", "\ufffd"]))
def test_control_characters(line, junk):
    _check(junk + line.replace(" ", junk, 3) + junk)
