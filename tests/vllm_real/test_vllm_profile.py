"""`kvplan profile` against the real vLLM CPU server: the KV pool it measures is the plan's, to
the block and the token, and a running request holds ceil(tokens / block_size) blocks, not the
max_model_len / block_size a static reservation would take. Once on the harness's shared server
(--url), once launching its own (--launch), and once against a plan that does not match."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.vllm_server import env
from tests.vllm_server.fixtures import SHARED

pytestmark = pytest.mark.vllm


def plan_flags(model_dir, kv: str = "1GiB") -> list[str]:
    """How `kvplan plan` describes the harness's servers (tests/vllm_real/test_vllm_plan.py)."""
    return ["--model", str(model_dir), "--device", "cpu", "--dtype", "float32", "--vllm-version", "0.32",
            "--max-model-len", SHARED.arg("--max-model-len"), "--kv-cache-memory", kv]


def kvplan_profile(*args: str, timeout: float) -> tuple[int, dict, str]:
    out = subprocess.run([sys.executable, "-m", "kvplan.cli.main", "profile", *args, "--format", "json"],
                         capture_output=True, text=True, timeout=timeout, env=dict(os.environ, KVPLAN_OFFLINE="1"))
    data = json.loads(out.stdout) if out.stdout.strip() else {}
    return out.returncode, data, out.stderr


def _checks(d: dict) -> dict:
    return {c["id"]: c for c in d["checks"]}


def _skip_if_not_caught(checks: dict, ids) -> None:
    """A measurement the product could not make on this host (its scrapes missed the requests it
    sent: it says "too fast to catch" and skips the check) measured nothing: the test skips, naming
    it, instead of judging. Every check it did measure is still asserted by the caller."""
    missed = {i: checks[i]["evidence"] for i in ids
              if checks[i]["status"] == "skipped" and "too fast to catch" in str(checks[i]["evidence"])}
    if missed:
        pytest.skip(f"the host was too slow for the scrapes to catch the requests: {missed}")


def _statuses(d: dict) -> dict:
    """Each check's status and evidence: what a failed run's message shows."""
    return {c["id"]: (c["status"], c.get("evidence")) for c in d.get("checks", ())}


def _assert_exit_0(rc: int, d: dict, err: str) -> None:
    """Exit 0, or a failure naming the failed checks first, in full (an assertion's repr is cut at
    a few hundred characters: a CI run's message ended before the check that failed), then each
    step's errors and the tail of stderr."""
    if rc == 0:
        return
    failed = {i: ev for i, (status, ev) in _statuses(d).items() if status == "fail"}
    steps = {s["name"]: s.get("errors") for s in d.get("steps", ()) if s.get("errors")}
    pytest.fail(f"kvplan profile exited {rc}; failed checks: {failed}; step errors: {steps}; "
                f"stderr tail: {err[-1500:]}", pytrace=False)


def assert_matches_plan(d: dict) -> None:
    checks = _checks(d)
    assert d["ok"], checks
    planned = d["planned"]
    # the KV pool, exactly: blocks (vllm:cache_config_info) and tokens (the start-up log's capacity line)
    assert checks["kv_blocks"]["status"] == "pass"
    assert checks["kv_blocks"]["measured"] == planned["num_gpu_blocks"] == d["server"]["num_gpu_blocks"] == 4096
    assert checks["kv_tokens"]["status"] == "pass"
    assert checks["kv_tokens"]["measured"] == planned["kv_cache_tokens"] == 524288
    assert d["startup"]["kv_line"] == planned["log_lines"][0]
    block = d["server"]["block_size"]
    _skip_if_not_caught(checks, ("kv_per_request_short", "kv_per_request_long", "kv_per_request_burst", "concurrency"))
    steps = {s["name"]: s for s in d["steps"]}
    for name in ("short", "long", "burst"):
        st = steps[name]
        assert st["completed"] == st["requests"] and not st["errors"]
        per_request = -(-(st["prompt_tokens"] + st["max_tokens"] - 1) // block)  # ceil(tokens / block_size)
        assert st["expected_kv_blocks_per_request"] == per_request
        assert st["measured_kv_blocks"] == per_request * st["requests"], st
        assert checks[f"kv_per_request_{name}"]["status"] == "pass"
    # a short request holds 1 block, not the 16 that max_model_len (2048 / 128) would reserve
    assert steps["short"]["measured_kv_blocks"] == 1 and steps["short"]["max_model_len_blocks"] == 16
    assert steps["long"]["measured_kv_blocks"] == 16
    assert steps["burst"]["requests"] == 64 and checks["concurrency"]["measured"] == 64
    assert checks["peak_gpu_memory"]["status"] == "skipped" and checks["peak_gpu_memory"]["measured"] == "n/a"


def test_profile_url_matches_the_plan(tiny_llama_server, tiny_llama_model):
    rc, d, err = kvplan_profile("--url", tiny_llama_server.base_url, "--log", str(tiny_llama_server.log_path),
                                *plan_flags(tiny_llama_model.path), timeout=240)
    _assert_exit_0(rc, d, err)
    assert d["model"] == "kvplan-tiny" and d["vllm_version"] == env.check_vllm_env()
    assert_matches_plan(d)


def test_profile_url_against_a_plan_that_does_not_match(tiny_llama_server, tiny_llama_model):
    # the server has 1 GiB of KV cache; this plan says 2 GiB: blocks and tokens fail, exit code 1
    rc, d, err = kvplan_profile("--url", tiny_llama_server.base_url, "--log", str(tiny_llama_server.log_path),
                                "--burst", "4", *plan_flags(tiny_llama_model.path, kv="2GiB"), timeout=240)
    assert rc == 1, err
    checks = _checks(d)
    assert checks["kv_blocks"]["status"] == "fail"
    assert (checks["kv_blocks"]["measured"], checks["kv_blocks"]["planned"]) == (4096, 8192)
    assert checks["kv_tokens"]["status"] == "fail"
    _skip_if_not_caught(checks, ("kv_per_request_short",))
    assert checks["kv_per_request_short"]["status"] == "pass"  # the per-request rule holds whatever the pool


def test_profile_launch_starts_measures_and_stops(tiny_llama_model, tmp_path):
    log = tmp_path / "vllm.log"
    rc, d, err = kvplan_profile("--launch", "--vllm-bin", str(env.vllm_python()), "--log", str(log),
                                "--startup-timeout", "480", *plan_flags(tiny_llama_model.path), "--enforce-eager",
                                timeout=600)
    _assert_exit_0(rc, d, err)
    assert_matches_plan(d)
    launched = d["launched"]
    assert launched["log_path"] == str(log) and "KV cache size" in log.read_text(errors="replace")
    assert launched["argv"][launched["argv"].index("--host") + 1] == "127.0.0.1"
    assert d["base_url"].startswith("http://127.0.0.1:")
    assert not Path(f"/proc/{launched['pid']}").exists() or \
        Path(f"/proc/{launched['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_profile_hybrid_model_pool_matches_and_per_request_rows_are_skipped(gemma3_server, gemma3_model):
    # Gemma-3 style sliding-window + full attention: two KV-cache groups share one block pool; the pool
    # is still the plan's exactly, but a request holds blocks in both groups (the sliding group frees
    # blocks that leave the window), so ceil(tokens / block_size) is not the per-request rule there.
    rc, d, err = kvplan_profile("--url", gemma3_server.base_url, "--log", str(gemma3_server.log_path), "--burst", "8",
                                *plan_flags(gemma3_model.path), timeout=240)
    _assert_exit_0(rc, d, err)
    checks = _checks(d)
    assert checks["kv_blocks"]["status"] == "pass" and checks["kv_blocks"]["measured"] == 8192
    assert checks["kv_tokens"]["status"] == "pass" and checks["kv_tokens"]["measured"] == 508400
    for name in ("short", "long", "burst"):
        row = checks[f"kv_per_request_{name}"]
        assert row["status"] == "skipped" and "hybrid model (2 KV-cache groups)" in row["evidence"]
    steps = {s["name"]: s for s in d["steps"]}
    missed = [n for n, st in steps.items() if st["measured_kv_blocks"] is None]
    if missed:  # the rows above hold either way; the block counts below need a scrape that caught them
        pytest.skip(f"the host was too slow for the scrapes to catch the {missed} step(s)")
    for name in ("short", "long", "burst"):
        assert checks[f"kv_per_request_{name}"]["measured"] is not None
    per_group = -(-(steps["short"]["prompt_tokens"] + steps["short"]["max_tokens"] - 1) // 128)
    assert steps["short"]["measured_kv_blocks"] == 2 * per_group  # one block in each group
