"""`kvplan alerts` GPU-memory rules on dcgm-exporter metrics, evaluated by the real `promtool test
rules`: a healthy vLLM at gpu_memory_utilization 0.92 does not fire; memory outside vLLM's budget
growing fires (with the MiB above the budget); the plain "used > 90 %" option fires on the same
healthy server, as documented; the Kubernetes and host joins keep only the deployment's GPUs.
Also VllmMetricsAbsent: one of two models stops -> fires with that model's name (issue 14 #19)."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from kvplan.errors import UsageError
from kvplan.ops import alerts, dcgm
from kvplan.ops.dcgm import GpuRuleOptions
from kvplan.ops.thresholds import Thresholds
from test_alerts import ROOT, _series, promtool  # noqa: F401  (the session fixture)
from test_bench_support import run_cli

# An H100 80GB as dcgm-exporter 4.5 reports it: used + free = 81,090 MiB (the 85,029,615,043 B
# torch.cuda.mem_get_info gives vLLM), 469 MiB reserved by the driver on top.
TOTAL, RESERVED = 81090, 469
CONTEXT = 400  # MiB the CUDA context holds outside vLLM's budget (>= 0.11 does not charge it)
HEALTHY = round(0.92 * TOTAL) + CONTEXT  # 75,003 MiB used
GPU0 = {"gpu": "0", "UUID": "GPU-1b2c", "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:19:00.0", "Hostname": "node-a", "instance": "10.0.0.5:9400", "job": "dcgm"}


def _fb(labels: dict, used: list[float]) -> list[dict]:
    vals = " ".join(f"{u:g}" for u in used)
    free = " ".join(f"{TOTAL - u:g}" for u in used)
    return [_series(dcgm.FB_USED, labels, vals), _series(dcgm.FB_FREE, labels, free),
            _series(dcgm.FB_RESERVED, labels, " ".join(str(RESERVED) for _ in used))]


def _run(tmp_path, promtool, rules_path, input_series, tests, name="t.yml"):  # noqa: F811
    doc = {"rule_files": [str(rules_path)], "evaluation_interval": "1m",
           "tests": [{"interval": "1m", "input_series": input_series, "alert_rule_test": tests}]}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    p = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr


def _rule(out, name):
    doc = yaml.safe_load(out.rules_path.read_text())
    return next(r for g in doc["groups"] for r in g["rules"] if r["alert"] == name)


def _alert(out, name, labels, summary):
    r = _rule(out, name)
    return {"exp_labels": {"severity": r["labels"]["severity"], **labels},
            "exp_annotations": {"summary": summary, "description": r["annotations"]["description"]}}


def test_healthy_vllm_at_092_stays_quiet_and_the_plain_threshold_fires(tmp_path, promtool):  # noqa: F811
    out = alerts.write(tmp_path, Thresholds(), "0.20", ["llama"], GpuRuleOptions(0.92, "test", mode="both", join="none"))
    assert out.gpu.utilization == 0.92
    series = _fb(GPU0, [HEALTHY] * 40)
    quiet = [{"eval_time": t, "alertname": a, "exp_alerts": []}
             for t in ("10m", "39m") for a in ("GpuMemoryAboveVllmBudget", "GpuMemoryHeadroomLow")]
    # the plain rule: 75,003 / 81,090 = 92.5 % > 90 % -> fires on the sound server, for ever
    plain = [{"eval_time": "39m", "alertname": "GpuMemoryAboveThreshold",
              "exp_alerts": [_alert(out, "GpuMemoryAboveThreshold", GPU0,
                                    "GPU memory 92.49% used on GPU 0 on node-a (10.0.0.5:9400)")]}]
    _run(tmp_path, promtool, out.rules_path, series, quiet + plain)


def test_memory_outside_the_budget_growing_fires(tmp_path, promtool):  # noqa: F811
    """Another process grows by 200 MiB/min from a healthy start: above budget + 3 % (2,433 MiB)
    after 10.2 min, firing 5 min later; free below 2 % (1,622 MiB) after 22.3 min."""
    out = alerts.write(tmp_path, Thresholds(), None, [], GpuRuleOptions(0.92, "test", join="none"))
    used = [HEALTHY + 200 * t for t in range(35)]
    tests = [
        {"eval_time": "12m", "alertname": "GpuMemoryAboveVllmBudget", "exp_alerts": []},  # pending (for 5m)
        {"eval_time": "20m", "alertname": "GpuMemoryAboveVllmBudget", "exp_alerts": [
            # 79,003 - 0.92 x 81,090 = 4,400.2 MiB above the budget
            _alert(out, "GpuMemoryAboveVllmBudget", GPU0,
                   "4.4k MiB above vLLM's budget (0.92 of total) on GPU 0 on node-a (10.0.0.5:9400)")]},
        {"eval_time": "20m", "alertname": "GpuMemoryHeadroomLow", "exp_alerts": []},
        {"eval_time": "30m", "alertname": "GpuMemoryHeadroomLow", "exp_alerts": [
            _alert(out, "GpuMemoryHeadroomLow", GPU0, "only 87 MiB free on GPU 0 on node-a (10.0.0.5:9400)")]},
    ]
    _run(tmp_path, promtool, out.rules_path, _fb(GPU0, used), tests)


def test_budget_follows_the_plan_file_and_the_hostname_label_of_newer_exporters(tmp_path, promtool):  # noqa: F811
    """A plan at 0.85 moves the budget: the same 75,003 MiB are then 6,077 MiB above it -> fires.
    dcgm-exporter's main branch names the host label ``hostname``: the summary still names it."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"flags": {"gpu_memory_utilization": 0.85}}))
    util, source = dcgm.resolve_utilization(None, str(plan), None)
    assert (util, source) == (0.85, f"flags.gpu_memory_utilization in {plan}")
    out = alerts.write(tmp_path, Thresholds(), None, [], GpuRuleOptions(util, source, join="none"))
    new = {k: v for k, v in GPU0.items() if k != "Hostname"} | {"hostname": "node-b"}
    tests = [{"eval_time": "10m", "alertname": "GpuMemoryAboveVllmBudget", "exp_alerts": [
        _alert(out, "GpuMemoryAboveVllmBudget", new,
               "6.077k MiB above vLLM's budget (0.85 of total) on GPU 0 on node-b (10.0.0.5:9400)")]}]
    _run(tmp_path, promtool, out.rules_path, _fb(new, [HEALTHY] * 12), tests)


def test_kubernetes_join_keeps_the_deployments_gpus_and_names_the_model(tmp_path, promtool):  # noqa: F811
    """Two GPUs over budget; GPU 0 belongs to the vLLM pod (as exported_pod: the Helm chart's
    honorLabels: false), GPU 1 to another pod. Only GPU 0 fires, with vLLM's model_name."""
    out = alerts.write(tmp_path, Thresholds(), None, ["llama"], GpuRuleOptions(0.92, "test", join="kubernetes"))
    g0 = GPU0 | {"pod": "dcgm-exporter-x1", "namespace": "gpu-operator", "exported_pod": "vllm-0",
                "exported_namespace": "serving", "exported_container": "vllm"}
    g1 = g0 | {"gpu": "1", "UUID": "GPU-9f00", "exported_pod": "trainer-0"}
    vllm = _series("vllm:num_requests_running", {"model_name": "llama", "engine": "0", "pod": "vllm-0",
                                                  "namespace": "serving", "instance": "10.1.2.3:8000"}, "1x15")
    over = [HEALTHY + 5000] * 16
    expected = g0 | {"pod": "vllm-0", "namespace": "serving", "model_name": "llama"}
    tests = [{"eval_time": "10m", "alertname": "GpuMemoryAboveVllmBudget", "exp_alerts": [
        _alert(out, "GpuMemoryAboveVllmBudget", expected,
               "5.4k MiB above vLLM's budget (0.92 of total) on GPU 0 on node-a (10.0.0.5:9400)")]}]
    _run(tmp_path, promtool, out.rules_path, _fb(g0, over) + _fb(g1, over) + [vllm], tests)


def test_host_join_keeps_gpus_of_hosts_that_run_the_model(tmp_path, promtool):  # noqa: F811
    out = alerts.write(tmp_path, Thresholds(), None, ["llama"], GpuRuleOptions(0.92, "test", join="host"))
    other = GPU0 | {"instance": "10.0.0.9:9400", "Hostname": "node-z"}
    vllm = _series("vllm:num_requests_running", {"model_name": "llama", "instance": "10.0.0.5:8000"}, "1x15")
    over = [HEALTHY + 5000] * 16
    tests = [{"eval_time": "10m", "alertname": "GpuMemoryAboveVllmBudget", "exp_alerts": [
        _alert(out, "GpuMemoryAboveVllmBudget", GPU0 | {"host": "10.0.0.5"},
               "5.4k MiB above vLLM's budget (0.92 of total) on GPU 0 on node-a (10.0.0.5:9400)")]}]
    _run(tmp_path, promtool, out.rules_path, _fb(GPU0, over) + _fb(other, over) + [vllm], tests)


@pytest.mark.parametrize("models", [("llama", "qwen"), ()])
def test_metrics_absent_fires_for_the_one_model_that_stopped(tmp_path, promtool, models):  # noqa: F811
    """Issue 14 #19: two models scraped, qwen stops at minute 10. The old rule
    (absent_over_time with model_name=~"llama|qwen") stayed silent and named no model."""
    th = Thresholds()
    out = alerts.write(tmp_path, th, None, list(models), GpuRuleOptions(0.92, "t", mode="none"))
    rule = _rule(out, "VllmMetricsAbsent")
    series = [_series("vllm:num_requests_running", {"model_name": "llama", "engine": "0"}, "1x30"),
              _series("vllm:num_requests_running", {"model_name": "qwen", "engine": "0"}, "1x10 _x20")]
    fired = {"exp_labels": {"severity": "critical", "model_name": "qwen"},
             "exp_annotations": {"summary": "No vLLM metrics for qwen", "description": rule["annotations"]["description"]}}
    tests = [{"eval_time": "8m", "alertname": "VllmMetricsAbsent", "exp_alerts": []},
             {"eval_time": "20m", "alertname": "VllmMetricsAbsent", "exp_alerts": [fired]}]
    _run(tmp_path, promtool, out.rules_path, series, tests)


def test_metrics_absent_without_any_vllm_names_no_model(tmp_path, promtool):  # noqa: F811
    out = alerts.write(tmp_path, Thresholds(), None, [], GpuRuleOptions(0.92, "t", mode="none"))
    rule = _rule(out, "VllmMetricsAbsent")
    series = [_series("up", {"job": "x"}, "1x20")]
    fired = {"exp_labels": {"severity": "critical"}, "exp_annotations": {
        "summary": "No vLLM metrics for any model (none scraped)", "description": rule["annotations"]["description"]}}
    _run(tmp_path, promtool, out.rules_path, series,
         [{"eval_time": "15m", "alertname": "VllmMetricsAbsent", "exp_alerts": [fired]}])


def test_dashboard_has_gpu_panels_on_dcgm_default_counters(tmp_path):
    out = alerts.write(tmp_path, Thresholds(), None, [], GpuRuleOptions(0.92, "t", selector='namespace="serving"'))
    dash = json.loads(out.dashboard_path.read_text())
    titles = [p["title"] for p in dash["panels"]]
    assert "GPU memory used vs vLLM budget (0.92 of total)" in titles and "GPU utilisation" in titles
    assert alerts.queried_dcgm_metrics(dash) == {dcgm.FB_USED, dcgm.FB_FREE, dcgm.GPU_UTIL}
    used = next(p for p in dash["panels"] if p["title"].startswith("GPU memory used"))
    assert used["targets"][1]["expr"] == ('0.92 * (DCGM_FI_DEV_FB_USED{namespace="serving"} + '
                                          'DCGM_FI_DEV_FB_FREE{namespace="serving"})')
    assert used["fieldConfig"]["defaults"]["unit"] == "decmbytes"  # DCGM reports MiB


def test_dcgm_names_are_the_exporters_default_counters():
    """The names against dcgm-exporter's etc/default-counters.csv (main, d5e5f51; FB_RESERVED since 4.3.1-4.4.0):
    the fixture tests/fixtures/dcgm/metrics.txt is a recorded scrape of those counters."""
    text = (ROOT / "tests" / "fixtures" / "dcgm" / "metrics.txt").read_text()
    for name in dcgm.NAMES:
        assert f"# TYPE {name} gauge" in text


@pytest.mark.parametrize("content, msg", [
    ('{"flags": {}}', "no flags.gpu_memory_utilization"),
    ('{"flags": {"gpu_memory_utilization": 1.5}}', "expected a number in (0, 1]"),
    ('{"flags": ', "not valid JSON"),
    ("gpu-memory-utilization: [0.9\n", "not valid YAML"),
    ("model: x\n", "no gpu-memory-utilization"),
])
def test_plan_file_errors_name_the_file(tmp_path, content, msg):
    f = tmp_path / "p.cfg"
    f.write_text(content)
    with pytest.raises(UsageError) as e:
        dcgm.resolve_utilization(None, str(f), None)
    assert msg in str(e.value) and str(f) in str(e.value)


def test_serve_config_and_version_default():
    assert dcgm.resolve_utilization(None, None, "0.19")[0] == 0.90
    assert dcgm.resolve_utilization(None, None, "0.20") == (0.92, "vLLM 0.20's default")
    assert dcgm.resolve_utilization(0.8, None, None) == (0.8, "--gpu-memory-utilization")


def test_cli_gpu_options(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text('model: "m"\ngpu-memory-utilization: 0.88\n')
    p = run_cli("alerts", "-o", str(tmp_path / "o"), "--plan", str(cfg), "--gpu-join", "kubernetes",
                "--gpu-memory-rule", "both", "--format", "json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["gpu_memory"]["gpu_memory_utilization"] == 0.88 and d["gpu_memory"]["join"] == "kubernetes"
    assert {"GpuMemoryAboveVllmBudget", "GpuMemoryHeadroomLow", "GpuMemoryAboveThreshold"} <= set(d["alerts"])
    p = run_cli("alerts", "-o", str(tmp_path / "o2"), "--gpu-join", "swarm")
    assert p.returncode == 2 and "--gpu-join" in p.stderr
    p = run_cli("alerts", "-o", str(tmp_path / "o3"), "--gpu-memory-rule", "none", "--format", "json")
    assert p.returncode == 0 and not any(a.startswith("Gpu") for a in json.loads(p.stdout)["alerts"])
