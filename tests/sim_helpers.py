"""Helpers shared by the simulator tests (test_sim_engine, test_sim_api): a flat step-time
profile, so step counts become times, and a small-engine runner that audits the block pool."""
from __future__ import annotations

from kvplan.sim.engine import Engine
from kvplan.sim.steptime import StepTimeProfile

#: every step takes 10 ms whatever it computes: step counts become times
FLAT = StepTimeProfile(overhead_s=0.01, per_seq_s=0.0, weights_read_s=0.0, per_kv_token_s=0.0,
                       per_token_s=0.0, per_attn_pair_s=0.0)


def run(reqs, **kw):
    """Run an Engine (1,000 blocks of 16, 256 sequences, 2,048 batched tokens, FLAT, synchronous
    scheduling unless overridden) to the end; the pool's own consistency check must hold."""
    args = dict(num_gpu_blocks=1000, block_size=16, max_num_seqs=256, max_num_batched_tokens=2048,
                max_model_len=4096, profile=FLAT, async_scheduling=False)
    args.update(kw)
    e = Engine(requests=reqs, **args).run()
    assert e.pool.check() is None
    return e
