"""The GPU price table (kvplan/hardware/prices.json): dated, sourced, every catalog GPU priced or
marked unpriced with a reason; --gpu-price overrides; what a fleet costs."""
from __future__ import annotations

import json

import pytest

from kvplan.errors import UsageError
from kvplan.hardware import catalog
from kvplan.hardware.prices import _FILE, fleet_cost, load_prices, shipped_table


def test_every_catalog_gpu_is_priced_or_marked_unpriced():
    d = json.loads(_FILE.read_text())
    names = {g.name for g in catalog()}
    priced, unpriced = set(d["prices"]), set(d["unpriced"])
    assert not priced & unpriced
    assert names == priced | unpriced, (names - priced - unpriced, (priced | unpriced) - names)
    assert all(reason.strip() for reason in d["unpriced"].values())


def test_every_price_names_its_source_and_the_table_its_date():
    d = json.loads(_FILE.read_text())
    assert d["date"] and d["currency"] == "USD"
    for name, row in d["prices"].items():
        src = d["sources"][row["source"]]
        assert src["url"].startswith("https://") and src["retrieved"] and row["row"], name
        assert 0 < row["usd"] < 100, name
    t = shipped_table()
    assert t.price("A100-SXM4-80GB") == pytest.approx(0.00076 * 3600)
    assert "docs.runpod.io" in t.describe("H100-SXM5-80GB")["source"]
    assert t.describe("GB10")["unpriced"]


def test_gpu_price_overrides_by_alias_and_file(tmp_path):
    t = load_prices("a100-80gb=1.8,H100=2.5")
    assert t.price("A100-SXM4-80GB") == 1.8 and t.price("H100-SXM5-80GB") == 2.5
    assert t.origin["A100-SXM4-80GB"] == "--gpu-price" and t.price("L4") == shipped_table().price("L4")
    f = tmp_path / "p.json"
    f.write_text('{"T4": 0.35}')
    t = load_prices(str(f))
    assert t.price("T4") == 0.35 and "T4" not in t.unpriced
    with pytest.raises(UsageError, match="not NAME=USD"):
        load_prices("A100")
    with pytest.raises(UsageError, match="not a GPU of the catalog"):
        load_prices("Z9000=3")
    bad = tmp_path / "bad.json"
    bad.write_text("{\n nope")
    with pytest.raises(UsageError, match=r"bad.json:2: not JSON"):
        load_prices(str(bad))


def test_fleet_cost_by_hand():
    t = load_prices("A100-80GB=2")
    # 72 GPUs at $2: $144/h; 50 req/s x 512 output tokens = 92.16 M tokens/h -> $1.5625 per million
    c = fleet_cost(t, "A100-SXM4-80GB", 72, 50.0, 51.2, 512)
    assert c["usd_per_hour"] == 144 and c["usd_per_million_output_tokens"] == pytest.approx(1.5625)
    assert c["usd_per_million_output_tokens_at_capacity"] == pytest.approx(144 / (51.2 * 512 * 3600) * 1e6, abs=1e-4)
    assert fleet_cost(t, "GB10", 4, 1.0, 1.0, 100)["unpriced"]
