"""kvplan tune on Ray: a local Ray head that this test starts (the ``ray_head`` fixture,
tests/ray_helpers.py) runs the simulations; the ranking equals the serial one. Skipped when Ray
(extra ``kvplan[ray]``) is not installed."""
from __future__ import annotations

from dataclasses import replace

import pytest

ray = pytest.importorskip("ray")

from ray_helpers import free_port  # noqa: E402
from test_tune import BASE, BURST, STEP, TINY  # noqa: E402

from kvplan.errors import UsageError  # noqa: E402
from kvplan.tune.search import tune  # noqa: E402
from kvplan.slo import parse_slo  # noqa: E402


def test_ray_backend_ranks_like_serial(ray_head):
    space = replace(TINY, max_num_seqs=(4, 64), gpus=(1, 2))
    slo = parse_slo("ttft_p99=200ms")
    serial = tune(BASE, BURST, slo, space=space, profile=STEP, processes=1, exhaustive=True)
    on_ray = tune(BASE, BURST, slo, space=space, profile=STEP, ray_address=ray_head, exhaustive=True)
    assert on_ray.backend["kind"] == "ray" and on_ray.backend["address"] == ray_head
    assert [r.to_dict() for r in on_ray.rows] == [r.to_dict() for r in serial.rows]
    assert on_ray.pruned == serial.pruned and on_ray.pareto == serial.pareto and len(on_ray.rows) == 12


def test_unreachable_ray_address_is_a_usage_error():
    with pytest.raises(UsageError, match="no Ray head answers"):
        tune(BASE, BURST, (), space=TINY, profile=STEP, ray_address=f"127.0.0.1:{free_port()}")
