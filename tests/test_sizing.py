"""The capacity answer across front ends (kvplan.tune.sizing, kvplan.sim.capacity): per GPU type, the
same count the capacity function gives; a launch that starts across nodes; a log's coverage capped
at the model's limit; preflight recommending a total whatever -dp it was given."""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import random
import subprocess
import sys

from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.models import load_model
from kvplan.sim import synthetic_trace
from kvplan.sim.capacity import replicas_needed
from kvplan.tune.sizing import size_space
from kvplan.traffic.trace import SimRequest, Trace
from kvplan.tune.space import TuneSpace, coverage_info, expand
from kvplan.slo import parse_slo
from kvplan.traffic.lengthdist import parse_length

QWEN = load_model("qwen2.5-0.5b")


def _make(rate, n=None):
    return synthetic_trace(rate, num_requests=n or 500, input_len=parse_length("uniform:200,300", "x"),
                           output_len=parse_length("64", "x"), seed=0)


def test_each_gpu_type_is_answered_with_the_capacity_functions_count():
    base = PlanRequest(model=QWEN, gpu=find_gpu("L4"), max_model_len=1024)
    space = TuneSpace(gpu=("L4", "T4"), max_num_seqs=(None,), gpu_memory_utilization=(0.9,), kv_cache_dtype=("auto",),
                      tensor_parallel=(1,))
    slo = parse_slo("ttft_p99=300ms")
    res = size_space(base, _make, slo, space=space, target_rate=60.0, load_balancer="round_robin", processes=1)
    d = res.to_dict()
    assert {s["gpu"] for s in d["per_gpu_type"]} == {"L4", "T4"}
    assert d["load_balancer"]["name"] == "round_robin" and d["winner"]["gpus"] == min(
        s["gpus"] for s in d["per_gpu_type"] if s["gpus"])
    for s in d["per_gpu_type"]:
        req = dataclasses.replace(base, gpu=find_gpu(s["gpu"]), gpu_memory_utilization=0.9)
        alone = replicas_needed(req, _make, 60.0, slo=slo, load_balancer="round_robin")
        assert s["replicas"] == alone["replicas"], (s["gpu"], s["replicas"], alone["reason"])
        if s["replicas"]:
            assert s["capacity"]["max_rate"] >= 60.0 and s["capacity"]["ceiling_rps"] >= s["capacity"]["max_rate"]
            assert s["at_target"]["ttft_p99"] <= 0.3


def test_multi_node_data_parallel_launch_and_node_count():
    req = PlanRequest(model=load_model("meta-llama/Llama-2-70b-chat-hf"), gpu=find_gpu("A100-80GB"),
                      tensor_parallel_size=4, data_parallel_size=18, max_model_len=2048)
    p = plan(req, what_ifs=False)
    assert p.parallel.nodes == 9 and p.parallel.total_gpus == 72  # two replicas of TP 4 per 8-GPU node
    dl = p.dp_launch
    assert dl.mode == "vllm-multi-node" and dl.nodes == 9 and len(dl.commands) == 9
    head, second = dl.commands[0][1], dl.commands[1][1]
    assert "--headless" not in head and head[head.index("--data-parallel-size-local") + 1] == "2"
    assert "--headless" in second and second[second.index("--data-parallel-start-rank") + 1] == "2"
    assert all(c[1][c[1].index("--data-parallel-size") + 1] == "18" for c in dl.commands)
    assert "dp_launch" in p.to_dict() and "dp_launch" not in plan(dataclasses.replace(req, data_parallel_size=1),
                                                                  what_ifs=False).to_dict()
    from kvplan.memory.launch import data_parallel_launch

    rr = data_parallel_launch(list(p.serve_argv), tp=4, pp=1, dp=18, gpus_per_node=8, balancer="round_robin")
    assert rr.mode == "independent-replicas" and rr.nodes == 9 and "--data-parallel-size" not in rr.commands[0][1]
    old = data_parallel_launch(list(p.serve_argv), tp=4, pp=1, dp=18, gpus_per_node=8, version=(0, 8, 5))
    assert old.mode == "independent-replicas"  # 0.8.5 has no multi-node data parallel


def test_a_logs_need_above_the_models_limit_is_capped_with_its_coverage():
    reqs = tuple(SimRequest(i * 0.1, 1000, 200) for i in range(99)) + (SimRequest(10.0, 40_000, 100),)
    trace = Trace(reqs, "log")
    base = PlanRequest(model=load_model("meta-llama/Llama-2-70b-chat-hf"), gpu=find_gpu("A100-80GB"),
                       tensor_parallel_size=4)
    cov = coverage_info(trace, 100.0, base)
    assert cov["capped_at_model_limit"] and cov["max_model_len_floor"] == 4096 == cov["model_limit"]
    assert cov["longer"] == 1 and cov["covered_pct"] == 99.0
    cands, pruned, floor = expand(base, TuneSpace(max_num_seqs=(None,), gpu_memory_utilization=(0.9,),
                                                  kv_cache_dtype=("auto",), coverage_pct=100.0), trace)
    assert floor == 4096 and cands and all(c.plan.flags.max_model_len == 4096 for c in cands)


def test_preflight_recommends_a_total_whatever_dp_it_was_given(tmp_path):
    log = tmp_path / "usage.jsonl.gz"
    rng = random.Random(0)
    with gzip.open(log, "wt") as f:
        for i in range(600):
            f.write(json.dumps({"timestamp": 1e9 + i * 0.05,
                                "usage": {"prompt_tokens": rng.randint(200, 300), "completion_tokens": 64}}) + "\n")
    fixes = {}
    for dp in ("1", "2"):
        p = subprocess.run([sys.executable, "-m", "kvplan.cli.main", "preflight", "--model", "qwen2.5-0.5b", "--gpu", "T4",
                            "-dp", dp, "--max-model-len", "1024", "--requests", str(log), "--target-qps", "250",
                            "--slo", "ttft_p99=300ms", "--dry-run", "--duration", "20s", "--load-balancer", "round_robin",
                            "--format", "json"], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, KVPLAN_OFFLINE="1"))
        d = json.loads(p.stdout)
        sized = [f for c in d["checks"] for f in c.get("fixes", []) if f["numbers"].get("replicas_for_target")]
        fixes[dp] = {(f["change"], f["numbers"]["replicas_for_target"]) for f in sized}
    assert fixes["1"] and fixes["1"] == fixes["2"], fixes  # a total, not a multiple of -dp
    (change, n), = fixes["1"]
    assert int(change.split()[-1]) > 2 and n > 1
