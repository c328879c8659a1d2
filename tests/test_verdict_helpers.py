"""The tolerance rules real-server tests apply to load runs on a busy machine (verdict_helpers)."""
from __future__ import annotations

import pytest

from verdict_helpers import (CLIENT_LAG_TOLERANCE_S, HOST_CONTENTION_LAG_TOLERANCE_S, ClientBoundRun, HostContendedRun,
                             tolerate_client_bound, tolerate_host_contention)

_REASON = ("host contention, not the load generator: median schedule lag 82.9 ms > 10 ms with the client at 4% "
           "of a core (limit 80%): other processes took the CPU; latencies are measured from each actual send")


def _run(contention: bool, p99: float, client_bound: bool = False) -> dict:
    return {"client_bound": client_bound, "client_bound_reasons": ["p99 schedule lag"] if client_bound else [],
            "schedule_lag_s": {"p50": 0.083, "p99": p99},
            "client": {"host_contention": contention, "host_contention_reasons": [_REASON] if contention else []}}


def test_an_unloaded_run_is_trusted_whole():
    assert tolerate_host_contention(_run(False, 0.002)) is True
    assert tolerate_client_bound(_run(False, 0.002)) is True


def test_host_contention_within_the_tolerance_is_tolerated_with_a_warning():
    with pytest.warns(HostContendedRun, match="host contention"):
        assert tolerate_host_contention(_run(True, 0.4), "ctx") is False
    with pytest.warns(HostContendedRun):  # the 2.87 s of a run beside a one-core busy loop
        assert tolerate_host_contention(_run(True, 2.87), "ctx") is False


def test_host_contention_beyond_the_tolerance_fails():
    with pytest.raises(AssertionError, match="over the"):
        tolerate_host_contention(_run(True, HOST_CONTENTION_LAG_TOLERANCE_S + 0.5))


def test_host_contention_without_bench_diagnosis_fails():
    d = _run(True, 0.4)
    d["client"]["host_contention_reasons"] = []
    with pytest.raises(AssertionError):
        tolerate_host_contention(d)


def test_client_bound_within_the_tolerance_is_tolerated_with_a_warning():
    with pytest.warns(ClientBoundRun):
        assert tolerate_client_bound(_run(False, 0.4, client_bound=True), "ctx") is False
    with pytest.raises(AssertionError):
        tolerate_client_bound(_run(False, CLIENT_LAG_TOLERANCE_S + 0.5, client_bound=True))
