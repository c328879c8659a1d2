"""Helpers shared by the simulator tests (test_sim_engine, test_sim_api, test_sim_traffic): a
flat step-time profile, so step counts become times, a small-engine runner that audits the block
pool, and the Llama-2-70B on 4x A100 plan request and synthetic trace the API tests simulate."""
from __future__ import annotations

from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest
from kvplan.models import load_model
from kvplan.sim import synthetic_trace
from kvplan.sim.engine import Engine
from kvplan.sim.steptime import StepTimeProfile
from kvplan.traffic.lengthdist import parse_length

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


#: The CLI flags of the same scenario as ``plan_request`` + ``trace``.
SEED_FLAGS = ["--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4",
              "--input-len", "uniform:800,1200", "--output-len", "512"]


def plan_request(mml=2048):
    return PlanRequest(model=load_model("meta-llama/Llama-2-70b-chat-hf"), gpu=find_gpu("A100-80GB"),
                       tensor_parallel_size=4, max_model_len=mml)


def trace(rate=2.0, n=200, seed=0):
    return synthetic_trace(rate, num_requests=n, input_len=parse_length("uniform:800,1200", "x"),
                           output_len=parse_length("512", "x"), seed=seed)
