"""The API server in front of the engine (kvplan.sim.frontend): one asyncio loop per process,
work in the order it became ready, output batches merged while the consumer lags."""
from __future__ import annotations

import pytest

from kvplan.sim.engine import DONE
from kvplan.sim.frontend import FrontEnd
from kvplan.traffic.trace import SimRequest
from sim_helpers import run


def _front(count: int = 1, request_s: float = 0.01, chunk_s: float = 0.0, token_s: float = 0.0) -> FrontEnd:
    return FrontEnd(count=count, request_s=request_s, prompt_token_s=token_s, chunk_s=chunk_s)


def test_a_burst_reaches_the_engine_only_after_every_request_was_parsed():
    """All 50 first turns are ready at t = 0, ahead of any second turn: the engine sees request 0
    after 50 x 10 ms, and the first tokens reach the clients together, after that."""
    reqs = [SimRequest(0.0, 100, 3) for _ in range(50)]
    e = run(reqs, front_end=_front())
    assert all(r.status == DONE for r in e.reqs)
    first_sched = min(r.t_sched for r in e.reqs)
    assert first_sched >= 50 * 0.01 - 1e-9
    ttft = sorted(r.t_first - r.arrival for r in e.reqs)
    assert ttft[0] >= 0.5  # nobody's first token before the backlog is through
    # without a front end the first requests are served at once
    bare = run(reqs)
    assert min(r.t_first for r in bare.reqs) < 0.05


def test_spread_sends_are_served_as_they_come_and_cost_their_ingest_once():
    reqs = [SimRequest(i * 0.1, 100, 3) for i in range(10)]
    e = run(reqs, front_end=_front(request_s=0.004, token_s=1e-5))
    for r in e.reqs:  # an idle API server: ingest 4 ms + 100 tokens x 10 us, then the engine
        assert r.t_sched == pytest.approx(r.arrival + 0.005, abs=0.0101)
        assert r.t_first - r.arrival >= 0.005


def test_two_api_servers_halve_a_bursts_backlog():
    reqs = [SimRequest(0.0, 100, 3) for _ in range(40)]
    one = run(reqs, front_end=_front(count=1))
    two = run(reqs, front_end=_front(count=2))
    assert min(r.t_sched for r in one.reqs) == pytest.approx(0.4, abs=0.011)
    assert min(r.t_sched for r in two.reqs) == pytest.approx(0.2, abs=0.011)


def test_a_lagging_api_server_merges_steps_into_one_output_batch():
    """64 streams at 1 ms each make a 64 ms output batch per 10 ms step: the loop cannot keep up,
    steps whose batch is still queued merge into it, and each batch delivers several steps' tokens:
    the last tokens arrive later than the engine produced them, but not 6x later."""
    reqs = [SimRequest(0.0, 16, 40) for _ in range(64)]
    fe = _front(request_s=0.0, chunk_s=0.001)
    e = run(reqs, front_end=fe)
    bare = run(reqs)
    engine_end = max(r.t_end for r in bare.reqs)
    client_end = max(r.t_end for r in e.reqs)
    assert client_end > engine_end + 0.05  # the last batch went out after the engine finished
    assert client_end < engine_end + 2 * 0.064 + 0.02  # merged: not one 64 ms batch per step
    # the tokens of a stream come in clumps: fewer deliveries than steps, so TPOT is from the batches
    assert e.steps == bare.steps


def test_outputs_without_other_work_are_placed_at_once_and_merged_while_queued():
    fe = _front(request_s=0.0, chunk_s=0.001)
    got = {}
    fe.on_first = lambda r, t: got.setdefault("first", t)
    fe.on_last = lambda r, t: got.setdefault("last", t)

    class R:
        i = 0

    fe.outputs(1.0, 10, [R()], [])  # idle: 10 ms from t = 1
    assert got["first"] == pytest.approx(1.01)
    fe.outputs(1.005, 10, [], [R()])  # the first batch has started: a new one behind it
    assert got["last"] == pytest.approx(1.02)
    assert fe.servers[0].busy == pytest.approx(1.02)
