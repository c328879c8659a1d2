"""kvplan.ops.launch without a vLLM: the argv (no shell, odd model paths stay one argument, host
and port chosen by kvplan), the port, the environment, and the error paths. The process tests use
a stand-in executable (a shell script, named as such) for faults a real vLLM does not show on
demand: a server that never answers, one that exits at once, a worker that ignores SIGTERM."""
from __future__ import annotations

import json
import os
import signal
import socket
import stat
import time
from pathlib import Path

import pytest

from kvplan.errors import UsageError
from kvplan.hardware import custom_gpu, parse_size
from kvplan.memory import PlanRequest, plan
from kvplan.models import load_model
from kvplan.ops import launch as L

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "max_position_embeddings": 4096, "vocab_size": 129280, "torch_dtype": "float32", "tie_word_embeddings": False,
}
ODD_NAME = "my model; echo $(id) `x` 'q' \"d\" & | > *"


def _model_dir(tmp_path: Path, name: str = "tiny") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    return d


def _plan(model_dir: Path, device: str = "cpu", **flags):
    req = PlanRequest(model=load_model(str(model_dir)), gpu=custom_gpu(parse_size("16GiB"), "CPU"), device=device,
                      dtype="float32", vllm_version="0.32", max_model_len=2048, **flags)
    return plan(req, what_ifs=False)


def _fake_bin(tmp_path: Path, body: str) -> str:
    """A stand-in for the vllm executable (a shell script): used only for process faults."""
    path = tmp_path / "fake-vllm"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# --------------------------------------------------------------------------- argv
def test_argv_is_a_list_with_the_odd_model_path_as_one_argument(tmp_path):
    model = _model_dir(tmp_path, ODD_NAME)
    result = _plan(model, kv_cache_memory_bytes=1 << 30)
    argv = L.build_argv(result, "/opt/vllm/bin/vllm", 8123)
    assert argv[:3] == ["/opt/vllm/bin/vllm", "serve", str(model)]
    assert argv.count(str(model)) == 1
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", "8123"]
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(1 << 30)
    assert argv[argv.index("--max-model-len") + 1] == "2048"
    assert all(isinstance(a, str) for a in argv)


def test_python_interpreter_runs_the_api_server_module(tmp_path):
    model = _model_dir(tmp_path, ODD_NAME)
    result = _plan(model, kv_cache_memory_bytes=1 << 30)
    argv = L.build_argv(result, "/venv/bin/python3.11", 8123, ["--served-model-name", "x"])
    assert argv[:5] == ["/venv/bin/python3.11", "-m", L.API_SERVER_MODULE, "--model", str(model)]
    assert argv[-2:] == ["--served-model-name", "x"]
    assert L.is_python("/usr/bin/python") and L.is_python("python3") and not L.is_python("/usr/bin/vllm")
    assert not L.is_python("/x/python-wrapper")


def test_cpu_plan_without_kv_size_gets_the_plans_kv_memory(tmp_path):
    result = _plan(_model_dir(tmp_path))
    assert "--kv-cache-memory-bytes" not in result.serve_argv
    argv = L.build_argv(result, "vllm", 1)
    assert int(argv[argv.index("--kv-cache-memory-bytes") + 1]) == result.memory.available_kv_cache_bytes
    # on a GPU vLLM measures the memory itself: nothing is added
    gpu_result = _plan(_model_dir(tmp_path, "gpu"), device="cuda")
    assert "--kv-cache-memory-bytes" not in L.build_argv(gpu_result, "vllm", 1)


@pytest.mark.parametrize("extra", [["--host", "0.0.0.0"], ["--port=9"]])
def test_host_and_port_are_kvplans(tmp_path, extra):
    with pytest.raises(UsageError, match="chosen by kvplan"):
        L.build_argv(_plan(_model_dir(tmp_path)), "vllm", 1, extra)


def test_env_drops_an_inherited_cpu_kv_space_that_would_override_the_plan(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "40")
    child, overrides = L.build_env(["vllm", "serve", "m", "--kv-cache-memory-bytes", "1"], None)
    assert "VLLM_CPU_KVCACHE_SPACE" not in child and overrides == {"PYTHONUNBUFFERED": "1"}
    child, _ = L.build_env(["vllm", "serve", "m", "--kv-cache-memory-bytes", "1"], {"VLLM_CPU_KVCACHE_SPACE": "2"})
    assert child["VLLM_CPU_KVCACHE_SPACE"] == "2"  # asked for explicitly
    child, _ = L.build_env(["vllm", "serve", "m"], None)
    assert child["VLLM_CPU_KVCACHE_SPACE"] == "40"  # no planned size: the user's setting stands


def test_free_port_is_bindable_on_loopback():
    port = L.free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


# --------------------------------------------------------------------------- errors
def test_missing_binary_is_a_usage_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv(L.ENV_VLLM_BIN, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match=r"'vllm' not found on PATH"):
        L.resolve_vllm_bin(None)
    with pytest.raises(UsageError, match="no-such/vllm"):
        L.resolve_vllm_bin(str(tmp_path / "no-such" / "vllm"))
    with pytest.raises(UsageError, match="no-such/vllm"):
        L.launch_vllm(_plan(_model_dir(tmp_path)), vllm_bin=str(tmp_path / "no-such" / "vllm"))


def test_env_variable_names_the_binary(tmp_path, monkeypatch):
    fake = _fake_bin(tmp_path, "exit 0\n")
    monkeypatch.setenv(L.ENV_VLLM_BIN, fake)
    assert L.resolve_vllm_bin(None) == fake
    assert L.resolve_vllm_bin("vllm") == fake  # the default name defers to the variable
    other = tmp_path / "other"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    assert L.resolve_vllm_bin(str(other)) == str(other)


def test_exit_before_serving_raises_launch_failed_with_log_and_code(tmp_path):
    fake = _fake_bin(tmp_path, 'echo "argv: $*"\necho "ValueError: refused for a reason" >&2\nexit 3\n')
    with pytest.raises(L.LaunchFailed) as info:
        L.launch_vllm(_plan(_model_dir(tmp_path)), vllm_bin=fake, log_path=tmp_path / "out.log",
                      startup_timeout_s=30)
    exc = info.value
    assert exc.exit_code == 3
    assert "ValueError: refused for a reason" in exc.log_text and "ValueError: refused for a reason" in str(exc)
    assert "--host 127.0.0.1" in exc.log_text  # stdout and stderr both in the log
    assert exc.log_path == tmp_path / "out.log"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # members may be zombies waiting for our wait(): count only live ones
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = L._proc_stat(int(d.name))
            if st and st[3] == pgid and st[0] != "Z":
                return True
    return False


def test_timeout_stops_the_whole_group_including_a_worker_ignoring_sigterm(tmp_path):
    # a "server" that never answers, with a child that ignores SIGTERM (SIGKILL must follow)
    fake = _fake_bin(tmp_path, "sh -c 'trap \"\" TERM; while :; do sleep 0.2; done' &\nwhile :; do sleep 0.2; done\n")
    t0 = time.monotonic()
    with pytest.raises(L.LaunchFailed, match="did not serve within 2 s") as info:
        L.launch_vllm(_plan(_model_dir(tmp_path)), vllm_bin=fake, startup_timeout_s=2, log_path=tmp_path / "t.log")
    assert time.monotonic() - t0 < 30
    exc = info.value
    assert len(exc.pids) >= 2  # the script and its stubborn child
    assert not _group_alive(exc.pids[0])
    assert all(L._proc_stat(pid) is None or L._proc_stat(pid)[0] == "Z" for pid in exc.pids)


def test_keyboard_interrupt_while_waiting_stops_the_server(tmp_path, monkeypatch):
    fake = _fake_bin(tmp_path, "while :; do sleep 0.2; done\n")
    started: list[int] = []
    real_start = L._start

    def recording_start(*a, **k):
        srv = real_start(*a, **k)
        started.append(srv.pid)
        return srv

    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    monkeypatch.setattr(L, "_start", recording_start)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        with pytest.raises(KeyboardInterrupt):
            L.launch_vllm(_plan(_model_dir(tmp_path)), vllm_bin=fake, startup_timeout_s=60, log_path=tmp_path / "k.log")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert started and not _group_alive(started[0])
    assert not L._RUNNING


def test_readiness_probe_ignores_an_http_proxy(monkeypatch):
    # a proxy that does not exist: asking it would fail; the loopback probe must go direct
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("no_proxy", "")
    import http.server
    import threading

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        assert L._get_status(f"http://127.0.0.1:{srv.server_port}/health") == 200
    finally:
        srv.shutdown()
    assert L._get_status("http://127.0.0.1:9/health") is None  # nothing listening: no answer, no exception


def test_default_log_is_a_named_temporary_file(tmp_path):
    import tempfile

    fake = _fake_bin(tmp_path, 'echo "ValueError: no"\nexit 1\n')
    with pytest.raises(L.LaunchFailed) as info:
        L.launch_vllm(_plan(_model_dir(tmp_path)), vllm_bin=fake, startup_timeout_s=30)
    path = info.value.log_path
    try:
        assert path.parent == Path(tempfile.gettempdir()) and path.name.startswith("kvplan-vllm-")
        assert path.read_text().startswith("ValueError: no")  # kept for the user: the report names it
    finally:
        path.unlink()
