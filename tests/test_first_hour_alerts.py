"""Issue 30, finding 12: `kvplan alerts` on a healthy chat deployment stays quiet (latency
thresholds from the SLO or the simulated P99, never a fixed default), adds error-rate and
aborted-request rules, and scopes the GPU rules to vLLM's GPUs by default. Every rule file is
evaluated by the real `promtool test rules`."""
from __future__ import annotations

import json
import subprocess

import yaml

from first_hour_helpers import EXAMPLE_LOG, kvplan
from test_alerts import _series, promtool  # noqa: F401  (the session fixture)
from test_alerts_gpu import GPU0, HEALTHY, _fb

LLAMA = {"model_name": "llama", "engine": "0", "instance": "10.0.0.5:8000", "job": "vllm"}


def _promtool(tmp_path, promtool, rules, series, tests):  # noqa: F811
    doc = {"rule_files": [str(rules)], "evaluation_interval": "1m",
           "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": tests}]}
    path = tmp_path / "t.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)


def _chat_latency(e2e_lo: float, e2e_hi: float) -> list[dict]:
    """10 requests/min, every E2E between e2e_lo and e2e_hi s, every TTFT under 0.5 s."""
    e2e = [_series("vllm:e2e_request_latency_seconds_bucket", dict(LLAMA, le=le), v)
           for le, v in ((str(e2e_lo), "0+0x30"), (str(e2e_hi), "0+10x30"), ("+Inf", "0+10x30"))]
    ttft = [_series("vllm:time_to_first_token_seconds_bucket", dict(LLAMA, le=le), v)
            for le, v in (("0.5", "0+10x30"), ("+Inf", "0+10x30"))]
    return e2e + ttft + [_series("vllm:num_requests_running", LLAMA, "40x30")]


def _rules(out_dir) -> dict:
    doc = yaml.safe_load((out_dir / "kvplan-alerts.yml").read_text())
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"]}


def _quiet(*names, at="25m"):
    return [{"eval_time": at, "alertname": n, "exp_alerts": []} for n in names]


def test_a_healthy_chat_deployment_does_not_fire_by_default(tmp_path, promtool):  # noqa: F811
    """E2E 16-20 s (512-token answers), TTFT < 0.5 s: the old defaults (2 s / 1 s) fire for ever;
    the rules kvplan writes now have no latency rule without a source for one."""
    old = tmp_path / "old"
    assert kvplan("alerts", "-o", old, "--thresholds", "e2e_p99=2s,ttft_p99=1s").exit_code == 0
    fired = _promtool(tmp_path, promtool, old / "kvplan-alerts.yml", _chat_latency(16, 20),
                      _quiet("VllmE2eLatencyP99High"))
    assert fired.returncode != 0 and "VllmE2eLatencyP99High" in fired.stdout + fired.stderr
    new = tmp_path / "new"
    out = kvplan("alerts", "-o", new)
    assert out.exit_code == 0 and "e2e_p99: no rule" in out.stdout
    assert "VllmE2eLatencyP99High" not in _rules(new) and "VllmTtftP99High" not in _rules(new)
    p = _promtool(tmp_path, promtool, new / "kvplan-alerts.yml", _chat_latency(16, 20),
                  _quiet("VllmE2eLatencyP99High", "VllmTtftP99High", "VllmErrorRateHigh", "VllmRequestsAborted"))
    assert p.returncode == 0, p.stdout + p.stderr


def test_latency_thresholds_follow_the_slo_and_the_simulation(tmp_path, promtool):  # noqa: F811
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps({"latency_s": {"e2e": {"p99": 19.8}, "ttft": {"p99": 0.45}}}))
    out = kvplan("alerts", "-o", tmp_path / "sim", "--simulated", sim, "--format", "json").json()
    assert out["thresholds"]["e2e_p99"] == 29.7 and out["thresholds"]["ttft_p99"] == 0.675
    assert any("P99 19.8 s x 1.5" in n for n in out["notes"])
    rules = tmp_path / "sim" / "kvplan-alerts.yml"
    healthy = _promtool(tmp_path, promtool, rules, _chat_latency(16, 20), _quiet("VllmE2eLatencyP99High"))
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    slow = _promtool(tmp_path, promtool, rules, _chat_latency(40, 60), [{
        "eval_time": "25m", "alertname": "VllmE2eLatencyP99High", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "model_name": "llama"},
            "exp_annotations": {"summary": "E2E latency P99 59.8s on llama",
                                "description": "The slowest 1% of requests take longer than the threshold end to "
                                               "end."}}]}])
    assert slow.returncode == 0, slow.stdout + slow.stderr
    slo = kvplan("alerts", "-o", tmp_path / "slo", "--slo", "e2e_p99=30s", "--simulated", sim, "--format", "json").json()
    assert slo["thresholds"]["e2e_p99"] == 30.0  # the SLO wins over the simulation
    given = kvplan("alerts", "-o", tmp_path / "g", "--slo", "e2e_p99=30s", "--thresholds", "e2e_p99=45s",
                   "--format", "json").json()
    assert given["thresholds"]["e2e_p99"] == 45.0  # and an explicit threshold over both


def test_error_rate_and_aborted_requests_fire(tmp_path, promtool):  # noqa: F811
    kvplan("alerts", "-o", tmp_path / "o")
    rules = _rules(tmp_path / "o")
    http = {"handler": "/v1/chat/completions", "method": "POST", "instance": "10.0.0.5:8000", "job": "vllm"}
    series = [
        _series("http_requests_total", dict(http, status="2xx"), "0+90x30"),
        _series("http_requests_total", dict(http, status="5xx"), "0+10x30"),  # 10 % failing
        _series("http_requests_total", dict(http, instance="10.0.0.9:3000", status="5xx"), "0+50x30"),  # not vLLM
        _series("vllm:request_success_total", dict(LLAMA, finished_reason="stop"), "0+80x30"),
        _series("vllm:request_success_total", dict(LLAMA, finished_reason="abort"), "0+20x30"),  # 20 % aborted
        _series("vllm:num_requests_running", LLAMA, "5x30"),
    ]
    tests = [
        {"eval_time": "20m", "alertname": "VllmErrorRateHigh", "exp_alerts": [{
            "exp_labels": {"severity": "critical", "instance": "10.0.0.5:8000"},
            "exp_annotations": {"summary": "10% of requests answered 5xx on 10.0.0.5:8000",
                                "description": rules["VllmErrorRateHigh"]["annotations"]["description"]}}]},
        {"eval_time": "20m", "alertname": "VllmRequestsAborted", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "model_name": "llama"},
            "exp_annotations": {"summary": "20% of requests aborted on llama",
                                "description": rules["VllmRequestsAborted"]["annotations"]["description"]}}]},
    ]
    p = _promtool(tmp_path, promtool, tmp_path / "o" / "kvplan-alerts.yml", series, tests)
    assert p.returncode == 0, p.stdout + p.stderr
    # a healthy server: 0.5 % errors, 1 % aborts
    calm = [_series("http_requests_total", dict(http, status="2xx"), "0+199x30"),
            _series("http_requests_total", dict(http, status="5xx"), "0+1x30"),
            _series("vllm:request_success_total", dict(LLAMA, finished_reason="stop"), "0+99x30"),
            _series("vllm:request_success_total", dict(LLAMA, finished_reason="abort"), "0+1x30"),
            _series("vllm:num_requests_running", LLAMA, "5x30")]
    p = _promtool(tmp_path, promtool, tmp_path / "o" / "kvplan-alerts.yml", calm,
                  _quiet("VllmErrorRateHigh", "VllmRequestsAborted", at="20m"))
    assert p.returncode == 0, p.stdout + p.stderr


def test_gpu_headroom_watches_only_vllms_gpus_by_default(tmp_path, promtool):  # noqa: F811
    """A training box (no vLLM on the host) with a full GPU stays quiet; the vLLM host's GPU fires.
    Under Kubernetes (pod labels on the vLLM series) the same default joins by pod."""
    kvplan("alerts", "-o", tmp_path / "o")
    rules_path = tmp_path / "o" / "kvplan-alerts.yml"
    assert "DCGM join: auto" in rules_path.read_text()
    full = [81000] * 16
    trainer = GPU0 | {"instance": "10.0.0.9:9400", "Hostname": "train-1"}
    vllm = _series("vllm:num_requests_running", {"model_name": "llama", "instance": "10.0.0.5:8000"}, "1x15")
    rules = _rules(tmp_path / "o")
    tests = [{"eval_time": "10m", "alertname": "GpuMemoryHeadroomLow", "exp_alerts": [{
        "exp_labels": {"severity": "warning", **GPU0, "host": "10.0.0.5"},
        "exp_annotations": {"summary": "only 90 MiB free on GPU 0 on node-a (10.0.0.5:9400)",
                            "description": rules["GpuMemoryHeadroomLow"]["annotations"]["description"]}}]}]
    p = _promtool(tmp_path, promtool, rules_path, _fb(GPU0, full) + _fb(trainer, full) + [vllm], tests)
    assert p.returncode == 0, p.stdout + p.stderr
    # Kubernetes: GPU 0 held by the vLLM pod, GPU 1 by a training pod on the same node
    g0 = GPU0 | {"pod": "dcgm-exporter-x1", "namespace": "gpu-operator", "exported_pod": "vllm-0",
                "exported_namespace": "serving"}
    g1 = g0 | {"gpu": "1", "UUID": "GPU-9f00", "exported_pod": "trainer-0"}
    pod = _series("vllm:num_requests_running", {"model_name": "llama", "pod": "vllm-0", "namespace": "serving",
                                                "instance": "10.1.2.3:8000"}, "1x15")
    expected = g0 | {"pod": "vllm-0", "namespace": "serving", "model_name": "llama"}
    tests = [{"eval_time": "10m", "alertname": "GpuMemoryHeadroomLow", "exp_alerts": [{
        "exp_labels": {"severity": "warning", **expected},
        "exp_annotations": {"summary": "only 90 MiB free on GPU 0 on node-a (10.0.0.5:9400)",
                            "description": rules["GpuMemoryHeadroomLow"]["annotations"]["description"]}}]}]
    p = _promtool(tmp_path, promtool, rules_path, _fb(g0, full) + _fb(g1, full) + [pod], tests)
    assert p.returncode == 0, p.stdout + p.stderr
    # and a healthy vLLM GPU beside it stays quiet
    p = _promtool(tmp_path, promtool, rules_path, _fb(GPU0, [HEALTHY] * 16) + [vllm], _quiet("GpuMemoryHeadroomLow",
                                                                                            at="10m"))
    assert p.returncode == 0, p.stdout + p.stderr


def test_preflight_writes_latency_rules_from_its_simulated_load_test(tmp_path):
    d = kvplan("preflight", "--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "8192",
               "--requests", EXAMPLE_LOG, "--target-qps", "2", "--dry-run", "--output-dir", tmp_path,
               "--format", "json").json()
    check = next(c for c in d["checks"] if c["id"] == "alerts_written")
    assert any("simulated load test's P99" in e for e in check["evidence"])
    rules = _rules(tmp_path)
    assert "VllmE2eLatencyP99High" in rules and "VllmTtftP99High" in rules
