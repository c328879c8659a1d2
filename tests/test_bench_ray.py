"""The optional Ray backend: workers as Ray actors on a local Ray instance that this test starts
(the ``ray_head`` fixture, tests/ray_helpers.py: its own process group, stopped by that group),
against the FAKE server on 127.0.0.1. Skipped when Ray (extra ``kvplan[ray]``) is not installed."""
from __future__ import annotations

import json

import pytest

from ray_helpers import free_port
from test_bench_support import bench, fake_server
from verdict_helpers import assert_bench_passed

ray = pytest.importorskip("ray")


def test_ray_workers_give_one_merged_result(tmp_path, ray_head):
    with fake_server() as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--ray-address", ray_head, "--workers", "2",
                     "--rate", "40", "--arrival", "constant", "--max-requests", "40", "--output-len", "4",
                     timeout=180)
    assert_bench_passed(p.returncode, d, p.stderr)
    assert d["requests"]["total"] == 40 and d["requests"]["ok"] == 40
    recs = [json.loads(x) for x in (tmp_path / "r.records.jsonl").read_text().splitlines()]
    assert {r["worker"] for r in recs} == {0, 1} and sorted(r["i"] for r in recs) == list(range(40))
    assert d["server"]["deltas"]["vllm:generation_tokens_total"] == 160.0


def test_ray_address_unreachable_is_a_usage_error(tmp_path):
    p, d = bench("http://127.0.0.1:1", tmp_path / "r.json", "--model", "m", "--ray-address",
                 f"127.0.0.1:{free_port()}", "--rate", "1", "--max-requests", "1", timeout=60)
    assert p.returncode == 2 and "no Ray head answers" in p.stderr and d is None
