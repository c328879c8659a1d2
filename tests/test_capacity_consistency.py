"""Issue 14, finding 21: the capacity table's tokens at a length equal the plan's at that length
(the README scenario showed 515,088 in a report against the plan's 515,120). Each ladder row is
now planned with the same budget function the plan uses at that length."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def plan_json(*args):
    env = dict(os.environ, KVPLAN_OFFLINE="1")
    p = subprocess.run([sys.executable, "-m", "kvplan.cli.main", "plan", *args, "--format", "json"],
                       capture_output=True, text=True, env=env, timeout=120)
    return json.loads(p.stdout)


@pytest.mark.parametrize("flags", [
    ("--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4"),
    ("--model", "qwen2.5-0.5b", "--gpu", "H100"),
])
def test_every_capacity_row_equals_the_plan_at_that_length(flags):
    base = plan_json(*flags, "--max-model-len", "2048")
    rows = [r for r in base["capacity_table"] if r["fits"]]
    assert len(rows) >= 3
    for r in rows:
        at = plan_json(*flags, "--max-model-len", str(r["max_model_len"]))
        assert r["kv_cache_tokens"] == at["kv"]["kv_cache_tokens"], r["max_model_len"]
        assert r["max_concurrency"] == pytest.approx(at["kv"]["max_concurrency"], abs=1e-3)
