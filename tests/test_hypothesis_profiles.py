"""The suite's hypothesis profiles (tests/hypothesis_profiles.py): which one a run gets, what the
CI profile fixes, and the explore budgets."""
from __future__ import annotations

import pytest
from hypothesis import settings

import hypothesis_profiles as hp


@pytest.mark.parametrize("env, profile", [
    ({}, "dev"), ({"CI": "true"}, "ci"), ({"CI": "1"}, "ci"), ({"CI": "false"}, "dev"), ({"CI": "0"}, "dev"),
    ({"CI": "true", "HYPOTHESIS_PROFILE": "explore"}, "explore"), ({"HYPOTHESIS_PROFILE": "ci"}, "ci"),
])
def test_profile_choice(monkeypatch, env, profile):
    for k in ("CI", "HYPOTHESIS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert hp.active() == profile


def test_ci_profile_is_deterministic_and_patient():
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None and ci.deadline is None and ci.print_blob


def test_explore_multiplies_every_budget(monkeypatch):
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "explore")
    monkeypatch.delenv("HYPOTHESIS_EXPLORE_FACTOR", raising=False)
    assert hp.examples(60) == 600
    monkeypatch.setenv("HYPOTHESIS_EXPLORE_FACTOR", "50")
    assert hp.examples(60) == 3000
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    assert hp.examples(60) == 60
