"""`kvplan watch --prometheus` and `kvplan doctor --prometheus` against a REAL Prometheus (Debian's
package, started on 127.0.0.1 with a 1 s scrape interval, stopped by PID) scraping the real vLLM
CPU server (the 160-block server, so a burst preempts) and the DCGM exporter fixture (the one fake:
no GPU here; its FB_USED grows during the test).

What Prometheus scraped must agree with direct /metrics reads of the same interval: the counter
increases between a read before and after a preemption burst (requests, prompt and generation
tokens, preemptions) and the E2E P99 of the histogram difference are equal exactly (watch replays
the stored scrapes through the live mode's code; doctor sums the raw counter values).
"""
from __future__ import annotations

import json
import time

import pytest

from kvplan.bench import metrics as M
from test_bench_support import run_cli
from tests.vllm_server.client import get_text, preemption_burst
from tests.vllm_server.fixtures import SMALL_KV
from tests.vllm_server.prometheus import FakeDcgmExporter, PrometheusServer

pytestmark = pytest.mark.vllm
HEALTHY = round(0.92 * 81090) + 400  # MiB: vLLM's budget at 0.92 plus the CUDA context


def _unix(iso: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _read(base_url: str) -> M.MetricsSnapshot:
    status, text = get_text(base_url, "/metrics", 10)
    assert status == 200
    return M.parse_metrics(text)


def _settled(base_url: str, timeout: float = 120.0) -> M.MetricsSnapshot:
    """A read after the server went quiet: request and token counters unchanged over 3 s."""
    deadline = time.monotonic() + timeout
    prev = _read(base_url)
    while time.monotonic() < deadline:
        time.sleep(3)
        cur = _read(base_url)
        if all(cur.get(k) == prev.get(k) for k in ("request_success", "generation_tokens", "prompt_tokens")) \
                and not cur.get("requests_running"):
            return cur
        prev = cur
    raise AssertionError("vLLM did not go quiet")


def test_watch_and_doctor_read_what_prometheus_scraped(vllm_servers, tmp_path):
    # ask the pool, not the session fixture: an earlier test may have stopped the small-KV server
    # (the pool then restarts it, on a new port; the fixture's object would be the dead one)
    small_kv_server = vllm_servers.get(SMALL_KV)
    base = small_kv_server.base_url
    vllm_target = base.split("//", 1)[1]
    with FakeDcgmExporter() as dcgm:
        dcgm.set_used(0, HEALTHY)
        # 2 s scrapes (and so a 2 s scrape timeout): on a busy 2-core host vLLM's API server can take
        # over a second to answer /metrics, and a 1 s timeout then drops every scrape
        with PrometheusServer({"vllm": [vllm_target], "dcgm": [dcgm.target]}, interval="2s") as prom:
            prom.wait_for('vllm:num_requests_running{job="vllm"}', lambda r: len(r) >= 1, timeout=180,
                          what="vLLM scraped")
            prom.wait_for('DCGM_FI_DEV_FB_USED{job="dcgm"}', lambda r: len(r) == 2, what="DCGM scraped")
            a = _settled(base)
            t_a = time.time()
            time.sleep(3)  # Prometheus stores scrapes with A's values
            burst = preemption_burst(base, 4, 1000, 500, timeout=240)
            assert burst.all_ok and burst.preemptions >= 1, burst.summary()
            for extra in (3000, 4000, 5000):  # memory outside vLLM's budget grows
                dcgm.set_used(0, HEALTHY + extra)
                time.sleep(3)
            b = _settled(base)
            want = {k: M.counter_delta(a.get(k), b.get(k))
                    for k in ("request_success", "prompt_tokens", "generation_tokens", "preemptions")}
            assert want["request_success"] >= 4 and want["preemptions"] >= 1
            # Prometheus has a scrape with B's values (and DCGM's last value)
            prom.wait_for(f'sum(vllm:request_success_total{{job="vllm"}}) == {b.get("request_success")}',
                          lambda r: len(r) == 1, what="the settled counters scraped")
            time.sleep(2)
            window = time.time() - t_a + 1

            p = run_cli("watch", "--prometheus", prom.url, "--once", "--format", "json", "--window", f"{window:.1f}",
                        "--model-name", small_kv_server.served_model_name, timeout=120)
            assert p.returncode == 0, p.stdout + p.stderr
            (snap,) = json.loads(p.stdout)
            assert snap["up"] and snap["deployment"]["model_names"] == [small_kv_server.served_model_name]
            assert snap["requests_in_window"] == want["request_success"]
            assert snap["prompt_tokens_in_window"] == want["prompt_tokens"]
            assert snap["generation_tokens_in_window"] == want["generation_tokens"]
            assert snap["preemptions_in_window"] == want["preemptions"]
            e2e = M.histogram_delta(a.get_histogram("e2e"), b.get_histogram("e2e"))
            assert snap["e2e_p99_s"] == e2e.quantile(0.99) and snap["e2e_p50_s"] == e2e.quantile(0.5)
            assert snap["kv_cache_usage"] == b.get("kv_cache_usage")
            assert snap["metric_names"]["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
            # GPU memory from the DCGM fixture on the same host, against the server's own budget (0.92)
            gpu0 = next(g for g in snap["gpu"] if g["gpu"] == "0")
            assert gpu0["memory_used_bytes"] == (HEALTHY + 5000) << 20 and gpu0["budget_fraction"] == 0.92
            assert "gpu_budget" in snap["tripped"]
            assert any("vllm:cache_config_info" in n for n in snap["notes"])

            end = time.time()
            p = run_cli("doctor", "--prometheus", prom.url, "--start", f"{t_a - 0.5:.3f}", "--end", f"{end:.3f}",
                        "--format", "json", timeout=120)
            assert p.returncode in (0, 1), p.stdout + p.stderr
            rep = json.loads(p.stdout)
            (h,) = rep["history"]
            assert h["totals"]["requests"] == want["request_success"]
            assert h["totals"]["prompt_tokens"] == want["prompt_tokens"]
            assert h["totals"]["preemptions"] == want["preemptions"]
            pre = next(f for f in rep["findings"] if f["id"] == "preemption")
            assert pre["numbers"]["preemptions"] == want["preemptions"]
            assert pre["evidence"][0]["start"] and pre["evidence"][0]["line"] == 0
            gpu = next(f for f in rep["findings"] if f["id"] == "gpu_memory_outside_budget")
            assert gpu["numbers"]["growing"] is True and gpu["numbers"]["gpu"].startswith("GPU 0")
            assert gpu["numbers"]["outside_budget_mib_last"] == pytest.approx(HEALTHY + 5000 - 0.92 * 81090, abs=0.1)
            assert not any(f["id"] == "server_restart" for f in rep["findings"])
            # latency tails, at thresholds the burst is sure to cross; every range inside the asked one
            p = run_cli("doctor", "--prometheus", prom.url, "--start", f"{t_a - 0.5:.3f}", "--end", f"{end:.3f}",
                        "--format", "json", "--thresholds", "e2e_p99=1ms,ttft_p99=1ms,kv_cache_usage=0.01", timeout=120)
            rep = json.loads(p.stdout)
            tails = {f["numbers"]["metric"] for f in rep["findings"] if f["id"] == "latency_tail"}
            assert tails == {"e2e_p99", "ttft_p99"}
            for f in rep["findings"]:
                for e in f["evidence"]:
                    assert t_a - 1 <= _unix(e["start"]) <= _unix(e["end"]) <= end + 1

            # selection errors: a model Prometheus does not have; DCGM not found for a selector
            p = run_cli("doctor", "--prometheus", prom.url, "--since", "10m", "--model-name", "nope", timeout=60)
            assert p.returncode == 3 and small_kv_server.served_model_name in p.stderr and "--model-name nope" in p.stderr
            p = run_cli("watch", "--prometheus", prom.url, "--once", "--format", "json", "--gpu-selector",
                        '{gpu="7"}', timeout=60)
            assert p.returncode == 0, p.stderr
            assert any("GPU checks skipped" in n for n in json.loads(p.stdout)[0]["notes"])
