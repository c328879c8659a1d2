"""The load balancers in front of data-parallel replicas (kvplan.sim.balancer): each rule on a small
hand-computed case, and vLLM's internal balancer against its own loop as read in the wheels."""
from __future__ import annotations

import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hypothesis_profiles import examples
from kvplan.errors import UsageError
from kvplan.sim.balancer import (BALANCERS, assign_blind, assign_static, parse_balancer, router_for, rule_for,
                                 vllm_rule)


def test_names_and_aliases():
    assert parse_balancer(None) == "vllm"
    assert parse_balancer("round-robin") == "round_robin"
    assert parse_balancer("least_conn") == "least_outstanding"
    assert set(BALANCERS) == {"vllm", "round_robin", "random", "least_outstanding"}
    with pytest.raises(UsageError, match="--load-balancer must be one of"):
        parse_balancer("p2c")


def test_round_robin_by_hand():
    rule = rule_for("round_robin", replicas=3)
    assert rule.static
    assert assign_static(rule, 7, 3) == [0, 1, 2, 0, 1, 2, 0]


def test_random_is_seeded_and_uniform_enough():
    rule = rule_for("random", replicas=4, seed=7)
    a = assign_static(rule, 4000, 4)
    assert a == assign_static(rule, 4000, 4)  # deterministic for the seed
    assert a != assign_static(rule_for("random", replicas=4, seed=8), 4000, 4)
    counts = [a.count(j) for j in range(4)]
    assert all(900 < c < 1100 for c in counts), counts  # 1000 ± 3.5 sigma (sigma 27)


def test_least_outstanding_by_hand():
    r = router_for(rule_for("least_outstanding", replicas=3), 3)
    assert r.choose(0, [0, 0, 0]) == 0  # all tied: the first after "none yet"
    assert r.choose(1, [1, 0, 0]) == 1
    assert r.choose(2, [1, 1, 0]) == 2
    assert r.choose(3, [1, 1, 1]) == 0  # tied again: in turn after the last choice (2)
    assert r.choose(4, [5, 2, 2]) == 1  # ties start after replica 0
    assert r.choose(5, [5, 2, 2]) == 2


# ---- vLLM's internal balancer, per version --------------------------------------------------------

@pytest.mark.parametrize("version,moe,kind,clients,rotate", [
    ((0, 8, 5), False, "in_flight", 1, False),
    ((0, 9, 2), False, "snapshot", 1, False),
    ((0, 10, 1), False, "snapshot", 1, False),
    ((0, 13, 0), False, "snapshot", 1, False),
    ((0, 14, 0), False, "blind", 1, False),  # dense ranks independent from 0.14, stats unpublished
    ((0, 15, 1), False, "blind", 4, False),  # api_server_count defaults to the DP size from 0.15
    ((0, 19, 0), False, "blind", 4, False),
    ((0, 19, 0), True, "snapshot", 4, False),  # MoE keeps DPEngineCoreProc, which publishes
    ((0, 24, 0), False, "blind", 4, False),
    ((0, 26, 0), False, "blind", 4, True),  # the scan's start rotates (read in 0.26.0; not in 0.24.0)
    ((0, 27, 0), False, "inflight_floor", 4, True),  # vllm#49204 (read in 0.27.0-0.29.0, 0.32.0, 0.33.0)
    ((0, 26, 0), True, "snapshot", 4, True),
    ((0, 33), False, "inflight_floor", 4, True),
])
def test_vllm_rule_per_version(version, moe, kind, clients, rotate):
    rule = vllm_rule(version, replicas=4, moe=moe)
    assert (rule.kind, rule.clients, rule.rotate) == (kind, clients, rotate)
    assert rule.balancer == "vllm" and "core_client.py" in rule.source


def test_vllm_0_8_fewest_in_flight_lowest_rank():
    r = router_for(vllm_rule((0, 8), replicas=3), 3)
    assert r.choose(0, [2, 1, 1]) == 1
    assert r.choose(1, [0, 0, 0]) == 0


def test_vllm_0_9_lexicographic_snapshot_by_hand():
    r = router_for(vllm_rule((0, 9, 2), replicas=3), 3)
    r.publish([(0, 3, 0.1), (0, 2, 0.1), (1, 0, 0.1)])
    assert r.choose(0, [0, 0, 0]) == 1  # [0,2] < [0,3] < [1,0]
    # local increment: waiting 0 -> running + 1: [0,3]; the tie with engine 0 goes to engine 0 (scan order)
    assert r.choose(1, [0, 0, 0]) == 0
    assert r.choose(2, [0, 0, 0]) == 1


def test_vllm_blind_rule_turns_and_restarts_every_five_seconds():
    rule = vllm_rule((0, 14), replicas=3)  # one API server
    arrivals = [0.0, 0.1, 0.2, 0.3, 4.9, 5.0, 5.1]
    # zeros + local increments: 0, 1, 2, then all equal again -> 0, 1; the 5 s publish of zeros restarts at 0
    assert assign_blind(rule, arrivals, 3) == [0, 1, 2, 0, 1, 0, 1]
    rule2 = vllm_rule((0, 19), replicas=2)  # two API servers, requests to them in turn
    # server 0 starts at engine 0, server 1 at engine 1; each then turns through the others
    assert assign_blind(rule2, [0.0, 0.1, 0.2, 0.3], 2) == [0, 1, 1, 0]


# vLLM's own loops, transcribed from the wheels (Apache-2.0): DPLBAsyncMPClient.get_core_engine_for_request
def _vllm_0_19_choose(lb_engines, eng_start_index, client_count):
    current_counts = lb_engines
    num_engines = len(current_counts)
    min_score = sys.maxsize
    eng_index = 0
    for i in range(num_engines):
        idx = (eng_start_index + i) % num_engines
        waiting, running = current_counts[idx]
        score = waiting * 4 + running
        if score < min_score:
            min_score = score
            eng_index = idx
    current_counts[eng_index][0] += client_count
    return eng_index


def _vllm_0_33_choose(lb_engines, engine_inflight, state, client_count):
    current_counts = lb_engines
    num_engines = len(current_counts)
    min_score = sys.maxsize
    eng_index = 0
    for i in range(num_engines):
        idx = (state["eng_start_index"] + i) % num_engines
        waiting, running, kv_cache_usage = current_counts[idx]
        inflight = engine_inflight[idx]
        score = max(client_count * inflight, waiting + running)
        if waiting:
            score += waiting * 6.0 * max(0.0, kv_cache_usage - 0.5)
        if score < min_score:
            min_score = score
            eng_index = idx
    current_counts[eng_index][0] += client_count
    state["eng_start_index"] = (state["eng_start_index"] + 1) % num_engines
    return eng_index


counts = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.sampled_from([0.0, 0.4, 0.6, 0.95])),
                  min_size=2, max_size=5)


@settings(max_examples=examples(60))
@given(counts, st.lists(st.integers(0, 8), min_size=5, max_size=5), st.integers(1, 12))
@example([(0, 0, 0.0), (0, 0, 0.0)], [0, 0, 0, 0, 0], 3)
def test_vllm_0_19_moe_snapshot_rule_is_vllms_loop(stats, _unused, picks):
    n = len(stats)
    rule = vllm_rule((0, 19), replicas=n, moe=True)
    ours = router_for(rule, n)
    ours.publish(stats)
    theirs = [[w, r] for w, r, _ in stats]
    for k in range(picks):
        c = k % rule.clients  # requests reach the API servers in turn; this is API server 0's view
        if c:
            ours.choose(k, [0] * n)
            continue
        assert ours.choose(k, [0] * n) == _vllm_0_19_choose(theirs, 0, rule.clients)


@settings(max_examples=examples(60))
@given(counts, st.lists(st.integers(0, 8), min_size=5, max_size=5), st.integers(1, 12))
@example([(3, 1, 0.95), (0, 4, 0.1)], [0, 0, 0, 0, 0], 4)
def test_vllm_0_33_rule_is_vllms_loop_for_one_api_server(stats, in_flight, picks):
    n = len(stats)
    rule = vllm_rule((0, 33), replicas=n)
    from dataclasses import replace

    rule = replace(rule, clients=1)  # one API server: its in-flight count is the engine's
    ours = router_for(rule, n)
    ours.publish(stats)
    theirs = [[w, r, kv] for w, r, kv in stats]
    state = {"eng_start_index": 0}
    flight = list(in_flight[:n])
    for k in range(picks):
        a = ours.choose(k, flight)
        b = _vllm_0_33_choose(theirs, flight, state, 1)
        assert a == b
        flight[a] += 1
