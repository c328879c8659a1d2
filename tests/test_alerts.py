"""`kvplan alerts`: the rules pass the real `promtool check rules`, fire (and stay quiet) on
synthetic series under `promtool test rules`, use each vLLM version's metric names, and the
dashboard queries only metrics a real vLLM (CPU build 0.32) exports."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kvplan.bench.metrics import parse_metrics
from kvplan.errors import UsageError
from kvplan.ops import alerts
from kvplan.ops.thresholds import Thresholds, parse_thresholds
from test_bench_support import run_cli

ROOT = Path(__file__).resolve().parents[1]
METRICS = ROOT / "tests" / "fixtures" / "vllm_cpu" / "metrics.txt"


@pytest.fixture(scope="session")
def promtool() -> str:
    """The real promtool; scripts/promtool-env installs it when missing (idempotent, no-op here
    when present). Fails, never skips: an unchecked rule file is what this suite exists to stop."""
    if shutil.which("promtool") is None:
        p = subprocess.run(["bash", str(ROOT / "scripts" / "promtool-env")], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"scripts/promtool-env failed:\n{p.stdout}\n{p.stderr}"
    path = shutil.which("promtool")
    assert path, "promtool not on PATH after scripts/promtool-env"
    return path


@pytest.mark.parametrize("version", [None, "0.32", "0.15", "0.11", "0.10", "0.8.5", "0.6.4"])
@pytest.mark.parametrize("models", [(), ("meta-llama/Llama-3.1-8B-Instruct",), ('we"ird model', "a|b.c", "tiny")])
def test_promtool_accepts_rules(tmp_path, promtool, version, models):
    out = alerts.write(tmp_path, Thresholds(), version, models)
    p = subprocess.run([promtool, "check", "rules", str(out.rules_path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS: 8 rules found" in p.stdout  # 6 vLLM rules + 2 GPU-memory (budget) rules
    # and safe YAML reads back exactly the expressions we generated
    doc = yaml.safe_load(out.rules_path.read_text())
    exprs = [r["expr"] for r in doc["groups"][0]["rules"]]
    assert exprs == [r.expr for r in alerts.rules(Thresholds(), alerts.metric_names(version), models)]


def test_promtool_rejects_a_broken_rule(tmp_path, promtool):
    """The check above can fail: promtool does reject a bad expression."""
    text = alerts.rules_yaml(Thresholds(), alerts.metric_names(None)).replace("> 0.9", "> > 0.9", 1)
    bad = tmp_path / "bad.yml"
    bad.write_text(text)
    p = subprocess.run([promtool, "check", "rules", str(bad)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0


def _series(name: str, labels: dict, values: str) -> dict:
    lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{lab}}}", "values": values}


def _fired(th, names, alert: str, summary: str) -> dict:
    rule = next(r for r in alerts.rules(th, names) if r.alert == alert)
    return {"exp_labels": {"severity": rule.severity, "model_name": "llama"},
            "exp_annotations": {"summary": summary, "description": rule.description}}


def test_rules_fire_on_synthetic_series(tmp_path, promtool):
    """promtool evaluates the rules: KV usage 95 % for 10 min fires for the watched model only,
    preemptions fire, a high E2E P99 fires, queued requests fire; values under threshold do not."""
    th = parse_thresholds("kv_cache_usage=0.9,waiting=10,e2e_p99=2s,for=5m,window=5m")
    out = alerts.write(tmp_path, th, "0.32", ["llama"])
    good = {"model_name": "llama", "engine": "0"}
    other = {"model_name": "other", "engine": "0"}
    # E2E: 10 requests/min, all between 5 and 10 s -> P99 ≈ 9.95 s > 2 s.
    e2e = [_series("vllm:e2e_request_latency_seconds_bucket", dict(good, le=le), vals)
           for le, vals in (("1.0", "0+0x20"), ("5.0", "0+0x20"), ("10.0", "0+10x20"), ("+Inf", "0+10x20"))]
    tests = {
        "rule_files": [str(out.rules_path)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                _series("vllm:kv_cache_usage_perc", good, "0.95x20"),
                _series("vllm:kv_cache_usage_perc", other, "0.99x20"),  # not watched
                _series("vllm:num_requests_waiting", good, "25x20"),
                _series("vllm:num_requests_running", good, "4x20"),
                _series("vllm:num_preemptions_total", good, "0 0 0 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3"),
                *e2e,
            ],
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "VllmKvCacheNearlyFull", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "model_name": "llama"},
                    "exp_annotations": {"summary": "vLLM KV cache above 95% on llama",
                                        "description": alerts.rules(th, out.names)[0].description}}]},
                {"eval_time": "3m", "alertname": "VllmKvCacheNearlyFull", "exp_alerts": []},  # not yet 5 min
                {"eval_time": "10m", "alertname": "VllmRequestsWaiting",
                 "exp_alerts": [_fired(th, out.names, "VllmRequestsWaiting", "25 requests waiting on llama")]},
                {"eval_time": "5m", "alertname": "VllmPreemptions",
                 "exp_alerts": [_fired(th, out.names, "VllmPreemptions", "vLLM preempted 3 requests on llama")]},
                {"eval_time": "19m", "alertname": "VllmPreemptions", "exp_alerts": []},  # window passed
                {"eval_time": "15m", "alertname": "VllmE2eLatencyP99High",
                 "exp_alerts": [_fired(th, out.names, "VllmE2eLatencyP99High", "E2E latency P99 9.95s on llama")]},
                {"eval_time": "15m", "alertname": "VllmTtftP99High", "exp_alerts": []},  # no TTFT data
                {"eval_time": "10m", "alertname": "VllmMetricsAbsent", "exp_alerts": []},
            ],
        }],
    }
    path = tmp_path / "tests.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    p = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr


def test_rules_stay_quiet_under_threshold_and_absent_fires(tmp_path, promtool):
    th = Thresholds()
    out = alerts.write(tmp_path, th, None, ["llama"])
    good = {"model_name": "llama", "engine": "0"}
    tests = {
        "rule_files": [str(out.rules_path)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                _series("vllm:kv_cache_usage_perc", good, "0.5x20"),
                _series("vllm:num_requests_waiting", good, "10x20"),  # equal to the threshold: not above
                _series("vllm:num_preemptions_total", good, "7x20"),  # constant: no new preemption
                _series("vllm:num_requests_running", {"model_name": "other", "engine": "0"}, "1x20"),
            ],
            "alert_rule_test": [
                {"eval_time": "15m", "alertname": a, "exp_alerts": []}
                for a in ("VllmKvCacheNearlyFull", "VllmRequestsWaiting", "VllmPreemptions")
            ] + [{"eval_time": "15m", "alertname": "VllmMetricsAbsent",
                  "exp_alerts": [{"exp_labels": {"severity": "critical", "model_name": "llama"}, "exp_annotations": {
                      "summary": "No vLLM metrics for llama", "description": alerts.rules(th, out.names)[-1].description}}]}],
        }],
    }
    path = tmp_path / "tests.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    p = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr


def _exported() -> set[str]:
    return parse_metrics(METRICS.read_text()).names()


@pytest.mark.parametrize("version", [None, "0.32", "0.15", "0.11"])
def test_dashboard_queries_only_metrics_vllm_exports(tmp_path, version):
    out = alerts.write(tmp_path, Thresholds(), version, ["x"])
    dash = json.loads(out.dashboard_path.read_text())
    queried = alerts.queried_metrics(dash)
    assert len(queried) >= 10
    assert queried - _exported() == set()
    # and the rules too
    exprs = " ".join(r.expr for r in alerts.rules(Thresholds(), out.names))
    assert set(alerts._METRIC.findall(exprs)) - _exported() == set()


def test_old_version_uses_old_names_which_the_new_server_lacks(tmp_path):
    """The check above can fail: 0.10's names are not exported by 0.32."""
    out = alerts.write(tmp_path, Thresholds(), "0.10")
    queried = alerts.queried_metrics(json.loads(out.dashboard_path.read_text()))
    assert {"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_hits_total",
            "vllm:time_per_output_token_seconds_bucket"} <= queried
    assert queried - _exported() == {"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_hits_total",
                                     "vllm:gpu_prefix_cache_queries_total", "vllm:time_per_output_token_seconds_bucket"}
    v0 = alerts.metric_names("0.6.4")
    assert v0.prefix_cache_hits is None and not v0.has_engine_label


@pytest.mark.parametrize("version, kv, itl", [
    ("0.8.5", "vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"),
    ("0.10.2", "vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"),
    ("0.11.0", "vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds"),
    (None, "vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds"),
])
def test_metric_names_by_version(version, kv, itl):
    n = alerts.metric_names(version)
    assert (n.kv_cache_usage, n.itl) == (kv, itl)


def test_thresholds_reach_rules_and_dashboard(tmp_path):
    th = parse_thresholds("kv_cache_usage=85%,e2e_p99=1500ms,waiting=3,preemptions=5,for=2m,window=1m")
    assert (th.kv_cache_usage, th.e2e_p99, th.waiting, th.preemptions, th.for_seconds) == (0.85, 1.5, 3, 5, 120)
    out = alerts.write(tmp_path, th)
    doc = yaml.safe_load(out.rules_path.read_text())
    by = {r["alert"]: r for r in doc["groups"][0]["rules"]}
    assert by["VllmKvCacheNearlyFull"]["expr"].endswith("> 0.85") and by["VllmKvCacheNearlyFull"]["for"] == "2m"
    assert by["VllmE2eLatencyP99High"]["expr"].endswith("> 1.5")
    assert "[1m]" in by["VllmPreemptions"]["expr"] and by["VllmPreemptions"]["expr"].endswith("> 5")
    dash = json.loads(out.dashboard_path.read_text())
    kv = next(p for p in dash["panels"] if p["title"] == "KV-cache usage")
    assert kv["fieldConfig"]["defaults"]["thresholds"]["steps"][-1]["value"] == 0.85


@pytest.mark.parametrize("text, msg", [
    ("bogus=1", "unknown key"), ("waiting", "KEY=VALUE"), ("waiting=abc", "cannot read"),
    ("kv_cache_usage=1.5", "fraction"), ("waiting=-1", "negative"), ("e2e_p99=fast", "duration"),
    ("for=0s", "positive"), ("waiting=nan", "finite"),
])
def test_threshold_errors(text, msg):
    with pytest.raises(UsageError, match=msg):
        parse_thresholds(text)


def test_cli_writes_both_files_and_json(tmp_path):
    p = run_cli("alerts", "--output-dir", str(tmp_path / "out"), "--vllm-version", "0.11", "--format", "json",
                "--model-name", "m1", "--thresholds", "waiting=4")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["vllm_version"] == "0.11" and d["thresholds"]["waiting"] == 4
    assert (tmp_path / "out" / "kvplan-alerts.yml").exists() and (tmp_path / "out" / "kvplan-dashboard.json").exists()
    assert 'model_name=~\\"m1\\"' in (tmp_path / "out" / "kvplan-alerts.yml").read_text()


@pytest.mark.parametrize("args, msg", [
    (["--thresholds", "nope=1"], "unknown key"),
    (["--vllm-version", "zz"], "--vllm-version"),
    (["--format", "xml"], "--format"),
])
def test_cli_usage_errors_exit_2(tmp_path, args, msg):
    p = run_cli("alerts", "--output-dir", str(tmp_path), *args)
    assert p.returncode == 2 and msg in p.stderr


def test_cli_unwritable_dir_exits_2(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    p = run_cli("alerts", "--output-dir", str(f / "sub"))
    assert p.returncode == 2 and "--output-dir" in p.stderr
