"""`kvplan ui`'s bounded work: each cap answers a clear 400, a full job pool 429, a job past its
deadline 503; a job is killed when its client disconnects and when the server stops; Ctrl-C,
SIGTERM and SIGHUP stop the page with jobs running and delete the uploads; uploads stay within a
budget and their folder never shows. Jobs that must run long are real simulations (about a minute
of CPU) that each test stops within a second or two of starting them."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_ui_security import ENV, REPO, UiProcess, raw_http, run

#: a page-allowed simulation that runs about a minute of CPU: what a job that must be stopped runs
HEAVY = ["--model", "llama3-8b", "--gpu", "H100", "--request-rate", "20", "--num-prompts", "100000",
         "--random-input-len", "128", "--random-output-len", "4000"]
#: the time a busy 2-core machine is given for what takes milliseconds idle (a poll loop's bound, not a wait)
PATIENCE_S = 60




async def until(check, what: str, limit: float = PATIENCE_S):
    deadline = time.monotonic() + limit
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {limit} s"
        await asyncio.sleep(0.05)


def dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


# ---------------------------------------------------------------------------- caps: a clear 400
def test_each_cap_is_a_400_naming_it():
    cases = {
        "requests": ["--model", "llama3-8b", "--gpu", "H100", "--request-rate", "10", "--num-prompts", "100000000"],
        "num_requests": ["--model", "llama3-8b", "--gpu", "H100", "--rate", "10", "--num-requests", "100000000"],
        "rate_x_duration": ["--model", "llama3-8b", "--gpu", "H100", "--rate", "1000000", "--duration", "3600s"],
        "timeline": ["--model", "llama3-8b", "--gpu", "H100", "--rate", "10", "--num-requests", "100",
                     "--timeline-interval", "0.000000001"],
    }

    async def go(c):
        return {k: (r.status, await r.json()) for k, r in
                [(k, await c.post("/api/simulate", json={"argv": a})) for k, a in cases.items()]}

    out = run(go)
    assert all(s == 400 for s, _ in out.values()), out
    assert "above kvplan ui's cap of 100,000 requests per run" in out["requests"][1]["error"]
    assert out["requests"][1]["error"].startswith("--num-prompts: 100,000,000 requests")
    assert out["num_requests"][1]["error"].startswith("--num-requests: 100,000,000 requests")
    assert out["rate_x_duration"][1]["error"].startswith("--rate 1e+06 x --duration 3600s: 3,600,000,000 requests")
    assert "100,000 timeline samples" in out["timeline"][1]["error"] and "kvplan ui's cap" in \
        out["timeline"][1]["error"]


def test_the_cli_refuses_above_its_own_larger_caps():
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "kvplan.cli.main", "simulate", "--model", "llama3-8b", "--gpu",
                               "H100", *args], capture_output=True, text=True, cwd=REPO, env=ENV, timeout=300)

    p = cli("--rate", "10", "--num-requests", "100000000")
    assert p.returncode == 2 and "above kvplan's cap of 10,000,000 requests per run" in p.stderr, p.stderr
    p = cli("--rate", "10", "--num-requests", "100", "--timeline-interval", "0.000000001")
    assert p.returncode == 2 and "1,000,000 timeline samples" in p.stderr, p.stderr
    from kvplan.limits import CLI, PAGE

    CLI.requests(200_000, "--num-requests")  # above the page's cap, the CLI runs it
    with pytest.raises(UsageError_):
        PAGE.requests(200_000, "--num-requests")


def test_records_per_run_are_capped_and_reported(tmp_path):
    """The page reads at most its cap of records from a log; the answer says so (library level,
    under a small cap: the page's is 100,000)."""
    from kvplan.limits import PAGE, WorkLimits, using
    from kvplan.traffic.trace import trace_maker
    from kvplan.workload.analysis import LengthsOptions, analyze_lengths

    log = tmp_path / "r.jsonl"
    log.write_text("".join(json.dumps({"prompt": "hello " * (i + 1), "max_tokens": 8,
                                       "usage": {"prompt_tokens": 5 + i, "completion_tokens": 8}}) + "\n"
                           for i in range(30)))
    small = WorkLimits(who="kvplan ui", max_requests=7, max_timeline_samples=PAGE.max_timeline_samples,
                       max_log_records=10, beyond="run the CLI")
    with using(small):
        res = analyze_lengths([str(log)], options=LengthsOptions(estimate=True))
        trace = trace_maker(rate=5.0, requests=str(log))(5.0)
    assert res.records.read == 10 and res.records.used == 10
    assert res.notes[0].startswith("Read the first 10 records only: kvplan ui's cap of records per run")
    assert len(trace.requests) == 7 and any("first 7 requests of the log" in n for n in trace.notes), trace.notes
    full = analyze_lengths([str(log)], options=LengthsOptions(estimate=True))
    assert full.records.read == 30 and not any("cap" in n for n in full.notes)


# ---------------------------------------------------------------------------- the job pool
def test_jobs_run_under_the_page_caps_in_their_own_process():
    from kvplan.limits import CLI, PAGE, active
    from kvplan.ui.jobs import JobError, JobPool

    async def go():
        pool = JobPool(slots=2, deadline_s=60)
        try:
            limits = await pool.run("kvplan.limits:active")
            pid = await pool.run("os:getpid")
            with pytest.raises(JobError) as err:
                await pool.run("kvplan.ui.job_main:read_config", "/nonexistent/config.json", "mine.json")
            return limits, pid, err.value
        finally:
            pool.close()

    limits, pid, err = asyncio.run(go())
    assert limits == PAGE and active() == CLI and pid != os.getpid()
    assert err.kind == "usage" and "mine.json" in err.message and "/nonexistent" not in err.message


def test_a_process_is_reused_only_after_a_clean_job():
    """A process whose job ended (an answer or a usage error) takes the next one; one stopped at its
    deadline never does, nor does one that reached its count of jobs."""
    from kvplan.ui import jobs
    from kvplan.ui.jobs import JobError, JobPool, JobTimeout

    async def go():
        pool = JobPool(slots=1, deadline_s=60)
        try:
            first = await pool.run("os:getpid")
            with pytest.raises(JobError):
                await pool.run("kvplan.ui.job_main:read_config", "/nonexistent/config.json", "x.json")
            second = await pool.run("os:getpid")
            with pytest.raises(JobTimeout):
                await pool.run("time:sleep", 30, deadline_s=0.5)
            third = await pool.run("os:getpid")
            return first, second, third
        finally:
            pool.close()

    first, second, third = asyncio.run(go())
    assert first == second != third
    assert jobs.JOBS_PER_PROCESS >= 1


def test_full_pool_is_429_deadline_is_503_and_a_disconnect_kills_the_job():
    async def go(c):
        pool = c.server.app[__import__("kvplan.ui.server", fromlist=["JOBS"]).JOBS]
        heavy = asyncio.ensure_future(c.post("/api/simulate", json={"argv": HEAVY}))

        async def one_running():
            return pool.pids() if pool.running == 1 else None

        (pid,) = await until(one_running, "the heavy job started")
        busy = await c.post("/api/plan", json={"argv": ["--model", "llama3-8b", "--gpu", "H100"]})
        state = await (await c.get("/api/jobs")).json()
        busy_body = await busy.json()
        heavy.cancel()  # the client goes away: its connection closes
        with pytest.raises(asyncio.CancelledError):
            await heavy

        async def killed():
            return pool.running == 0 and dead(pid)

        t0 = time.monotonic()
        await until(killed, "the job of a client that left was killed")
        after_disconnect = time.monotonic() - t0
        ok = await c.post("/api/plan", json={"argv": ["--model", "llama3-8b", "--gpu", "H100"]})
        return busy.status, busy_body, state, after_disconnect, ok.status

    status, body, state, after, ok = run(go, job_slots=1)
    assert status == 429 and "1 jobs are already running" in body["error"], body
    assert state == {"running": 1, "slots": 1, "deadline_s": 120.0, "started": 1}
    assert ok == 200  # the slot is free again
    print(f"job killed {after:.2f} s after its client left")


def test_a_job_past_its_deadline_is_stopped_with_503():
    async def go(c):
        pool = c.server.app[__import__("kvplan.ui.server", fromlist=["JOBS"]).JOBS]
        t0 = time.monotonic()
        r = await c.post("/api/simulate", json={"argv": HEAVY})
        return r.status, await r.json(), time.monotonic() - t0, pool.running

    status, body, took, running = run(go, job_deadline_s=1.5)
    assert status == 503 and "deadline of 1.5 s" in body["error"], body
    assert running == 0 and took < PATIENCE_S


def test_a_disconnect_over_a_real_socket_kills_the_job():
    ui = UiProcess()
    try:
        body = json.dumps({"argv": HEAVY}).encode()
        s = socket.create_connection(("127.0.0.1", ui.port), timeout=30)
        s.sendall(b"POST /api/simulate HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (ui.port, len(body)) + body)
        wait_for(lambda: jobs_running(ui.port) == 1, "the job started")
        pids = job_pids(ui.proc.pid)  # the job, and the spare process forked for the next one
        assert 1 <= len(pids) <= 2, pids
        s.close()
        wait_for(lambda: jobs_running(ui.port) == 0 and any(dead(p) for p in pids)
                 and len(job_pids(ui.proc.pid)) <= 1, "the job was killed")
    finally:
        ui.stop()


# ---------------------------------------------------------------------------- stopping the page
def jobs_running(port: int) -> int:
    return json.loads(raw_http(port, "GET", "/api/jobs", {"Host": f"127.0.0.1:{port}"})[1])["running"]


def wait_for(check, what: str, limit: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {limit} s"
        time.sleep(0.05)


def children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(") ", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def job_pids(server_pid: int) -> list[int]:
    """The live job processes of a server (the spare included): children of its forkserver (its own child)."""
    return [p for fs in children(server_pid) for p in children(fs) if not dead(p)]


def _start_heavy_jobs(ui: UiProcess, n: int) -> list[socket.socket]:
    socks = []
    body = json.dumps({"argv": HEAVY}).encode()
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", ui.port), timeout=30)
        s.sendall(b"POST /api/simulate HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (ui.port, len(body)) + body)
        socks.append(s)
    wait_for(lambda: jobs_running(ui.port) == n, f"{n} jobs started")
    return socks


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_the_page_with_jobs_running_and_deletes_the_uploads(sig, tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it), SIGTERM and SIGHUP: the
    server, its jobs and its forkserver are gone and the upload folder deleted. The page stops in
    about 0.1-0.5 s idle; the bound leaves room for a busy 2-core machine."""
    ui = UiProcess(env=dict(ENV, TMPDIR=str(tmp_path)))
    socks: list[socket.socket] = []
    try:
        status, body = raw_http(ui.port, "POST", "/api/upload?kind=log&name=prompts.jsonl",
                                {"Host": f"127.0.0.1:{ui.port}", "Content-Type": "application/octet-stream"},
                                b'{"prompt": "a private prompt", "max_tokens": 4}\n')
        assert status == 200, body
        folders = list(tmp_path.glob(f"kvplan-ui-uploads-{ui.proc.pid}-*"))
        assert len(folders) == 1 and any(folders[0].rglob("prompts.jsonl"))
        socks = _start_heavy_jobs(ui, 2)
        jobs = job_pids(ui.proc.pid)  # the 2 jobs and the spare forked for the next one
        helpers = children(ui.proc.pid)
        assert len(jobs) >= 2, jobs
        t0 = time.monotonic()
        if sig == signal.SIGINT:
            os.killpg(ui.proc.pid, sig)  # the terminal's Ctrl-C: the whole foreground group
        else:
            os.kill(ui.proc.pid, sig)
        ui.proc.wait(timeout=PATIENCE_S)
        took = time.monotonic() - t0
        wait_for(lambda: all(dead(p) for p in jobs + helpers), "the jobs and the forkserver ended", 30)
    finally:
        for s in socks:
            s.close()
        ui.stop()
    assert ui.proc.returncode == 0, ui.proc.returncode
    assert not folders[0].exists()
    print(f"{signal.Signals(sig).name}: the page stopped {took:.2f} s after the signal, with 2 jobs running")
    assert took < 10, took  # the server's own bound is 2 s (SHUTDOWN_S + killing the jobs); room for a busy host


# ---------------------------------------------------------------------------- uploads
def test_upload_budget_evicts_the_least_recently_used(tmp_path):
    from kvplan.ui.uploads import UploadNoSpace, Uploads

    up = Uploads(parent=tmp_path, max_count=3, max_bytes=1000)
    try:
        ids = [up.add(f"f{i}.jsonl", b"%d" % i * 100, "log")["id"] for i in range(3)]
        up.path(ids[0], "x")  # used: now the most recent
        new = up.add("f3.jsonl", b"3" * 100, "log")["id"]
        assert up.known(ids[0]) and not up.known(ids[1]) and up.known(ids[2]) and up.known(new)
        big = up.add("big.jsonl", b"b" * 950, "log")["id"]  # 950 bytes: only it fits in 1,000
        assert [up.known(i) for i in (ids[0], ids[2], new, big)] == [False, False, False, True]
        assert up.total_bytes == 950 and len(list(up.root.iterdir())) == 1
        with pytest.raises(UsageError_) as err:
            up.path(ids[0], "--requests")
        assert "the page keeps the last 3 uploads" in str(err.value)
        dot = up.add("..", b"x", "log")
        assert Path(up.path(dot["id"], "x")).parent.parent == up.root and dot["name"] == ".."
    finally:
        up.close()
    assert not up.root.exists()
    full = Uploads(parent=tmp_path, min_free=1 << 62)
    try:
        with pytest.raises(UploadNoSpace):
            full.add("a.jsonl", b"x", "log")
    finally:
        full.close()


from kvplan.errors import UsageError as UsageError_  # noqa: E402


def test_stale_upload_folders_of_dead_servers_are_removed_at_start(tmp_path):
    from kvplan.ui.uploads import Uploads

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f"kvplan-ui-uploads-{gone.pid}-abc123"
    (stale / "0123456789abcdef").mkdir(parents=True)
    (stale / "0123456789abcdef" / "prompts.jsonl").write_text("{}\n")
    alive = tmp_path / f"kvplan-ui-uploads-{os.getppid()}-def456"  # a live process: another server's
    alive.mkdir()
    other = tmp_path / "kvplan-ui-chromium-xyz"
    other.mkdir()
    up = Uploads(parent=tmp_path)
    try:
        assert not stale.exists() and alive.exists() and other.exists()
        assert up.stale_removed == [stale]
    finally:
        up.close()


def test_the_page_never_shows_the_upload_folder():
    log = b"".join(json.dumps({"prompt": "hello " * 30, "max_tokens": 16, "timestamp": 1000 + i,
                               "usage": {"prompt_tokens": 31, "completion_tokens": 16}}).encode() + b"\n"
                   for i in range(20))
    log += b"{broken\n"
    cfg = next((REPO / "src/kvplan/models/catalog").glob("*Qwen2.5-7B*.json"))
    config = json.dumps(json.loads(cfg.read_text())["config"]).encode()

    async def go(c):
        root = str(c.server.app[__import__("kvplan.ui.server", fromlist=["UPLOADS"]).UPLOADS].root)
        texts = []
        r = await c.post("/api/upload?kind=log&name=prompts.jsonl", data=log)
        lid = (await r.json())["id"]
        r2 = await c.post("/api/upload?kind=config&name=config.json", data=config)
        cinfo = await r2.json()
        bad = await c.post("/api/upload?kind=config&name=mine.json", data=b'{"hidden_size": 1}')
        for path, argv in (("/api/lengths", [lid, "--estimate"]),
                           ("/api/simulate", ["--model", "llama3-8b", "--gpu", "H100", "--requests", lid, "--rate", "2"]),
                           ("/api/plan", ["--model", cinfo["id"], "--gpu", "H100"]),
                           ("/api/simulate", ["--model", cinfo["id"], "--gpu", "H100", "--requests", lid, "--rate", "2"])):
            resp = await c.post(path, json={"argv": argv})
            texts.append((resp.status, await resp.text()))
        texts.append((r2.status, json.dumps(cinfo)))
        texts.append((bad.status, await bad.text()))
        return root, texts

    root, texts = run(go)
    assert [s for s, _ in texts] == [200, 200, 200, 200, 200, 400], [t[:300] for _, t in texts[1:4]]
    for _, text in texts:
        assert root not in text and "kvplan-ui-uploads" not in text, text[:500]
    lengths, _, plan, _, cinfo, bad = (json.loads(t) for _, t in texts)
    assert lengths["inputs"]["files"] == ["prompts.jsonl"]
    assert [(i["file"], i["line"]) for i in lengths["issues"]] == [("prompts.jsonl", 21)], lengths["issues"]
    assert cinfo["model_id"] == "MODEL_DIR" and plan["serve_command"].startswith("vllm serve MODEL_DIR")
    assert "mine.json" in bad["error"]


def test_uploads_arriving_at_once_are_bounded():
    """Each upload's body is held in memory while it arrives: a fifth one at once is a 429. The four
    bodies here never finish arriving (their senders stall), as a slow or hostile client's would."""
    async def go(c):
        port = c.port
        stalled = []
        for _ in range(4):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /api/upload?kind=log&name=a.jsonl HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                         b"Content-Type: application/octet-stream\r\nContent-Length: 1000\r\n\r\n{" % port)
            await writer.drain()
            stalled.append(writer)
        from kvplan.ui.server import RECEIVING

        async def four():
            return c.server.app[RECEIVING][0] == 4

        await until(four, "four uploads arriving")
        r = await c.post("/api/upload?kind=log&name=b.jsonl", data=b'{"prompt": "x"}\n')
        fifth = (r.status, await r.json())
        for w in stalled:
            w.close()

        async def none():
            return c.server.app[RECEIVING][0] == 0

        await until(none, "the stalled uploads given up")
        r = await c.post("/api/upload?kind=log&name=b.jsonl", data=b'{"prompt": "x"}\n')
        return fifth, r.status

    (status, body), after = run(go)
    assert status == 429 and "4 uploads are already arriving" in body["error"], body
    assert after == 200


def test_a_port_in_use_leaves_no_upload_folder_behind(tmp_path, monkeypatch):
    import socket as socketlib
    import tempfile

    from kvplan.ui.server import start

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    taken = socketlib.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(OSError):
            asyncio.run(start("127.0.0.1", taken.getsockname()[1]))
    finally:
        taken.close()
    assert list(tmp_path.glob("kvplan-ui-uploads-*")) == []
