"""Invariants of the simulator on random traffic and configurations (hypothesis)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from kvplan.sim.engine import DONE, REJECTED, Engine
from kvplan.sim.steptime import StepTimeProfile
from kvplan.traffic.trace import SimRequest
from kvplan.traffic.lengthdist import parse_length
from plan_helpers import kv_groups

PROFILE = StepTimeProfile(overhead_s=0.003, per_seq_s=1e-5, weights_read_s=0.002, per_kv_token_s=1e-7,
                          per_token_s=2e-5, per_attn_pair_s=1e-9)

requests = st.lists(st.tuples(st.floats(0, 0.5), st.integers(1, 1500), st.integers(1, 400),
                              st.sampled_from([None, "a", "b"]), st.integers(0, 600),
                              st.sampled_from([None, "sys"]), st.integers(0, 300)), min_size=1, max_size=60)
configs = st.fixed_dictionaries({
    "block_size": st.sampled_from([16, 32]),
    "extra_blocks": st.integers(0, 300),
    "max_num_seqs": st.integers(1, 64),
    "mnbt_extra": st.integers(0, 4096),
    "max_model_len": st.sampled_from([512, 1024, 2048]),
    "async_scheduling": st.booleans(),
    "enable_prefix_caching": st.booleans(),
    "long_prefill_token_threshold": st.sampled_from([0, 64, 256]),
    "groups": st.sampled_from([(("full",),), (("full",), ("sliding", 128)), (("full",), ("mamba",))]),
})


class _Audited(Engine):
    """After every step: the free queue adds up, and the blocks the running requests hold (their own
    plus each shared chain's held prefix, counted once) are exactly the pool's used blocks."""

    def _finish_step(self, *args):
        super()._finish_step(*args)
        assert self.pool.check() is None
        if not self.counted:
            assert sum(r.held for r in self.running) == self.pool.usable - self.pool.free
            return
        used = 0
        for r in self.running:
            nc = self._num_computed(r)
            full = nc // self.block_size
            own = -(-nc // self.block_size)
            own -= max(0, full - r.root_blocks) if r.ext is not None and r.ext is r.sh else r.sh_h
            own -= min(full, r.root_blocks) if r.root_ext else r.root_h
            used += own
        shared = {id(c): c for r in self.running for c in (r.sh, r.root) if c is not None}
        for ch in shared.values():
            used += self.pool.held_top(ch)
        assert used == self.pool.usable - self.pool.free


def _build(reqs, cfg):
    t = 0.0
    out = []
    for gap, p, o, pid, ptok, root, rtok in reqs:
        t += gap
        out.append(SimRequest(t, p, o, pid, min(ptok, p), root_id=root, root_tokens=min(rtok, p)))
    bs = cfg["block_size"]
    mml = cfg["max_model_len"]
    per_req = len(cfg["groups"]) * (-(-mml // bs))
    e = _Audited(requests=out, num_gpu_blocks=per_req + 1 + cfg["extra_blocks"], block_size=bs,
               max_num_seqs=cfg["max_num_seqs"], max_num_batched_tokens=cfg["max_num_seqs"] + cfg["mnbt_extra"] + 1,
               max_model_len=mml, profile=PROFILE, groups=kv_groups(bs, *cfg["groups"]),
               enable_prefix_caching=cfg["enable_prefix_caching"],
               long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
               async_scheduling=cfg["async_scheduling"], timeline_interval_s=0.05, max_steps=200_000)
    return out, e.run()


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests, configs)
def test_no_request_lost_times_monotonic_kv_bounded(reqs, cfg):
    trace, e = _build(reqs, cfg)
    done = [r for r in e.reqs if r.status == DONE]
    rejected = [r for r in e.reqs if r.status == REJECTED]
    assert len(done) + len(rejected) == len(trace) and e.rejected == len(rejected)
    for r in rejected:
        assert r.num_prompt_tokens >= cfg["max_model_len"]
    for r in done:
        assert r.arrival <= r.t_sched <= r.t_first <= r.t_end
        clamped = max(1, min(trace[r.i].output_tokens, cfg["max_model_len"] - r.num_prompt_tokens))
        assert r.num_output_tokens == r.max_tokens == clamped
    assert all(0.0 <= row["kv_usage"] <= 1.0 for row in e.timeline)
    assert all(row["running"] <= cfg["max_num_seqs"] for row in e.timeline)
    assert e.pool.check() is None
    assert e.pool.free == e.pool.usable  # every block back in the free queue at the end
    assert sum(c for _, c in e.itl_w) + len(e.itl_x) == sum(r.num_output_tokens - 1 for r in done)
    assert sorted(e.first_order) == sorted(r.i for r in done)


@settings(max_examples=examples(20), deadline=None)
@given(requests, configs)
def test_deterministic(reqs, cfg):
    _, a = _build(reqs, cfg)
    _, b = _build(reqs, cfg)
    assert [(r.t_first, r.t_end, r.preempted) for r in a.reqs] == [(r.t_first, r.t_end, r.preempted) for r in b.reqs]
    assert a.timeline == b.timeline


@given(st.integers(1, 10_000), st.integers(0, 10_000), st.sampled_from(["uniform", "normal"]))
def test_length_syntaxes_agree(a, b, kind):
    lo, hi = (a, a + b)
    colon = parse_length(f"{kind}:{lo}:{hi}", "x")
    comma = parse_length(f"{kind}:{lo},{hi}", "x")
    assert colon == comma
