"""`kvplan preflight --launch` end to end on the real vLLM CPU server (the harness's tiny Llama,
float32): kvplan starts `vllm serve` with the plan's flags, profiles it, load-tests it at target
QPS x 1.5 with a request log's real prompts, stops it by PID, and gives a verdict.

* a sound configuration (1 GiB of KV cache, short prompts, 1 req/s) is GO;
* a KV cache that cannot hold the traffic (160 blocks of 32 tokens against ~1,500-token requests
  arriving faster than they finish) is NO-GO: vLLM preempts, load_preemptions fails and its fix
  caps --max-num-seqs at what the cache holds; plan_concurrency predicted it;
* a KV cache too small for one max_model_len request is NO-GO without launching anything: the
  plan predicts vLLM's refusal and the fix is the largest max_model_len that fits.

Bounded: 20 s load tests at <= 1.5 req/s; the kvplan process gets SIGINT then SIGKILL if it
overruns, and every vLLM process it started must be gone afterwards (checked by PID).
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.vllm_server import env
from verdict_helpers import client_note, tolerate_client_bound

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()  # ~1 token each
RUN_TIMEOUT_S = 900  # start-up (30-90 s on the shared machine) + profile + 20 s load + drain


def _log(path: Path, n: int, words: tuple[int, int], max_tokens: int, seed: int) -> str:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(*words)))
            f.write(json.dumps({"model": "tiny", "messages": [{"role": "user", "content": text}],
                                "max_tokens": max_tokens}) + "\n")
    return str(path)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def preflight(model_dir: Path, out: Path, *flags: str) -> tuple[int, dict, str]:
    argv = [sys.executable, "-m", "kvplan.cli.main", "preflight", "--model", str(model_dir), "--device", "cpu",
            "--dtype", "float32", "--enforce-eager", "--vllm-version", "0.32", "--launch",
            "--vllm-bin", str(env.vllm_python()), "--startup-timeout", "300s", "--output-dir", str(out),
            "--format", "json", *flags]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env=dict(os.environ, KVPLAN_OFFLINE="1"))
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # kvplan stops its vLLM (context manager / atexit) on Ctrl-C
        try:
            stdout, stderr = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        pytest.fail(f"kvplan preflight did not finish in {RUN_TIMEOUT_S} s:\n{stderr[-3000:]}")
    assert proc.returncode in (0, 1), stderr[-3000:]
    d = json.loads(stdout)
    server = d["sections"].get("server")
    if server:  # every process of the vLLM kvplan launched is gone
        assert [p for p in server["pids_seen"] if _alive(p)] == [], server
        assert server["argv"][server["argv"].index("--host") + 1] == "127.0.0.1"
    return proc.returncode, d, stderr


def _checks(d: dict) -> dict:
    return {c["id"]: c for c in d["checks"]}


def test_sound_configuration_is_go(tiny_llama_model, tmp_path):
    log = _log(tmp_path / "short.jsonl", 60, (40, 150), 32, seed=1)
    rc, d, err = preflight(tiny_llama_model.path, tmp_path / "out", "--max-model-len", "2048", "--kv-cache-memory",
                           "1GiB", "--requests", log, "--target-qps", "1", "--duration", "20s",
                           "--slo", "e2e_p99=30s,error_rate=0")
    checks = _checks(d)
    statuses = {k: c["status"] for k, c in checks.items()}
    problems = {k: c["evidence"] for k, c in checks.items() if c["status"] in ("fail", "warn")}
    bench = json.loads((tmp_path / "out" / "preflight-bench.json").read_text())
    # 1.5 req/s is far below what the server and the load generator sustain, but on a shared 2-core
    # machine the load generator can still stall past bench's 50 ms p99 lag: then preflight is right
    # to say NO-GO (the latencies describe the client). Everything else must pass either way.
    if tolerate_client_bound(bench, "preflight's load test"):
        assert d["verdict"] == "GO" and rc == 0, (problems, client_note(bench), err[-2000:])
    else:
        assert list(problems) == ["load_run_complete"], (problems, client_note(bench))
        assert d["verdict"] == "NO-GO" and rc == 1, (d["verdict"], client_note(bench))
        assert any("fell behind its schedule" in e for e in checks["load_run_complete"]["evidence"])
    assert d["mode"] == "launch" and not d["dry_run"]
    for cid in ("lengths_max_model_len", "plan_starts", "plan_concurrency", "load_errors",
                "load_oom", "load_preemptions", "load_kv_usage", "load_queue", "slo_e2e_p99", "slo_error_rate",
                "alerts_written"):
        assert statuses[cid] == "pass", (cid, checks[cid], client_note(bench))
    assert statuses["profile_matches_plan"] == "pass", checks["profile_matches_plan"]
    assert not checks["load_errors"]["simulated"]
    load = d["sections"]["load"]
    assert load["total"] >= 15  # 1.5 req/s for 20 s (Poisson)
    assert load["preemptions"] == 0
    out = tmp_path / "out"
    for name in ("preflight.html", "preflight.md", "preflight.json", "preflight-bench.json", "kvplan-alerts.yml",
                 "kvplan-dashboard.json", "vllm-serve.log"):
        assert (out / name).is_file(), name
    assert "KV cache size" in (out / "vllm-serve.log").read_text(errors="replace")


def test_kv_cache_that_cannot_hold_the_traffic_is_no_go(tiny_llama_model, tmp_path):
    # 159 usable blocks x 32 tokens = 5,088 tokens; each request holds up to ~1,000 + 500 tokens
    # (47 blocks): 3 fit at once, while 0.75 req/s of ~10 s requests keep more than 3 in flight.
    log = _log(tmp_path / "long.jsonl", 30, (900, 1000), 500, seed=2)
    rc, d, err = preflight(tiny_llama_model.path, tmp_path / "out", "--max-model-len", "2048", "--block-size", "32",
                           "--num-gpu-blocks-override", "160", "--kv-cache-memory", "1GiB", "--requests", log,
                           "--target-qps", "0.5", "--duration", "20s", "--request-timeout", "10m")
    # (the last of the ~15 requests waits for four waves of three: 55 s of E2E measured on this 2-core
    # machine beside other jobs, against the default 2-minute client timeout; a CI run once failed
    # load_errors here. The 10-minute timeout keeps this a test of vLLM's recompute-after-preemption,
    # not of the client's patience.)
    checks = _checks(d)
    assert d["verdict"] == "NO-GO" and rc == 1, {k: c["status"] for k, c in checks.items()}
    pre = checks["load_preemptions"]
    assert pre["status"] == "fail" and pre["measured"] >= 1, pre
    assert not pre["simulated"]
    fit = d["sections"]["traffic"]["requests_fit_at_mix"]
    assert 2 <= fit < 4, fit
    # the doctor's preemption fixes, re-planned: cap max_num_seqs at what the cache holds at max_model_len
    # (2.5 requests of 2,048 tokens), or give the CPU backend more KV memory
    changes = [f["change"] for f in pre["fixes"]]
    assert "--max-num-seqs 2" in changes, pre["fixes"]
    cap = next(f for f in pre["fixes"] if f["change"] == "--max-num-seqs 2")
    assert cap["basis"] == "plan" and cap["numbers"]["kv_cache_tokens"] == 5120, cap
    # requests in flight at the load rate (Little's law over the measured E2E) exceed what fits; whether
    # they also do at the target rate (fail) or only with the load factor's headroom (warn) depends on
    # how fast this host ran them (a CI run's busy host: 4.47 in flight at 0.75 req/s, 2.98 at 0.5)
    conc = checks["plan_concurrency"]
    load_factor = d["sections"]["load"]["requested_rate"] / 0.5
    available = fit  # the KV cache binds here (max_num_seqs is in the hundreds)
    assert conc["measured"] > fit, conc
    assert conc["status"] == ("fail" if conc["measured"] / load_factor > available else "warn"), (conc, load_factor)
    assert checks["plan_starts"]["status"] == "pass"
    # preempted requests are recomputed, not failed (on failure: the load run's own error record, which
    # names each failed request's error; a ServerDisconnectedError before any answer is a pooled
    # connection the server had closed, which bench sends once more)
    bench = json.loads((tmp_path / "out" / "preflight-bench.json").read_text())
    assert checks["load_errors"]["status"] == "pass", (checks["load_errors"]["evidence"], bench.get("errors"),
                                                       bench.get("error_examples"), bench.get("requests"))


def test_kv_cache_too_small_to_start_is_no_go_without_launching(tiny_llama_model, tmp_path):
    log = _log(tmp_path / "short.jsonl", 20, (40, 150), 32, seed=3)
    rc, d, err = preflight(tiny_llama_model.path, tmp_path / "out", "--max-model-len", "2048",
                           "--kv-cache-memory-bytes", str(4 * 128 * 2048), "--requests", log, "--target-qps", "1",
                           "--duration", "20s")
    checks = _checks(d)
    assert d["verdict"] == "NO-GO" and rc == 1
    starts = checks["plan_starts"]
    assert starts["status"] == "fail" and starts["measured"] == "max_model_len_too_large"
    assert "To serve at least one request" in starts["evidence"][0]
    assert starts["fix"]["change"].startswith("--max-model-len ")
    assert starts["fix"]["numbers"]["starts"] is True
    assert "server" not in d["sections"]  # nothing was launched
    assert checks["load_run_complete"]["status"] == "skipped"
    assert "not launched" in checks["load_run_complete"]["evidence"][0]
