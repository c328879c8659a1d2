"""Verdicts of real load runs on a busy machine.

`kvplan bench` flags a run as client-bound when the load generator fell behind its schedule
(median lag over 10 ms, p99 over 50 ms, or under 99% of the scheduled rate): the latencies then
describe the client, and the run fails its ``not_client_bound`` gate (exit 1; preflight's
``load_run_complete`` check fails, NO-GO). bench is right to say so — and on a 2-core machine
shared with other jobs one stalled event loop is enough. A test that is not about the load
generator asserts everything else exactly and accepts a client-bound run only when:

- ``not_client_bound`` is the only gate that failed (the verdict follows from it), and
- the load generator's p99 lag stayed within CLIENT_LAG_TOLERANCE_S (beyond that the run says
  nothing about the server either), and

it emits a warning naming the lag, so the run's summary shows the machine was overloaded. Every
failure message says whether the client fell behind.
"""
from __future__ import annotations

import warnings
from typing import Optional

#: How far behind its schedule (p99 of the send lag) the load generator may fall on a loaded host
#: before a test stops trusting the run at all: one second, against requests 50 ms to 1 s apart.
CLIENT_LAG_TOLERANCE_S = 1.0


#: How far above the server's median bucket the client's median latency may lie: the client's share
#: (HTTP, chat template, tokenisation, delivery of the stream) runs in the API server's process,
#: which a 2-core host's CPU engine threads starve (a CI run: 225 ms over the server's TTFT with the
#: client on schedule). One second still catches a unit or a quantile misread (a factor of 1000, a
#: p99 for a p50).
CLIENT_SERVER_GAP_TOLERANCE_S = 1.0


class ClientBoundRun(UserWarning):
    """A load run fell behind its schedule; the test checked the rest and tolerated it."""


def client_note(d: dict) -> str:
    """What a failure message says about the load generator."""
    if not d.get("client_bound"):
        return "the load generator kept its schedule"
    lag = d.get("schedule_lag_s") or {}
    return (f"the load generator fell behind its schedule ({'; '.join(d.get('client_bound_reasons') or [])}; "
            f"lag p50 {lag.get('p50')} s, p99 {lag.get('p99')} s): the machine is overloaded")


def tolerate_client_bound(d: dict, context: str = "") -> bool:
    """True when the run kept its schedule. When it did not: assert the lag is within the tolerance,
    warn, and return False (the caller expects the client-bound verdict instead of a pass)."""
    if not d.get("client_bound"):
        return True
    p99 = (d.get("schedule_lag_s") or {}).get("p99")
    assert p99 is not None and p99 <= CLIENT_LAG_TOLERANCE_S, (
        f"{context}: {client_note(d)}; over the {CLIENT_LAG_TOLERANCE_S} s a test tolerates")
    warnings.warn(ClientBoundRun(f"{context}: {client_note(d)}; checked everything else"), stacklevel=2)
    return False


def failed_gates(d: dict) -> list[str]:
    return sorted(c["name"] for c in d["verdict"]["checks"] if not c["passed"])


def assert_bench_passed(returncode: Optional[int], d: dict, stderr: str = "") -> None:
    """A `kvplan bench` run whose gates must all pass: exit 0 and no failed gate — or, when the load
    generator fell behind (within the tolerance), exit 1 with ``not_client_bound`` the only failure."""
    failed = failed_gates(d)
    if tolerate_client_bound(d, "kvplan bench"):
        assert failed == [] and returncode in (0, None), (failed, client_note(d), stderr[-2000:])
    else:
        assert failed == ["not_client_bound"], (failed, client_note(d), stderr[-2000:])
        assert returncode in (1, None), (returncode, client_note(d), stderr[-2000:])


#: How late the sends of a host-contended run may be (p99) before a test stops reading it: the
#: client was idle and latencies are measured from each actual send, so lateness alone does not
#: falsify them; a run late by more than a 10 s test run's length says nothing. (A fresh-clone run
#: beside a one-core busy loop saw a 2.87 s p99 with the client at a few % of a core.)
HOST_CONTENTION_LAG_TOLERANCE_S = 10.0


class HostContendedRun(UserWarning):
    """A load run's sends were late because other processes had the CPU (bench's own diagnosis:
    the client was idle); the test checked what still holds and tolerated the rest."""


def tolerate_host_contention(d: dict, context: str = "") -> bool:
    """True when the run kept its schedule. When bench diagnosed host contention instead (sends
    late while the client's own CPU share stayed under its limit: the machine's other jobs had
    the cores, the client was not the bottleneck), assert that diagnosis is complete and the lag
    within HOST_CONTENTION_LAG_TOLERANCE_S, warn, and return False: the caller then skips only the assertions that
    need an unloaded host (a median lag within bench's limit, client latencies within one histogram bucket of
    the server's) and keeps the others."""
    client = d.get("client") or {}
    if not client.get("host_contention"):
        return True
    lag = d.get("schedule_lag_s") or {}
    reasons = client.get("host_contention_reasons") or []
    assert reasons and "host contention, not the load generator" in reasons[0], (context, client)
    assert not d.get("client_bound"), (context, client_note(d))
    assert lag.get("p99") is not None and lag["p99"] <= HOST_CONTENTION_LAG_TOLERANCE_S, (
        f"{context}: host contention with a p99 send lag of {lag.get('p99')} s, over the "
        f"{HOST_CONTENTION_LAG_TOLERANCE_S} s a test tolerates")
    warnings.warn(HostContendedRun(f"{context}: {reasons[0]}"), stacklevel=2)
    return False
