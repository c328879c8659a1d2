"""`kvplan ui` under hostile input: no other web page can drive it, a rebinding page cannot read it,
and the page reaches no file of the server. Every check runs against the real server: aiohttp's
test client (in process, 127.0.0.1) and a real socket speaking raw HTTP/1.1 to `start()`'s
listener, so what a browser on another site would send is sent byte for byte."""
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

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, KVPLAN_OFFLINE="1")

PLAN = {"argv": ["--model", "llama3-8b", "--gpu", "H100"]}


def run(coro_fn, **app_kw):
    """``coro_fn(client)`` against a fresh app on 127.0.0.1 (a free port)."""
    from aiohttp.test_utils import TestClient, TestServer

    from kvplan.ui.server import make_app

    async def main():
        server = TestServer(make_app(**app_kw), host="127.0.0.1", port=0)
        async with TestClient(server) as client:
            return await coro_fn(client)

    return asyncio.run(main())


async def answer(resp):
    body = await resp.read()
    try:
        return resp.status, json.loads(body)
    except ValueError:
        return resp.status, body.decode("utf-8", "replace")


def multipart():
    import io

    from aiohttp import FormData

    form = FormData()
    form.add_field("f", io.BytesIO(b'{"prompt": "x"}\n'), filename="x.jsonl")
    return form


# ---------------------------------------------------------------------------- cross-site and rebinding
def test_cross_site_simple_requests_are_refused_before_anything_runs():
    """What a page on another site can send without a preflight: text/plain, a form, multipart,
    or a foreign Origin. Each is refused; none starts a job or stores an upload."""
    async def go(c):
        host = f"127.0.0.1:{c.port}"
        out = {
            "text_plain": await answer(await c.post("/api/plan", data=json.dumps(PLAN),
                                                    headers={"Content-Type": "text/plain"})),
            "form": await answer(await c.post("/api/simulate", data={"argv": "x"})),
            "no_type": await answer(await c.post("/api/lengths", data=json.dumps(PLAN).encode(),
                                                 headers={"Content-Type": ""})),
            "upload_text": await answer(await c.post("/api/upload?kind=log&name=x.jsonl", data=b'{"prompt": "x"}\n',
                                                     headers={"Content-Type": "text/plain"})),
            "upload_multipart": await answer(await c.post("/api/upload?kind=log", data=multipart())),
            "foreign_origin": await answer(await c.post("/api/plan", json=PLAN, headers={"Origin": "http://evil.example"})),
            "null_origin": await answer(await c.post("/api/plan", json=PLAN, headers={"Origin": "null"})),
            "other_port_origin": await answer(await c.post("/api/plan", json=PLAN,
                                                           headers={"Origin": "http://127.0.0.1:1"})),
            "fetch_site": await answer(await c.get("/api/models", headers={"Sec-Fetch-Site": "cross-site"})),
            "same_origin": await answer(await c.post("/api/plan", json=PLAN, headers={"Origin": f"http://{host}"})),
        }
        return out, len(c.server.app[__import__("kvplan.ui.server", fromlist=["UPLOADS"]).UPLOADS]._paths)

    out, stored = run(go)
    for key in ("text_plain", "form", "no_type", "upload_text", "upload_multipart"):
        assert out[key][0] == 415, (key, out[key])
        assert "Content-Type: application/" in out[key][1]["error"], out[key]
    for key in ("foreign_origin", "null_origin", "other_port_origin", "fetch_site"):
        assert out[key][0] == 403 and "cross-site request refused" in out[key][1]["error"], (key, out[key])
    assert out["same_origin"][0] == 200 and out["same_origin"][1]["kv"]["num_gpu_blocks"] > 0
    assert stored == 0  # no upload was kept


def test_rebinding_host_names_are_refused():
    """A rebinding page is same-origin but its requests carry the attacker's name as Host."""
    async def go(c):
        p = c.port
        out = {}
        for host in (f"evil.example:{p}", f"127.0.0.1.evil.example:{p}", f"localhost.:{p}", "127.0.0.1",
                     f"127.0.0.1:{p + 1}", f"[::2]:{p}", "", f"127.0.0.1:{p}@evil", f"127.0.0.1:{p} x"):
            out[host] = (await answer(await c.get("/api/models", headers={"Host": host})))[0], \
                (await answer(await c.get("/", headers={"Host": host})))[0]
        for host in (f"127.0.0.1:{p}", f"localhost:{p}", f"LOCALHOST:{p}", f"[::1]:{p}"):
            out[host] = (await answer(await c.get("/api/versions", headers={"Host": host})))[0], \
                (await answer(await c.get("/", headers={"Host": host})))[0]
        return p, out

    p, out = run(go)
    for host in (f"127.0.0.1:{p}", f"localhost:{p}", f"LOCALHOST:{p}", f"[::1]:{p}"):
        assert out.pop(host) == (200, 200), host
    assert all(v == (403, 403) for v in out.values()), out


def test_host_rules_of_other_binds():
    from kvplan.ui.guard import Guard, is_loopback

    g = Guard("10.1.2.3")
    assert g.host_ok("10.1.2.3:8765", 8765) and g.host_ok("127.0.0.1:8765", 8765)
    assert not g.host_ok("10.1.2.4:8765", 8765) and not g.host_ok("evil.example:8765", 8765)
    assert not g.host_ok("10.1.2.3:8766", 8765) and not g.host_ok("10.1.2.3", 8765)
    assert Guard("10.1.2.3").host_ok("10.1.2.3", 80)  # a browser leaves out the default port
    w = Guard("0.0.0.0")  # a wildcard bind: the machine's names and any IP literal (no name to rebind)
    assert w.host_ok("192.168.7.9:8765", 8765) and w.host_ok(f"{socket.gethostname()}:8765", 8765)
    assert w.host_ok("[fe80::1]:8765", 8765) and not w.host_ok("evil.example:8765", 8765)
    n = Guard("kvplan-box.internal")
    assert n.host_ok("kvplan-box.internal:8765", 8765) and not n.host_ok("evil.example:8765", 8765)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("[::1]") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("example.org")


def test_token_is_required_on_every_api_call_when_set():
    async def go(c):
        out = {}
        for name, headers in (("none", {}), ("wrong", {"X-Kvplan-Token": "guess"}),
                              ("right", {"X-Kvplan-Token": "s3cret-token"})):
            out[name] = [(await answer(await c.get("/api/models", headers=headers)))[0],
                         (await answer(await c.post("/api/plan", json=PLAN, headers=headers)))[0],
                         (await answer(await c.post("/api/upload?kind=log&name=a.jsonl", data=b'{"prompt":"x"}\n',
                                                    headers=headers)))[0],
                         (await answer(await c.get("/api/tokenizer?model=llama3-8b", headers=headers)))[0]]
        page = await c.get("/?token=s3cret-token")  # the page itself is public code: served without it
        out["page"] = page.status
        return out

    out = run(go, token="s3cret-token")
    assert out["none"] == out["wrong"] == [403] * 4, out
    assert out["right"] == [200] * 4, out
    assert out["page"] == 200


def test_non_loopback_bind_prints_a_url_with_a_token(monkeypatch):
    """`kvplan ui --host ADDR` (not loopback) makes a token, prints it in the URL and opens that URL."""
    from kvplan.ui import server

    seen = {}

    async def fake_start(host, port, token=None, **kw):
        seen["token"] = token
        raise KeyboardInterrupt  # stop right after the URL would be known

    monkeypatch.setattr(server, "start", fake_start)
    server.serve("10.1.2.3", 8765, False, lambda line: seen.setdefault("echo", line))
    assert seen["token"] and len(seen["token"]) >= 32
    seen.clear()
    server.serve("127.0.0.1", 8765, False, lambda line: None)
    assert seen["token"] is None
    assert server.page_url("10.1.2.3", 8765, "abc") == "http://10.1.2.3:8765/?token=abc"
    assert server.page_url("::1", 8765, None) == "http://[::1]:8765/"


def test_page_sends_the_token_and_the_content_types():
    """The page's own script sends what the server requires (the browser tests run it for real)."""
    from importlib import resources

    js = resources.files("kvplan.ui").joinpath("static", "app.js").read_text()
    assert '"X-Kvplan-Token": TOKEN' in js and 'get("token")' in js
    assert '"application/octet-stream" : "application/json"' in js


# ---------------------------------------------------------------------------- what the page can ask for
def test_tokenizer_takes_only_catalog_and_upload_ids(tmp_path):
    secret = tmp_path / "tokenizer.json"
    secret.write_text("{}")

    async def go(c):
        out = {}
        for model in (str(tmp_path), str(secret), "/etc", "../../etc/passwd", "some-org/not-in-catalog", "",
                      "upload:0123456789abcdef"):
            out[model] = await answer(await c.get("/api/tokenizer", params={"model": model}))
        r = await c.post("/api/upload?kind=log&name=a.jsonl", data=b'{"prompt": "x"}\n')
        uid = (await r.json())["id"]
        out["upload"] = await answer(await c.get("/api/tokenizer", params={"model": uid}))
        out["catalog"] = await answer(await c.get("/api/tokenizer", params={"model": "llama3-8b"}))
        return uid, out

    uid, out = run(go)
    assert out.pop("upload") == (200, {"model": uid, "available": False})
    cat = out.pop("catalog")
    assert cat[0] == 200 and cat[1]["available"] in (True, False)
    for model, (status, body) in out.items():
        assert status == 400, (model, status, body)
        assert "catalog" in body["error"] or "not a file uploaded" in body["error"], body


# ---------------------------------------------------------------------------- the same over a real socket
def raw_http(port: int, method: str, path: str, headers: dict, body: bytes = b"", timeout: float = 60,
             head: bool = False):
    """One HTTP/1.1 request written byte for byte on a TCP socket (no client library to fix it up)."""
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items()),
             f"Content-Length: {len(body)}", "Connection: close", "", ""]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall("\r\n".join(lines).encode("latin-1") + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    if head:
        return int(top.split()[1]), top.decode("latin-1"), rest.decode("utf-8", "replace")
    return int(top.split()[1]), rest.decode("utf-8", "replace")


class UiProcess:
    """`kvplan ui --port 0` in its own session (stopped by PID), as a user starts it."""

    def __init__(self, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "kvplan.cli.main", "ui", "--port", "0", *args],
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=REPO,
                                     env=env or ENV, start_new_session=True)
        line = self.proc.stderr.readline()
        assert "serving http://" in line, line
        self.url = line.split("serving ")[1].split()[0]
        self.port = int(self.url.split(":")[2].split("/")[0])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the session we started
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def ui_process():
    ui = UiProcess()
    try:
        yield ui
    finally:
        ui.stop()


def test_cross_site_and_rebinding_refused_over_a_real_socket(ui_process):
    port = ui_process.port
    own = f"127.0.0.1:{port}"
    body = json.dumps(PLAN).encode()
    cases = {
        # a rebinding page: same-origin for the browser, but the Host is the attacker's name
        "rebind_get": ("GET", "/api/models", {"Host": f"attacker.example:{port}"}, b""),
        "rebind_page": ("GET", "/", {"Host": f"attacker.example:{port}"}, b""),
        "rebind_post": ("POST", "/api/plan", {"Host": f"attacker.example:{port}", "Content-Type": "application/json",
                                              "Origin": f"http://attacker.example:{port}"}, body),
        # a cross-site page's no-cors fetch: text/plain and its own Origin
        "no_cors_text": ("POST", "/api/plan", {"Host": own, "Content-Type": "text/plain;charset=UTF-8",
                                               "Origin": "http://attacker.example"}, body),
        "text_same_origin": ("POST", "/api/simulate", {"Host": own, "Content-Type": "text/plain"}, body),
        "json_foreign_origin": ("POST", "/api/plan", {"Host": own, "Content-Type": "application/json",
                                                      "Origin": "http://attacker.example"}, body),
        "upload_cross_site": ("POST", "/api/upload?kind=log&name=x", {"Host": own, "Content-Type": "text/plain",
                                                                      "Sec-Fetch-Site": "cross-site"}, b"x\n"),
        "preflight": ("OPTIONS", "/api/plan", {"Host": own, "Origin": "http://attacker.example",
                                               "Access-Control-Request-Method": "POST",
                                               "Access-Control-Request-Headers": "content-type"}, b""),
        "tokenizer_path": ("GET", "/api/tokenizer?model=/etc", {"Host": own}, b""),
        "own_page": ("POST", "/api/plan", {"Host": own, "Content-Type": "application/json",
                                           "Origin": f"http://{own}"}, body),
    }
    got = {k: raw_http(port, *v) for k, v in cases.items()}
    status, head, _ = raw_http(port, *cases["preflight"], head=True)
    assert status in (403, 405) and "access-control-allow" not in head.lower(), head
    assert got["rebind_get"][0] == got["rebind_page"][0] == got["rebind_post"][0] == 403, got
    assert "not an address this server was started on" in got["rebind_get"][1]
    assert got["no_cors_text"][0] in (403, 415) and got["text_same_origin"][0] == 415, got
    assert got["json_foreign_origin"][0] == 403 and got["upload_cross_site"][0] == 403, got
    assert got["tokenizer_path"][0] == 400
    assert got["own_page"][0] == 200 and json.loads(got["own_page"][1])["kv"]["num_gpu_blocks"] > 0


def test_kvplan_ui_open_opens_the_served_page(tmp_path):
    """`kvplan ui --open` hands the printed URL to the user's browser ($BROWSER here: a script that
    writes down what it was given), and that URL serves the page and its API."""
    import urllib.request

    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f"#!/bin/sh\necho \"$1\" > {opened}\n")
    browser.chmod(0o755)
    ui = UiProcess("--open", env=dict(ENV, BROWSER=f"{browser} %s"))
    try:
        deadline = time.monotonic() + 60
        while not (opened.exists() and opened.read_text().strip()):
            assert time.monotonic() < deadline, "the browser was not opened"
            time.sleep(0.1)
        url = opened.read_text().strip()
        assert url == ui.url
        with urllib.request.urlopen(url, timeout=30) as r:  # noqa: S310 - loopback
            assert b"<title>kvplan ui</title>" in r.read()
        with urllib.request.urlopen(url + "api/versions", timeout=30) as r:  # noqa: S310 - loopback
            assert json.loads(r.read())["latest"]
    finally:
        ui.stop()


def test_an_upload_named_dot_dot_is_stored_inside_its_folder():
    """`?name=..` made the server write to a directory (a 500); names are the file's own, made safe."""
    async def go(c):
        out = []
        for name in ("..", ".", "../../etc/passwd", ".bashrc", "a/b\\c.jsonl", ""):
            r = await c.post("/api/upload", params={"kind": "log", "name": name}, data=b'{"prompt": "x"}\n')
            out.append((name, r.status, await r.json()))
        uploads = c.server.app[__import__("kvplan.ui.server", fromlist=["UPLOADS"]).UPLOADS]
        paths = [uploads.path(body["id"], "x") for _, _, body in out if "id" in body]
        return out, paths, str(uploads.root)

    out, paths, root = run(go)
    assert all(status == 200 for _, status, _ in out), out
    assert all(p.startswith(root + "/") and "/../" not in p and not p.endswith("/.") for p in paths), paths
