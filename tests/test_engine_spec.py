"""The simulator's input is the engine that ``memory`` resolves (``EngineSpec``), not the plan's report:
the spec carries the values the report shows, is never serialized with it, and simulating the spec
or the plan it came from gives the same result."""
from __future__ import annotations

import json
import re
from pathlib import Path

import kvplan.sim
from kvplan.hardware import find_gpu
from kvplan.memory import EngineSpec, PlanRequest, engine_spec, plan
from kvplan.models import load_model
from kvplan.sim import simulate
from sim_helpers import plan_request, trace


def test_the_spec_holds_what_the_plan_reports_and_is_not_part_of_its_json():
    req = PlanRequest(model=load_model("google/gemma-3-12b-it"), gpu=find_gpu("L40S"), max_model_len=8192,
                      kv_cache_dtype="fp8")
    result = plan(req, what_ifs=False)
    spec = result.engine_spec
    assert isinstance(spec, EngineSpec) and spec == engine_spec(req)
    assert (spec.num_gpu_blocks, spec.block_size, spec.kv_cache_tokens) == (
        result.kv.num_gpu_blocks, result.kv.block_size, result.kv.kv_cache_tokens)
    assert (spec.max_model_len, spec.max_num_seqs, spec.max_num_batched_tokens, spec.kv_cache_dtype) == (
        result.flags.max_model_len, result.flags.max_num_seqs, result.flags.max_num_batched_tokens,
        result.flags.kv_cache_dtype)
    assert len(spec.kv_groups) > 1 and {g.kind for g in spec.kv_groups} == {g.kind for g in result.kv.groups}
    assert spec.semantics.label == result.vllm_semantics and spec.serve_command == result.serve_command
    assert spec.starts and spec.sizing == result.sizing
    d = result.to_dict()
    assert "engine_spec" not in d
    json.dumps(d)


def test_simulating_the_spec_or_its_plan_gives_the_same_result():
    req, tr = plan_request(), trace(n=60)
    result = plan(req, what_ifs=False)
    from_plan = simulate(req, tr, plan_result=result).to_dict()
    assert simulate(req, tr, plan_result=result.engine_spec).to_dict() == from_plan
    assert simulate(req, tr).to_dict() == from_plan


def test_no_simulator_module_reads_the_plans_report():
    # the report's sections: .flags, .kv, .memory, .startup, .parallel of a plan result
    report = re.compile(r"\b(plan_result|pr|res)\.(flags|kv|memory|startup|parallel|model|vllm_semantics|engine)\b")
    sim_dir = Path(kvplan.sim.__file__).parent
    readers = [f"{p.name}:{n}" for p in sorted(sim_dir.glob("*.py"))
               for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if report.search(line)]
    assert readers == []
