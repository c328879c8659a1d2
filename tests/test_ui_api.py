"""`kvplan ui`'s JSON API, in process (aiohttp's test server on 127.0.0.1, a free port): every answer
is the CLI's own `--format json` for the same flags, errors are the CLI's messages as JSON, uploads
are size-limited and validated, the page cannot reach files or the network through it."""
from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "src/kvplan/workload/examples/customer_service.jsonl.gz"
ENV = dict(os.environ, KVPLAN_OFFLINE="1")


def cli_json(*args: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args, "--format", "json"], capture_output=True,
                       text=True, timeout=300, cwd=REPO, env=ENV)
    assert p.stdout.strip(), p.stderr
    return json.loads(p.stdout)


def run(coro_fn):
    """Run ``coro_fn(client)`` against a fresh app on 127.0.0.1 (a free port), stopped afterwards."""
    from aiohttp.test_utils import TestClient, TestServer

    from kvplan.ui.server import make_app

    async def main():
        server = TestServer(make_app(), host="127.0.0.1", port=0)
        async with TestClient(server) as client:
            return await coro_fn(client)

    return asyncio.run(main())


async def post(client, path, argv):
    r = await client.post(path, json={"argv": argv})
    return r.status, await r.json()


PLAN_ARGV = ["--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "A100-80GB", "-tp", "2", "--max-model-len", "16384",
             "--kv-cache-dtype", "fp8"]


def test_plan_answer_is_the_cli_json():
    status, d = run(lambda c: post(c, "/api/plan", PLAN_ARGV))
    assert status == 200
    assert d == cli_json("plan", *PLAN_ARGV)


def test_plan_that_does_not_start_is_an_answer_not_an_error():
    argv = ["--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "H100"]
    status, d = run(lambda c: post(c, "/api/plan", argv))
    assert status == 200 and d["startup"]["ok"] is False and d["startup"]["error"]
    assert d == cli_json("plan", *argv)


def test_simulate_answer_is_the_cli_json():
    argv = ["--model", "llama3-8b", "--gpu", "H100", "--request-rate", "8", "--num-prompts", "300",
            "--random-input-len", "512", "--random-output-len", "64", "--slo", "ttft_p99=2s"]
    status, d = run(lambda c: post(c, "/api/simulate", argv))
    assert status == 200
    assert d == cli_json("simulate", *argv)


def test_uploaded_log_lengths_and_replay_are_the_cli_json(tmp_path):
    data = EXAMPLE_LOG.read_bytes()

    async def go(c):
        r = await c.post("/api/upload?kind=log&name=customer_service.jsonl.gz", data=data)
        info = await r.json()
        assert r.status == 200, info
        lengths = await post(c, "/api/lengths", [info["id"], "--model", "llama3-8b", "--estimate"])
        sim = await post(c, "/api/simulate", ["--model", "llama3-8b", "--gpu", "H100", "--requests", info["id"],
                                              "--rate", "5"])
        return lengths, sim

    (ls, ld), (ss, sd) = run(go)
    assert ls == 200 and ss == 200, (ld, sd)
    cli_lengths = cli_json("lengths", str(EXAMPLE_LOG), "--model", "llama3-8b", "--estimate")
    # the same analysis; only the file's name differs (the upload is a copy)
    for d in (ld, cli_lengths):
        d["inputs"]["files"] = ["X"]
    assert ld == cli_lengths
    cli_sim = cli_json("simulate", "--model", "llama3-8b", "--gpu", "H100", "--requests", str(EXAMPLE_LOG), "--rate", "5")
    sd["trace"]["source"] = cli_sim["trace"]["source"] = "X"
    assert sd == cli_sim


def test_errors_are_the_cli_messages_as_json():
    async def go(c):
        return [await post(c, "/api/plan", a) for a in (
            ["--model", "llama3-8b", "--gpu", "B999"],
            ["--model", "not-a-model-xyz", "--gpu", "H100"],
            ["--model", "llama3-8b", "--gpu", "H100", "-tp", "two"],
        )]

    (s1, e1), (s2, e2), (s3, e3) = run(go)
    assert s1 == s2 == s3 == 400
    assert "Unknown GPU 'B999'" in e1["error"]
    assert "Unknown model 'not-a-model-xyz'" in e2["error"]
    assert "--tensor-parallel-size" in e3["error"]
    p = subprocess.run([sys.executable, "-m", "kvplan.cli.main", "plan", "--model", "llama3-8b", "--gpu", "B999"],
                       capture_output=True, text=True, cwd=REPO, env=ENV)
    assert p.returncode == 2 and e1["error"] in p.stderr


def test_the_page_cannot_name_files_or_reach_the_hub():
    async def go(c):
        return [await post(c, "/api/plan", a) for a in (
            ["--model", "/etc/passwd", "--gpu", "H100"],
            ["--model", "some-org/some-model-on-the-hub", "--gpu", "H100"],
            ["--from-log", "/etc/passwd"],
            ["--model", "llama3-8b", "--gpu", "H100", "--serve-config", "/tmp/x.yaml"],
        )] + [await post(c, "/api/simulate", ["--model", "llama3-8b", "--gpu", "H100", "--requests", "/etc/passwd"]),
              await post(c, "/api/simulate", ["--model", "llama3-8b", "--gpu", "H100", "--profile", "/etc/passwd"])]

    answers = run(go)
    assert all(s == 400 for s, _ in answers), answers
    assert "Unknown model '/etc/passwd'" in answers[0][1]["error"]
    assert "not a flag the page can set" in answers[2][1]["error"]
    assert "not a file uploaded to this page" in answers[4][1]["error"]


def test_uploads_are_limited_and_validated():
    big = b"x" * (21 << 20)

    async def go(c):
        r1 = await c.post("/api/upload?kind=log&name=big.jsonl", data=big)
        r2 = await c.post("/api/upload?kind=config&name=config.json", data=b"{not json")
        r3 = await c.post("/api/upload?kind=config&name=config.json",
                          data=json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}).encode())
        return [(r.status, await r.json()) for r in (r1, r2, r3)]

    (s1, e1), (s2, e2), (s3, e3) = run(go)
    assert s1 == 413 and "upload too large" in e1["error"] and "20 MiB" in e1["error"]
    assert s2 == 400 and "config.json" in e2["error"] and "/tmp" not in e2["error"]
    assert s3 == 400 and "num_hidden_layers" in e3["error"]


def test_uploaded_config_plans_as_the_cli_plans_that_file(tmp_path):
    cfg = (REPO / "src/kvplan/models/catalog").glob("*Qwen2.5-7B*.json")
    cfg_path = next(iter(cfg))
    raw = json.loads(cfg_path.read_text())["config"]
    f = tmp_path / "config.json"
    f.write_text(json.dumps(raw))

    async def go(c):
        r = await c.post("/api/upload?kind=config&name=config.json", data=f.read_bytes())
        info = await r.json()
        return info, await post(c, "/api/plan", ["--model", info["id"], "--gpu", "L40S"])

    info, (status, d) = run(go)
    assert status == 200, d
    ref = cli_json("plan", "--model", str(f), "--gpu", "L40S")
    d["model"]["source"] = ref["model"]["source"] = "X"
    assert d["kv"] == ref["kv"] and d["startup"] == ref["startup"] and d["memory"] == ref["memory"]
    assert info["summary"] == d["model"]["summary"]


def test_headers_and_catalogs():
    async def go(c):
        r = await c.get("/")
        page = await r.text()
        heads = dict(r.headers)
        models = await (await c.get("/api/models")).json()
        gpus = await (await c.get("/api/gpus")).json()
        versions = await (await c.get("/api/versions")).json()
        return page, heads, models, gpus, versions

    page, heads, models, gpus, versions = run(go)
    csp = heads["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing loaded from elsewhere
    assert models == cli_json("models") and gpus == cli_json("gpus")
    assert versions["latest"] == "0.33"


def test_kvplan_ui_serves_and_stops(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "kvplan.cli.main", "ui", "--port", "0"], stderr=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, text=True, cwd=REPO, env=ENV)
    try:
        line = p.stderr.readline()
        assert "serving http://127.0.0.1:" in line, line
        url = line.split("serving ")[1].split()[0]
        import urllib.request

        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "api/versions", timeout=10) as r:  # noqa: S310 - loopback
                    assert json.loads(r.read())["latest"] == "0.33"
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        p.terminate()
        p.wait(timeout=30)


def test_warns_when_not_on_loopback(monkeypatch):
    from typer.testing import CliRunner

    import kvplan.ui.server as server
    from kvplan.cli.main import app

    monkeypatch.setattr(server, "serve", lambda host, port, open_browser, echo: None)
    r = CliRunner().invoke(app, ["ui", "--host", "10.1.2.3"])
    assert r.exit_code == 0 and "warning: binding 10.1.2.3, not 127.0.0.1" in r.output
    r = CliRunner().invoke(app, ["ui"])
    assert "warning" not in r.output


def test_plan_start_up_does_not_import_the_web_server():
    p = subprocess.run([sys.executable, "-c", "import sys, kvplan.cli.main; print('aiohttp' in sys.modules)"],
                       capture_output=True, text=True, cwd=REPO, env=ENV)
    assert p.stdout.strip() == "False", p.stderr


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis_profiles import examples  # noqa: E402

_TOKENS = st.one_of(st.sampled_from(["--model", "-m", "--gpu", "--from-log", "--profile", "--requests", "--html",
                                     "--output", "--tokenizer", "--serve-config", "-tp", "--enforce-eager",
                                     "--max-model-len", "/etc/passwd", "llama3-8b", "upload:0123456789abcdef",
                                     "--from-serve-cmd", "--dataset-path", "x"]), st.text(max_size=12))


@settings(max_examples=examples(300), deadline=None)
@given(command=st.sampled_from(["plan", "simulate", "lengths"]), argv=st.lists(_TOKENS, max_size=8))
def test_vetted_argv_holds_only_allowed_flags_and_no_paths(command, argv):
    """Whatever the page sends, what reaches the CLI parser is allowed flags, catalog models and
    files uploaded to this server: never a path the page named, never an unknown flag."""
    from kvplan.errors import UsageError
    from kvplan.ui import api

    uploads = api.Uploads()
    try:
        out = api.vet_argv(command, argv, uploads)
    except UsageError:
        return
    finally:
        uploads.close()
    values, bools = api.ALLOWED[command]
    i = 0
    while i < len(out):
        assert out[i] in values | bools, out
        if out[i] in values:
            if out[i] in ("--model", "-m"):
                assert not out[i + 1].startswith("/"), out
            i += 2
        else:
            i += 1


#: CLI options the page may not send, and why (anything else the command accepts, the page may)
_NOT_FROM_THE_PAGE = {
    "--format": "the page asks for JSON itself", "-f": "the page asks for JSON itself",
    "--output": "writes a file on the server", "-o": "writes a file on the server",
    "--html": "writes a file on the server", "--serve-config": "writes a file on the server",
    "--plot": "writes a file on the server",
    "--from-log": "a server-side path (the page uploads files instead)",
    "--tokenizer": "loads a tokenizer by path or name on the server", "-t": "loads a tokenizer by path or name",
    "--chat-template": "a server-side path", "files": "server-side paths (the page uploads files instead)",
    "--requests": "plan's --requests is a path (simulate's takes uploads)",
    "--from-bench-cmd": "the page has the traffic fields", "--from-serve-cmd": "the page has the plan fields",
    "--speculative-config": "its \"model\" names a config the server would load (a path or a hub id)",
    "--compact": "terminal layout", "--strict": "exit codes mean nothing to the page",
    "--capacity": "not on the page", "--find-saturation": "not on the page", "--per-request": "not on the page",
    "--profile": "not on the page", "--max-issues": "terminal output", "--max-record-bytes": "not on the page",
}


@pytest.mark.parametrize("command", ["plan", "simulate", "lengths"])
def test_the_page_may_send_every_flag_of_the_command_but_the_excluded_ones(command):
    """The page's allowed flags follow the CLI: a flag added to `kvplan simulate` (as --warm-prompts
    was) is either allowed from the page or excluded here with a reason, never forgotten."""
    import typer.main

    from kvplan.cli.main import app
    from kvplan.ui import api

    params = typer.main.get_command(app).commands[command].params
    cli = {o for p in params for o in (*p.opts, *getattr(p, "secondary_opts", ()))}
    values, bools = api.ALLOWED[command]
    assert (values | bools) <= cli, sorted((values | bools) - cli)
    forgotten = sorted(o for o in cli - (values | bools) if o not in _NOT_FROM_THE_PAGE)
    assert forgotten == [], forgotten
