"""kvplan.ops.launch against the real vLLM CPU build: a plan of the harness's tiny Llama is
launched with `vllm serve`'s module, serves, and leaves no process behind; a plan whose KV cache
cannot hold one max_model_len request makes vLLM refuse to start, and LaunchFailed carries
vLLM's own error text (the one kvplan plan predicted)."""
from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from kvplan.hardware import custom_gpu, parse_size
from kvplan.memory import PlanRequest, plan
from kvplan.models import load_model
from kvplan.ops.launch import LaunchFailed, launch_vllm
from tests.vllm_server import env

pytestmark = pytest.mark.vllm

STARTUP_TIMEOUT_S = 300.0  # 30 s idle, up to ~170 s measured while other servers start on the 2-core machine


def cpu_plan(model_dir: Path, **flags):
    """The plan `kvplan plan --device cpu --dtype float32 --vllm-version 0.32` makes (the harness's
    server settings: float32 weights, eager mode)."""
    req = PlanRequest(model=load_model(str(model_dir)), gpu=custom_gpu(parse_size("16GiB"), "CPU"), device="cpu",
                      dtype="float32", enforce_eager=True, vllm_version="0.32", **flags)
    return plan(req, what_ifs=False)


def _start_time(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()[19]


def _still_running(identities: dict[int, str]) -> list[int]:
    """PIDs whose process (same PID and start time) is still there and not a zombie."""
    out = []
    for pid, started in identities.items():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if _start_time(pid) == started and state != "Z":
            out.append(pid)
    return out


def test_launch_serves_the_plan_and_stop_leaves_nothing(tiny_llama_model, tmp_path):
    result = cpu_plan(tiny_llama_model.path, max_model_len=2048, kv_cache_memory_bytes=1 << 30)
    log = tmp_path / "vllm.log"
    with launch_vllm(result, vllm_bin=str(env.vllm_python()), log_path=log,
                     startup_timeout_s=STARTUP_TIMEOUT_S) as srv:
        assert srv.base_url.startswith("http://127.0.0.1:")
        assert srv.argv[srv.argv.index("--host") + 1] == "127.0.0.1"
        with urllib.request.urlopen(srv.base_url + "/v1/models", timeout=10) as r:  # noqa: S310 - loopback server
            served = [m["id"] for m in json.load(r)["data"]]
        assert served == [str(tiny_llama_model.path)]
        # the server runs the plan: its KV line is the one kvplan predicted
        kv_lines = re.findall(r"CPU KV cache size: .*x", srv.log_text())
        assert kv_lines == list(result.kv.log_lines)
        identities = {pid: _start_time(pid) for pid in srv.processes_seen()}
        identities = {pid: t for pid, t in identities.items() if t is not None}
        assert srv.pid in identities and len(identities) >= 2  # API server + EngineCore (+ worker)
        assert srv.is_running()
    assert not srv.is_running()
    assert _still_running(identities) == []
    assert srv.alive_pids() == ()
    assert srv.exit_code is not None
    assert log.read_bytes().decode("utf-8", errors="replace") == srv.log_text()  # the log stays for the caller


def test_kv_cache_too_small_raises_launch_failed_with_vllms_text(tiny_llama_model, tmp_path):
    # KV_TOO_SMALL of the harness: 4 blocks x 128 tokens x 2,048 B/token = 1 MiB, max_model_len 2048.
    result = cpu_plan(tiny_llama_model.path, max_model_len=2048, kv_cache_memory_bytes=4 * 128 * 2048)
    assert not result.startup.ok
    # the plan's serve command runs the largest length that fits; ask for 2048 anyway (last flag wins)
    with pytest.raises(LaunchFailed) as info:
        launch_vllm(result, vllm_bin=str(env.vllm_python()), extra_args=["--max-model-len", "2048"],
                    log_path=tmp_path / "refused.log", startup_timeout_s=STARTUP_TIMEOUT_S)
    exc = info.value
    assert exc.exit_code not in (None, 0)
    assert exc.log_path == tmp_path / "refused.log"
    vllm_error = re.search(r"ValueError: (To serve at least one request.*)$", exc.log_text, re.M)
    assert vllm_error, exc.log_text[-2000:]
    assert vllm_error.group(1) == result.startup.error
    assert "To serve at least one request" in str(exc)
    assert exc.pids and not _alive(exc.pids)


def _alive(pids) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive
