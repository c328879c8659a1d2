"""`kvplan alerts --speculative-decoding --lora`: the draft-acceptance and LoRA-waiting rules pass the
real `promtool check rules` and fire (or stay quiet) under `promtool test rules` on series named as
vLLM exposes them (kvplan.memory.vllm_metrics: spec_decode_* counters, lora_requests_info)."""
from __future__ import annotations

import subprocess

import yaml

from kvplan.ops import alerts
from kvplan.ops.thresholds import Thresholds, parse_thresholds
from test_alerts import promtool  # noqa: F401  (fixture: the real promtool)


def _series(name: str, labels: dict, values: str) -> dict:
    return {"series": name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "values": values}


def test_serve_flag_rules_pass_promtool_for_v0_and_v1_names(tmp_path, promtool):  # noqa: F811
    for version in ("0.6.4", "0.19"):
        out = alerts.write(tmp_path / version, Thresholds(), version, (), speculative=True, lora=True)
        p = subprocess.run([promtool, "check", "rules", str(out.rules_path)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        assert {"VllmSpecDecodeAcceptanceLow", "VllmLoraAdaptersWaiting"} <= set(out.alerts)
    plain = alerts.write(tmp_path / "plain", Thresholds(), "0.19")
    assert "VllmSpecDecodeAcceptanceLow" not in plain.alerts


def test_acceptance_and_lora_rules_fire_on_synthetic_series(tmp_path, promtool):  # noqa: F811
    th = parse_thresholds("spec_acceptance=0.5,for=5m,window=5m")
    out = alerts.write(tmp_path, th, "0.19", ["llama"], speculative=True, lora=True)
    low = {"model_name": "llama", "engine": "0"}
    rules = {r.alert: r for r in alerts.serve_flag_rules(th, out.names, ["llama"], True, True)}
    tests = {
        "rule_files": [str(out.rules_path)], "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                # 300 draft tokens a minute, 60 accepted: 20 % acceptance
                _series("vllm:spec_decode_num_draft_tokens_total", low, "0+300x20"),
                _series("vllm:spec_decode_num_accepted_tokens_total", low, "0+60x20"),
                _series("vllm:num_requests_running", low, "4x20"),
                _series("vllm:lora_requests_info", dict(low, max_lora="1", running_lora_adapters="a",
                                                        waiting_lora_adapters="b,c"), "1x20"),
            ],
            "alert_rule_test": [
                {"eval_time": "15m", "alertname": "VllmSpecDecodeAcceptanceLow", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "model_name": "llama"},
                    "exp_annotations": {"summary": "Draft acceptance 20% on llama",
                                        "description": rules["VllmSpecDecodeAcceptanceLow"].description}}]},
                {"eval_time": "15m", "alertname": "VllmLoraAdaptersWaiting", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "model_name": "llama"},
                    "exp_annotations": {"summary": "LoRA adapters waiting for a GPU slot on llama",
                                        "description": rules["VllmLoraAdaptersWaiting"].description}}]},
            ],
        }, {
            "interval": "1m",
            "input_series": [  # 80 % acceptance, no adapter waiting: quiet
                _series("vllm:spec_decode_num_draft_tokens_total", low, "0+300x20"),
                _series("vllm:spec_decode_num_accepted_tokens_total", low, "0+240x20"),
                _series("vllm:lora_requests_info", dict(low, max_lora="1", running_lora_adapters="a",
                                                        waiting_lora_adapters=""), "1x20"),
            ],
            "alert_rule_test": [
                {"eval_time": "15m", "alertname": "VllmSpecDecodeAcceptanceLow", "exp_alerts": []},
                {"eval_time": "15m", "alertname": "VllmLoraAdaptersWaiting", "exp_alerts": []},
            ],
        }],
    }
    path = tmp_path / "tests.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    p = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr


def test_dashboard_panels_use_the_versions_names():
    names = alerts.metric_names("0.19")
    dash = alerts.dashboard(Thresholds(), names, speculative=True, lora=True)
    queried = alerts.queried_metrics(dash)
    assert {"vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total",
            "vllm:lora_requests_info"} <= queried
    v0 = alerts.dashboard(Thresholds(), alerts.metric_names("0.6.4"), speculative=True)
    assert "vllm:spec_decode_num_drafts_total" not in alerts.queried_metrics(v0)  # V1 only
