"""Data-parallel replicas simulated behind a load balancer (kvplan.sim.fleet): a hand-computed
two-replica case per balancer, a fleet of one equal to the single engine, and an engine cut at any
horizons equal to the uncut run."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hypothesis_profiles import examples
from kvplan.sim import simulate
from kvplan.sim.balancer import rule_for, vllm_rule
from kvplan.sim.engine import Engine
from kvplan.sim.fleet import FleetView, run_fleet
from kvplan.traffic.trace import SimRequest, Trace
from sim_helpers import FLAT, plan_request, trace


def _maker(**kw):
    args = dict(num_gpu_blocks=1000, block_size=16, max_num_seqs=1, max_num_batched_tokens=2048,
                max_model_len=4096, profile=FLAT, async_scheduling=False)
    args.update(kw)

    def make(requests, max_concurrency=None):
        return Engine(requests=requests, max_concurrency=max_concurrency, **args)
    return make


# Two replicas, one sequence each, 10 ms per step: r0 (10 output tokens) holds a replica 0-100 ms,
# r1 (2 tokens) holds the other 1-21 ms, r2 (2 tokens) comes at 25 ms.
HAND = Trace((SimRequest(0.0, 10, 10), SimRequest(0.001, 10, 2), SimRequest(0.025, 10, 2)), "hand")


def _ttft(engines):
    reqs = sorted((r for e in engines for r in e.reqs), key=lambda r: r.i)
    return [round(r.t_first - r.arrival, 6) for r in reqs], [j for r in reqs for j, e in enumerate(engines)
                                                             if r in e.reqs]


@pytest.mark.parametrize("balancer,version,owners,ttft_r2", [
    # round-robin: r2 to replica 0 behind r0, first token after r0 ends (100 ms) + one step
    ("round_robin", None, [0, 1, 0], 0.085),
    # least outstanding: at 25 ms replica 1 is free (r1 ended at 21 ms): one step
    ("least_outstanding", None, [0, 1, 1], 0.01),
    # vLLM 0.33 (two API servers): server 0 sent r0 to engine 0 (waiting +2 in its view), server 1 sent r1 to
    # engine 1; r2 (server 0): engine 0 scores max(1 in flight, 2) = 2, engine 1 max(0, 0) = 0
    ("vllm", (0, 33), [0, 1, 1], 0.01),
    # vLLM 0.19, dense: counts never published; server 0 turns 0 -> 1, server 1 starts at 1
    ("vllm", (0, 19), [0, 1, 1], 0.01),
    # vLLM 0.14: one API server turning through the engines blind to their load
    ("vllm", (0, 14), [0, 1, 0], 0.085),
])
def test_two_replicas_by_hand(balancer, version, owners, ttft_r2):
    rule = rule_for(balancer, replicas=2, vllm_version=version)
    engines = run_fleet(_maker(), HAND, rule, 2, FLAT)
    ttft, owner = _ttft(engines)
    assert owner == owners
    assert ttft[0] == pytest.approx(0.01) and ttft[1] == pytest.approx(0.01)
    assert ttft[2] == pytest.approx(ttft_r2)


@pytest.mark.parametrize("balancer", ["round_robin", "least_outstanding", "vllm"])
def test_a_fleet_of_one_is_the_engine(balancer):
    tr = trace(rate=3.0, n=120)
    make = _maker(max_num_seqs=256)
    alone = make(tr.requests).run()
    fleet = FleetView(run_fleet(make, tr, rule_for(balancer, replicas=1), 1, FLAT))
    a = [(r.t_first, r.t_end, r.num_output_tokens) for r in alone.reqs]
    b = [(r.t_first, r.t_end, r.num_output_tokens) for r in fleet.reqs]
    assert a == b
    assert fleet.steps == alone.steps and fleet.timeline == alone.timeline


reqs_strategy = st.lists(st.tuples(st.floats(0, 0.5), st.integers(1, 300), st.integers(1, 40)), min_size=1,
                         max_size=40)


@settings(max_examples=examples(40))
@given(reqs_strategy, st.lists(st.floats(0.0, 0.6), max_size=12), st.booleans(), st.integers(1, 8))
@example([(0.0, 100, 5), (0.0, 100, 5)], [0.0, 0.0, 0.005], True, 2)
def test_cutting_a_run_at_any_horizons_changes_nothing(raw, cuts, async_sched, seqs):
    reqs = sorted((SimRequest(round(a, 4), p, o) for a, p, o in raw), key=lambda r: r.arrival_s)
    make = _maker(async_scheduling=async_sched, max_num_seqs=seqs, num_gpu_blocks=60)
    whole = make(reqs).run()
    cut = make(())
    horizons = sorted(set(round(c, 4) for c in cuts) | {r.arrival_s for r in reqs})
    k = 0
    for h in horizons:
        cut.advance(h)  # every step starting before h; then the arrivals at h come in
        while k < len(reqs) and reqs[k].arrival_s <= h:
            cut.add_request(reqs[k], index=k)
            k += 1
    cut.advance(float("inf"))
    assert [(r.t_sched, r.t_first, r.t_end, r.preempted) for r in cut.reqs] == \
        [(r.t_sched, r.t_first, r.t_end, r.preempted) for r in whole.reqs]
    assert cut.steps == whole.steps and cut.timeline == whole.timeline


def test_more_replicas_serve_the_scenario_faster():
    """-dp 17, 19, 21 at 50 req/s: every replica simulated; the latency moves the right way."""
    tr = trace(rate=50.0, n=1500)
    p99 = {}
    for dp in (17, 19, 21):
        res = simulate(dataclasses.replace(plan_request(), data_parallel_size=dp), tr, load_balancer="round_robin")
        assert res.fleet["replicas_simulated"] == dp
        assert sum(r["requests"] for r in res.fleet["per_replica"]) == 1500
        p99[dp] = res.latency_s["e2e"]["p99"]
    assert p99[17] > p99[19] > p99[21]


def test_dynamic_rule_states_what_it_read():
    rule = vllm_rule((0, 33), replicas=4)
    res = simulate(dataclasses.replace(plan_request(), data_parallel_size=4, vllm_version="0.33"),
                   trace(rate=8.0, n=200), load_balancer="vllm")
    assert res.fleet["load_balancer"]["rule"] == rule.kind == "inflight_floor"
    assert "together" in res.fleet["mode"]
    assert any("load balancer" in n for n in res.notes)
