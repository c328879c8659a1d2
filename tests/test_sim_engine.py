"""The V1 scheduler model on hand-computed scenarios (vllm/v1/core/sched/scheduler.py, 0.32)."""
from __future__ import annotations

import math

import pytest

from kvplan.sim.engine import DONE, REJECTED, Engine
from plan_helpers import kv_groups
from kvplan.sim.steptime import StepTimeProfile
from kvplan.traffic.trace import SimRequest
from sim_helpers import run


@pytest.mark.parametrize("async_sched", [False, True])
def test_small_kv_burst_preempts_exactly_once(async_sched):
    # tests/vllm_real/test_vllm_preemption.py: the real server makes exactly one preemption here
    reqs = [SimRequest(0.0, 1000, 500) for _ in range(4)]
    e = run(reqs, num_gpu_blocks=160, block_size=32, max_model_len=2048, async_scheduling=async_sched)
    assert e.preemptions == 1
    assert all(r.status == DONE and r.num_output_tokens == 500 for r in e.reqs)
    victim = [r for r in e.reqs if r.preempted]
    assert [r.i for r in victim] == [3]  # the LAST of the running queue
    # preempted when the 4th request needs its 40th block: 3 x 40 + 40 > 159 usable, at 1,248
    # computed tokens (249 outputs). Its 39 full blocks go back tail first; the other three take
    # 21 of them (3 x (47 - 40)) before it resumes, so it hits its first 18 blocks (576 tokens)
    v = victim[0]
    assert e.cached_tokens == v.hit_tokens == 18 * 32
    assert e.prompt_computed == 4 * 1000 + (1000 + 249) - 576
    assert e.pool.free == 159  # everything back, null block excluded


def test_chunked_prefill_splits_a_long_prompt_across_steps():
    e = run([SimRequest(0.0, 5000, 4)], max_model_len=8192)
    r = e.reqs[0]
    # 2048 + 2048 + 904 prompt tokens: the first token comes at the end of the third step
    assert r.t_first == pytest.approx(0.03)
    assert r.t_end == pytest.approx(0.03 + 3 * 0.01)
    assert e.prompt_computed == 5000 and e.steps == 6


def test_decodes_go_first_then_waiting_prefills_share_the_rest():
    # two 1500-token prompts: the second gets 548 tokens in step 1, then finishes in step 2
    e = run([SimRequest(0.0, 1500, 3), SimRequest(0.0, 1500, 3)])
    a, b = e.reqs
    assert a.t_first == pytest.approx(0.01)
    assert b.t_first == pytest.approx(0.02)
    assert e.first_order == [0, 1]


def test_long_prefill_token_threshold_caps_chunks_when_others_wait():
    e = run([SimRequest(0.0, 1000, 2), SimRequest(0.0, 1000, 2)], long_prefill_token_threshold=256)
    # both prompts advance 256 tokens per step: 4 steps each to finish (256 * 4 >= 1000)
    assert [r.t_first for r in e.reqs] == [pytest.approx(0.04), pytest.approx(0.04)]


def test_max_num_seqs_caps_the_running_batch():
    e = run([SimRequest(0.0, 10, 5) for _ in range(10)], max_num_seqs=4, timeline_interval_s=0.005)
    assert max(row["running"] for row in e.timeline) <= 4
    assert e.first_order == list(range(10))  # FCFS
    # batches of 4, 4, 2: each batch takes 5 steps (1 prefill + 4 decodes)
    assert sorted({round(r.t_end, 6) for r in e.reqs}) == [0.05, 0.1, 0.15]


def test_too_long_prompts_are_rejected_and_outputs_clamped():
    e = run([SimRequest(0.0, 4096, 10), SimRequest(0.0, 5000, 10), SimRequest(0.0, 4000, 500)])
    assert [r.status for r in e.reqs] == [REJECTED, REJECTED, DONE]
    assert e.rejected == 2 and e.rejected_reasons == {"prompt_too_long": 2}
    assert e.reqs[2].num_output_tokens == 96  # get_max_tokens: max_model_len - prompt


def test_shared_prefix_hits_full_blocks_only():
    reqs = [SimRequest(0.0, 600, 2, "sys", 500), SimRequest(1.0, 600, 2, "sys", 500)]
    e = run(reqs)
    # 500 shared tokens = 31 full blocks of 16 (496 tokens); the partial block is recomputed
    assert e.reqs[1].hit_tokens == 496
    assert e.prompt_computed == 600 + 600 - 496


def test_prefix_hit_never_covers_the_last_prompt_token():
    reqs = [SimRequest(0.0, 512, 2, "c", 0), SimRequest(1.0, 512, 2, "c", 512)]
    e = run(reqs)
    assert e.reqs[1].hit_tokens == 496  # (512 - 1) // 16 blocks


def test_evicted_prefix_is_recomputed():
    # a pool of 40 usable blocks. The prefix request's 21 blocks (20 full, cached) go back to the end
    # of the free queue tail first; the filler's 38 blocks come from the front: the 19 never used,
    # then 19 of the freed ones, last block first. Blocks 0 and 1 of the prefix survive: 32 tokens
    reqs = [SimRequest(0.0, 320, 1, "p", 320), SimRequest(1.0, 600, 1), SimRequest(2.0, 330, 1, "p", 320)]
    e = run(reqs, num_gpu_blocks=41)
    assert e.reqs[2].hit_tokens == 32
    assert e.prompt_computed == 320 + 600 + 330 - 32
    # with room for both, nothing is evicted: the whole 320-token prefix (20 blocks) is hit
    assert run(reqs, num_gpu_blocks=60).reqs[2].hit_tokens == 320


def test_sliding_window_groups_free_blocks_outside_the_window():
    full_only = run([SimRequest(0.0, 100, 2000)], groups=kv_groups(16, ("full",), ("full",)))
    hybrid = run([SimRequest(0.0, 100, 2000)], groups=kv_groups(16, ("full",), ("sliding", 128)))
    assert hybrid.kv_peak < full_only.kv_peak
    # full group: ceil(2099 / 16) = 132 blocks; sliding: the window's 128 tokens span at most 9 blocks
    assert hybrid.kv_peak * 999 <= 132 + 10


def test_waiting_requests_need_the_whole_prompt_to_fit():
    # scheduler_reserve_full_isl: a 1,000-token prompt waits until 63 blocks are free
    # (the first holds 57 blocks for its 900 prompt tokens, leaving 42 of 99 usable)
    reqs = [SimRequest(0.0, 900, 200), SimRequest(0.0, 1000, 1)]
    e = run(reqs, num_gpu_blocks=100)
    a, b = e.reqs
    assert a.t_end == pytest.approx(2.0)  # 200 steps of 10 ms
    assert b.t_sched == pytest.approx(a.t_end)  # admitted in the step after the first one finished
    assert b.t_first == pytest.approx(a.t_end + 0.01)
    assert e.preemptions == 0
    # 57 + 63 = 120 usable blocks: the whole prompt fits beside the first at once
    assert run(reqs, num_gpu_blocks=121).reqs[1].t_sched == 0.0
    assert run(reqs, num_gpu_blocks=120).reqs[1].t_sched == pytest.approx(2.0)  # one block short: it waits


def test_requests_are_never_lost():
    reqs = [SimRequest(i * 0.001, 200 + (i * 37) % 700, 1 + (i * 13) % 300) for i in range(300)]
    e = run(reqs, num_gpu_blocks=200, max_num_seqs=32, async_scheduling=True)
    done = sum(1 for r in e.reqs if r.status == DONE)
    assert done + e.rejected == len(reqs)
    assert e.preemptions > 0
    for r in e.reqs:
        if r.status == DONE:
            assert r.arrival <= r.t_sched <= r.t_first <= r.t_end
            assert r.num_output_tokens == r.max_tokens
    assert all(0.0 <= row["kv_usage"] <= 1.0 for row in e.timeline)
    assert math.isclose(sum(c for _, c in e.itl_w) + len(e.itl_x), sum(r.num_output_tokens - 1 for r in e.reqs))


class _NoStretch(Engine):
    def _decode_stretch(self, next_arrival):  # the plain step loop, step by step (no stretch: 0 steps)
        return 0


@pytest.mark.parametrize("async_sched", [False, True])
def test_decode_stretches_give_the_step_by_step_result(async_sched):
    prof = StepTimeProfile(overhead_s=0.004, per_seq_s=2e-5, weights_read_s=0.02, per_kv_token_s=1e-7,
                           per_token_s=1e-4, per_attn_pair_s=1e-9)
    reqs = [SimRequest(i * 0.37, 100 + (i * 53) % 900, 20 + (i * 29) % 400, "p" if i % 3 == 0 else None, 64)
            for i in range(120)]
    args = dict(requests=reqs, num_gpu_blocks=400, block_size=16, max_num_seqs=32, max_num_batched_tokens=1024,
                max_model_len=2048, profile=prof, async_scheduling=async_sched, timeline_interval_s=0.5)
    a = Engine(**args).run()
    b = _NoStretch(**args).run()
    assert a.steps == b.steps and a.preemptions == b.preemptions
    assert [r.t_first for r in a.reqs] == pytest.approx([r.t_first for r in b.reqs], abs=1e-9)
    assert [r.t_end for r in a.reqs] == pytest.approx([r.t_end for r in b.reqs], abs=1e-9)
    assert [(row["running"], row["waiting"], row["kv_usage"]) for row in a.timeline] == \
        [(row["running"], row["waiting"], row["kv_usage"]) for row in b.timeline]
    assert [d for d, _ in sorted(a.itl_w)] == pytest.approx([d for d, _ in sorted(b.itl_w)], abs=1e-9)


def test_recomputed_tokens_count_the_resumed_prefill():
    e = run([SimRequest(0.0, 1000, 500) for _ in range(4)], num_gpu_blocks=160, block_size=32, max_model_len=2048)
    # the victim resumes with 1,249 tokens and hits 576 of them: 673 recomputed
    assert e.recomputed == 1249 - 576


def test_a_system_prompt_is_shared_across_conversations_and_history_within_one():
    sys = dict(root_id="sys", root_tokens=400)
    reqs = [SimRequest(0.0, 500, 50, "A", 0, **sys),  # conversation A, turn 1: computes the system prompt
            SimRequest(1.0, 450, 50, "B", 0, **sys),  # conversation B, turn 1: hits the system prompt only
            SimRequest(2.0, 700, 10, "A", 550, **sys)]  # A, turn 2: system prompt + A's first turn
    e = run(reqs)
    a1, b1, a2 = e.reqs
    assert a1.hit_tokens == 0
    assert b1.hit_tokens == 400 // 16 * 16  # 25 full blocks of the system prompt
    # A's history: turn 1's 549 computed tokens = 34 full blocks (the last sampled token has no KV)
    assert a2.hit_tokens == 549 // 16 * 16


def test_a_resumed_request_does_not_extend_the_root_with_its_private_blocks():
    # regression: a preempted request resuming into its private blocks held root content twice
    reqs = [SimRequest(0.96, 229, 291, "c", 225, root_id="s2", root_tokens=114),
            SimRequest(1.20, 843, 51, "d", 465, root_id="s2", root_tokens=270),
            SimRequest(1.42, 809, 174, None, 766, root_id="s1", root_tokens=367)]
    prof = StepTimeProfile(overhead_s=0.003, per_seq_s=1e-5, weights_read_s=0.002, per_kv_token_s=1e-7,
                           per_token_s=2e-5, per_attn_pair_s=1e-9)
    e = run(reqs, num_gpu_blocks=70, max_num_batched_tokens=256, max_model_len=1024, profile=prof,
            long_prefill_token_threshold=64, async_scheduling=True, max_num_seqs=18)
    assert e.preemptions >= 1
    assert e.pool.free == e.pool.usable


def test_a_preempted_request_hits_its_own_blocks_on_a_shared_chain_too():
    # the 4 x (1000 + 500) burst with each request on its own named chain: the victim extended its
    # chain past its (empty) shared prefix, so on resuming it hits its own 18 cached blocks
    reqs = [SimRequest(0.0, 1000, 500, f"conv{i}", 0) for i in range(4)]
    e = run(reqs, num_gpu_blocks=160, block_size=32, max_model_len=2048)
    assert e.preemptions == 1
    assert e.cached_tokens == 18 * 32
