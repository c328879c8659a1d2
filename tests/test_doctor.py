"""`kvplan doctor` on real logs: the public failure logs of tests/fixtures/doctor_logs (sources in
index.json), the failing start-ups among tests/fixtures/vllm_logs and vLLM's CPU build; the
healthy logs give no error finding. Asserts ids, numbers and the suggested flag values."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.errors import UsageError
from kvplan.ops.doctor import FINDING_IDS, diagnose, read_source
from kvplan.ops.doctor.model import COSTS
from test_bench_support import run_cli

FIX = Path(__file__).parent / "fixtures"
DOCTOR = FIX / "doctor_logs"
INDEX = json.loads((DOCTOR / "index.json").read_text())


def _diag(path: Path):
    return diagnose([read_source(str(path))])


def test_index_lists_every_log_with_a_source():
    files = sorted(p.name for p in DOCTOR.glob("*.log"))
    assert files == sorted(e["file"] for e in INDEX)
    assert all(e["source_url"].startswith("https://github.com/") for e in INDEX)


@pytest.mark.parametrize("entry", INDEX, ids=lambda e: e["file"][:2])
def test_public_log_diagnosis(entry):
    r = _diag(DOCTOR / entry["file"])
    ids = [f.id for f in r.findings]
    assert ids == [entry["expected_finding"]], ids
    f = r.findings[0]
    nums = dict(f.numbers)
    for k, v in entry["expected_numbers"].items():
        assert nums[k] == v, (k, nums)
    if entry["expected_first_fix"]:
        assert f.fixes[0].change == entry["expected_first_fix"]
    # no excerpt names a catalog model: every predicted number says it is the log's arithmetic
    for x in f.fixes:
        assert x.basis == "vLLM rule" or x.basis.startswith("log arithmetic ("), x
        assert x.to_dict()["basis"] == x.basis
    assert f.evidence and all(e.file.endswith(entry["file"]) and e.line >= 1 for e in f.evidence)
    # evidence quotes the file's own line
    lines = (DOCTOR / entry["file"]).read_text().splitlines()
    for e in f.evidence:
        assert lines[e.line - 1].rstrip() == e.text


# vllm_logs: (file prefix, max_model_len, vLLM's estimate or KV tokens, first fix)
KV_TOO_SMALL = [
    ("02-", 29000, 23648, "--max-model-len 23648"),
    ("05-", 8192, 1280, "--max-model-len 1280"),
    ("09-", 131072, 81536, "--max-model-len 81536"),
    ("18-", 221000, 122080, "--max-model-len 122080"),
    ("19-", 131072, 49368, "--max-model-len 49360"),
    ("21-", 262144, 34736, "--max-model-len 34736"),
    ("22-", 262144, 205728, "--max-model-len 205728"),
    ("23-", 262144, 235296, "--max-model-len 235296"),
]


@pytest.mark.parametrize("prefix, max_len, fit, length_fix", KV_TOO_SMALL)
def test_kv_too_small_public_logs(prefix, max_len, fit, length_fix):
    path = next((FIX / "vllm_logs").glob(prefix + "*.log"))
    r = _diag(path)
    f = next(f for f in r.findings if f.id == "kv_cache_too_small_for_max_model_len")
    nums = dict(f.numbers)
    assert nums["max_model_len"] == max_len
    assert nums.get("estimated_max_model_len", nums.get("kv_cache_tokens")) == fit
    # The largest length that starts is offered, but never as free: vLLM then refuses every longer
    # request, so it costs capacity and names the lengths given up. A fix that keeps the asked
    # length at no cost (a higher utilisation, where the log leaves room) ranks before it, as in
    # vLLM's own message ("Try increasing `gpu_memory_utilization` or decreasing `max_model_len`").
    by_change = {x.change: x for x in f.fixes}
    shorter = by_change[length_fix]
    assert shorter.cost == "capacity" and f"max_model_len {max_len:,} → " in shorter.price, shorter
    assert "longer requests are refused" in shorter.price
    assert [x.cost for x in f.fixes] == sorted((x.cost for x in f.fixes), key=COSTS.index)
    assert f.fixes[0].cost == "free" or f.fixes[0] is shorter, f.fixes[0]
    assert not r.healthy


def test_fp8_fix_predicts_the_fit():
    """18: 221,000 tokens need 10.12 GiB, 5.59 GiB hold 122,080; fp8 doubles that to 244,160 ≥ 221,000."""
    r = _diag(next((FIX / "vllm_logs").glob("18-*.log")))
    fp8 = next(x for f in r.findings for x in f.fixes if x.change == "--kv-cache-dtype fp8")
    assert dict(fp8.numbers)["kv_tokens"] == 244160
    assert "max_model_len 221,000 fits with 1.10x concurrency" in fp8.effect


def test_utilisation_fix_uses_the_gpu_total():
    """02 (V0, RTX 3090): 2.89 GiB hold 23,648 tokens; 0.90 -> 0.95 of 23.58 GiB adds 1.18 GiB,
    so 23,648 × (2.89 + 1.179) / 2.89 = 33,295 tokens ≥ 29,000."""
    r = _diag(next((FIX / "vllm_logs").glob("02-*.log")))
    util = next(x for x in r.findings[0].fixes if x.change == "--gpu-memory-utilization 0.95")
    assert dict(util.numbers) == {"extra_kv_gib": 1.18, "kv_tokens": 33295}
    assert "max_model_len 29,000 fits" in util.effect


def test_negative_kv_is_no_memory_for_cache_blocks():
    r = _diag(next((FIX / "vllm_logs").glob("07-*.log")))
    f = r.findings[0]
    assert f.id == "no_memory_for_cache_blocks"
    assert dict(f.numbers)["kv_available_gib"] == -1.05
    # 0.70 + (1.05 + 1 GiB) / 8 GiB = 0.956 -> 0.96
    assert f.fixes[0].change == "--gpu-memory-utilization 0.96"
    r16 = _diag(next((FIX / "vllm_logs").glob("16-*.log")))
    assert [f.id for f in r16.findings] == ["no_memory_for_cache_blocks"]


def test_cpu_build_failed_startup():
    r = _diag(FIX / "vllm_cpu" / "failed_startup_kv_too_small.log")
    f = r.findings[0]
    assert f.id == "kv_cache_too_small_for_max_model_len"
    assert dict(f.numbers)["estimated_max_model_len"] == 384
    changes = [x.change for x in f.fixes]
    # it set the KV size explicitly: the larger size keeps the asked length at no cost and comes
    # first; the largest length that starts costs capacity (longer requests are refused)
    assert changes[:2] == ["--kv-cache-memory-bytes 5592406", "--max-model-len 384"]
    assert [x.cost for x in f.fixes[:2]] == ["free", "capacity"]
    assert r.runs[0].vllm_version == "0.32.0"


@pytest.mark.parametrize("name", ["01-", "03-", "04-", "06-", "08-", "10-", "13-", "15-", "17-", "20-", "24-"])
def test_healthy_public_logs_have_no_error(name):
    r = _diag(next((FIX / "vllm_logs").glob(name + "*.log")))
    assert r.healthy, [f.id for f in r.findings]


@pytest.mark.parametrize("name", ["healthy_startup.log", "hybrid_gemma3_startup.log"])
def test_healthy_cpu_logs(name):
    r = _diag(FIX / "vllm_cpu" / name)
    assert r.findings == ()
    assert r.runs[0].kv_cache_tokens and r.runs[0].vllm_version == "0.32.0"


def test_several_runs_ansi_and_prefixes_in_one_file():
    """Two real runs appended, behind kubectl-style timestamps and ANSI colour: each run keeps its
    own figures and the failure is attributed to the second run's lines."""
    ok = (FIX / "vllm_cpu" / "healthy_startup.log").read_text().splitlines()
    bad = (FIX / "vllm_cpu" / "failed_startup_kv_too_small.log").read_text().splitlines()
    lines = [f"2026-11-30T07:16:19.123456789Z \x1b[32m{ln}\x1b[0m" for ln in ok + bad]
    r = diagnose([("k8s.log", "\n".join(lines))])
    assert len(r.runs) == 2
    assert r.runs[0].kv_cache_tokens == 524288 and r.runs[1].kv_cache_tokens is None
    f = r.findings[0]
    assert f.id == "kv_cache_too_small_for_max_model_len"
    assert all(e.line > len(ok) for e in f.evidence)
    assert "\x1b" not in f.evidence[0].text


def test_every_finding_id_is_documented():
    doc = (Path(__file__).parents[1] / "docs" / "ops.md").read_text()
    for fid in FINDING_IDS:
        assert f"`{fid}`" in doc
    for required in ("kv_cache_too_small_for_max_model_len", "no_memory_for_cache_blocks", "insufficient_free_memory",
                     "cuda_oom_runtime", "cuda_oom_cudagraph", "preemption", "request_too_long", "tp_not_divisible"):
        assert required in FINDING_IDS


def test_collect_next_when_the_log_says_nothing():
    r = diagnose([("x.log", "hello\nworld\n")])
    assert r.findings == () and r.collect_next


def test_read_source_errors(tmp_path):
    with pytest.raises(UsageError, match="file not found"):
        read_source(str(tmp_path / "nope.log"))
    with pytest.raises(UsageError, match="directory"):
        read_source(str(tmp_path))


def test_cli_json_markdown_table_and_exit_codes():
    p = run_cli("doctor", str(DOCTOR / "01-free-memory-v1-pytorch-175666.log"), "--format", "json")
    assert p.returncode == 1, p.stderr
    d = json.loads(p.stdout)
    f = d["findings"][0]
    assert f["id"] == "insufficient_free_memory"
    assert f["evidence"][0]["line"] == 1 and f["evidence"][0]["file"].endswith(".log")
    assert f["fixes"][0]["change"] == "--gpu-memory-utilization 0.88" and "effect" in f["fixes"][0]
    p = run_cli("doctor", str(FIX / "vllm_cpu" / "healthy_startup.log"), "-f", "markdown")
    assert p.returncode == 0 and p.stdout.startswith("# kvplan doctor")
    p = run_cli("doctor", str(next((FIX / "vllm_logs").glob("18-*.log"))))
    assert p.returncode == 1 and "--max-model-len 122080" in p.stdout
    p = run_cli("doctor", "/nonexistent.log")
    assert p.returncode == 2 and "file not found" in p.stderr
    p = run_cli("doctor", str(DOCTOR / "13-no-blocks-bonito-22.log"), "--format", "xml")
    assert p.returncode == 2


def test_cli_reads_stdin():
    import subprocess
    import sys

    text = (DOCTOR / "04-tp-40-heads-tp3-vllm-596.log").read_text()
    p = subprocess.run([sys.executable, "-m", "kvplan.cli.main", "doctor", "-", "-f", "json"], input=text,
                       capture_output=True, text=True, timeout=60)
    d = json.loads(p.stdout)
    assert d["findings"][0]["id"] == "tp_not_divisible" and d["findings"][0]["evidence"][0]["file"] == "<stdin>"


def test_requests_give_coverage_and_a_p99_length():
    """With --requests (the bundled example log): each --max-model-len fix says which share of the
    requests fits, and a P99 length is suggested with its concurrency from vLLM's estimate."""
    log = Path(__file__).parents[1] / "src" / "kvplan" / "workload" / "examples" / "customer_service.jsonl.gz"
    p = run_cli("doctor", str(next((FIX / "vllm_logs").glob("19-*.log"))), "--requests", str(log), "-f", "json",
                timeout=120)
    assert p.returncode == 1, p.stderr
    fixes = json.loads(p.stdout)["findings"][0]["fixes"]
    assert "fits 100.0% of your requests" in fixes[0]["effect"]
    p99 = next(f for f in fixes if "covers P99" in f["effect"])
    length = p99["numbers"]["max_model_len"]
    assert length % 16 == 0 and length < 49360
    assert p99["numbers"]["max_concurrency"] == round(49368 / length, 2)
    assert "fits 99." in p99["effect"]


def test_a_metrics_scrape_is_read_as_a_scrape_not_a_log():
    """The real CPU-build scrape (0 preemptions): recognised as /metrics, no run, no finding."""
    r = _diag(FIX / "vllm_cpu" / "metrics.txt")
    assert r.runs == () and r.findings == ()
