"""`kvplan ui` in a real headless Chromium (Debian's package), driven over the DevTools protocol with
aiohttp's websocket client (a kvplan dependency; no Playwright download). The server runs in this
process on 127.0.0.1 and a free port; chromium runs in its own process group, stopped by PID.

What the page shows must be what `kvplan plan|simulate --format json` prints for the flags the page
says it used; files dropped on the page are read; bad input gives a clear message and the page goes
on working; no console error, no failed load. Screenshots: artifacts/test/ui-*.png.

Without chromium these tests skip, except in CI (CI set) where they fail: `make chromium` installs it.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Optional

import pytest

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "artifacts" / "test"
ENV = dict(os.environ, KVPLAN_OFFLINE="1")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--remote-debugging-port=0",
                  "--remote-allow-origins=*", "--hide-scrollbars")


def chromium_bin() -> str:
    path = "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else shutil.which("chromium")
    if not path:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: run `make chromium` (bash scripts/chromium-env)")
        pytest.skip("chromium is not installed (`make chromium` installs Debian's package); CI runs these")
    return path


def cli_json(*args: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args, "--format", "json"], capture_output=True,
                       text=True, timeout=300, cwd=REPO, env=ENV)
    assert p.stdout.strip(), p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def chromium():
    exe = chromium_bin()
    tmp = Path(tempfile.mkdtemp(prefix="kvplan-ui-chromium-"))
    log = open(tmp / "chromium.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}", "about:blank"], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        marker = tmp / "profile" / "DevToolsActivePort"
        deadline = time.monotonic() + 90
        while not (marker.is_file() and marker.read_text().strip()):
            assert proc.poll() is None, (tmp / "chromium.log").read_text(errors="replace")[-2000:]
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.1)
        yield int(marker.read_text().split()[0])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the group we started
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


class Page:
    """One tab over the DevTools protocol: evaluate JS, wait for a condition, screenshot; records
    every exception, console error and failed load."""

    def __init__(self, ws):
        self.ws, self.errors, self.pending, self.ids = ws, [], {}, iter(range(1, 1 << 30))
        self.loaded = asyncio.Event()

    async def reader(self):
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
                continue
            method, params = data.get("method"), data.get("params", {})
            if method == "Runtime.exceptionThrown":
                d = params["exceptionDetails"]
                self.errors.append("exception: " + str((d.get("exception") or {}).get("description") or d.get("text")))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
                self.errors.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                         for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                self.errors.append("log: " + params["entry"].get("text", "") + " " + params["entry"].get("url", ""))
            elif method == "Network.loadingFailed":
                self.errors.append("load failed: " + params.get("errorText", ""))
            elif method == "Page.loadEventFired":
                self.loaded.set()

    async def call(self, method: str, **params):
        i = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[i] = fut
        await self.ws.send_str(json.dumps({"id": i, "method": method, "params": params}))
        res = await asyncio.wait_for(fut, 120)
        if "error" in res:
            raise AssertionError(f"{method}: {res['error']}")
        return res.get("result", {})

    async def js(self, expr: str):
        res = await self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise AssertionError(f"JS failed: {expr[:200]}: {res['exceptionDetails']}")
        return res["result"].get("value")

    async def wait(self, expr: str, timeout: float = 90.0, what: str = ""):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self.js(f"Boolean({expr})"):
                return
            await asyncio.sleep(0.1)
        body = await self.js("document.body.innerText")
        raise AssertionError(f"timed out waiting for {what or expr}; page: {body[:1500]}")

    async def goto(self, url: str):
        self.loaded.clear()
        await self.call("Page.navigate", url=url)
        await asyncio.wait_for(self.loaded.wait(), 90)
        await self.wait("document.body.dataset.ready === '1'", what="the page to be ready")

    async def set(self, element_id: str, value: str):
        """Type a value as the user would: set it and fire the input event the page listens to."""
        await self.js(f"(() => {{ const e = document.getElementById({json.dumps(element_id)}); "
                      f"e.value = {json.dumps(value)}; e.dispatchEvent(new Event('input', {{bubbles: true}})); }})()")

    async def plan_settled(self, argv: list[str]):
        """Wait until the page has shown the plan for exactly ``argv`` (debounced, answered, drawn)."""
        await self.wait(f"document.body.dataset.planArgv === {json.dumps(json.dumps(argv, separators=(',', ':')))}"
                        " && document.body.dataset.planSeq === String(window.kvplanUi.state.planSeq)",
                        what=f"the plan for {argv}")

    async def drop(self, name: str, data: bytes, mime: str = "application/octet-stream"):
        b64 = base64.b64encode(data).decode()
        await self.js(f"(() => {{ const bytes = Uint8Array.from(atob({json.dumps(b64)}), c => c.charCodeAt(0)); "
                      f"const dt = new DataTransfer(); dt.items.add(new File([bytes], {json.dumps(name)}, "
                      f"{{type: {json.dumps(mime)}}})); document.dispatchEvent(new DragEvent('drop', "
                      "{dataTransfer: dt, bubbles: true, cancelable: true})); })()")

    async def text(self, element_id: str) -> str:
        return await self.js(f"document.getElementById({json.dumps(element_id)}).textContent")

    async def screenshot_top(self, name: str, width: int = 1280, height: int = 820):
        """The first screen only (the README's picture: docs/img/kvplan-ui.png is a copy of it)."""
        await self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                        mobile=False)
        await asyncio.sleep(0.3)
        shot = await self.call("Page.captureScreenshot", format="png")
        path = ARTIFACTS / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        await self.call("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1,
                        mobile=False)
        return path

    async def screenshot(self, name: str):
        height = await self.js("Math.ceil(document.documentElement.scrollHeight)")
        await self.call("Emulation.setDeviceMetricsOverride", width=1400, height=min(int(height), 6000),
                        deviceScaleFactor=1, mobile=False)
        shot = await self.call("Page.captureScreenshot", format="png")
        path = ARTIFACTS / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        await self.call("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1,
                        mobile=False)
        return path


def in_browser(devtools_port: int, scenario, token: Optional[str] = None):
    """Start the server (127.0.0.1, a free port; requiring ``token`` when given) and a tab, run
    ``scenario(page, base_url)``, stop both."""
    import aiohttp

    from kvplan.ui.server import start

    async def main():
        runner, port = await start("127.0.0.1", 0, token)
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{devtools_port}/json/new?about:blank", method="PUT")
            with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - loopback DevTools endpoint
                target = json.loads(r.read())
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    page = Page(ws)
                    task = asyncio.ensure_future(page.reader())
                    for domain in ("Runtime", "Log", "Page", "Network"):
                        await page.call(f"{domain}.enable")
                    await page.call("Emulation.setDeviceMetricsOverride", width=1400, height=1000,
                                    deviceScaleFactor=1, mobile=False)
                    try:
                        return await scenario(page, f"http://127.0.0.1:{port}/")
                    finally:
                        await page.call("Page.navigate", url="about:blank")
                        task.cancel()
            urllib.request.urlopen(f"http://127.0.0.1:{devtools_port}/json/close/{target['id']}", timeout=30)
        finally:
            await runner.cleanup()

    return asyncio.run(asyncio.wait_for(main(), 600))


def _expected_plan_argv(model, gpu, *flags):
    return ["--model", model, "--gpu", gpu, *flags]


def test_plan_view_shows_the_cli_numbers(chromium):
    async def scenario(page: Page, url: str):
        await page.goto(url)
        shown = []
        steps = [("model", "Qwen/Qwen2.5-7B-Instruct"), ("gpu", "A100-SXM4-80GB"), ("tp", "2"), ("mml", "16384")]
        flags: list[str] = []
        for element_id, value in steps:
            await page.set(element_id, value)
            if element_id == "tp":
                flags += ["--tensor-parallel-size", value]
            if element_id == "mml":
                flags += ["--max-model-len", value]
            argv = _expected_plan_argv(await page.js("document.getElementById('model').value"),
                                       await page.js("document.getElementById('gpu').value"), *flags)
            await page.plan_settled(argv)
            shown.append((argv, await page.text("kv-line"), await page.js("document.getElementById('verdict').dataset.ok"),
                          await page.text("verdict-error"), await page.text("serve-cmd"), await page.text("cli-cmd"),
                          await page.text("serve-yaml")))
        await page.screenshot("ui-plan.png")
        await page.screenshot_top("ui-readme.png")
        # a plan vLLM would refuse: its exact error and the fix
        await page.set("model", "meta-llama/Llama-2-70b-chat-hf")
        await page.set("gpu", "H100-SXM5-80GB")
        await page.set("tp", "1")
        await page.set("mml", "")
        bad_argv = ["--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "H100-SXM5-80GB"]
        await page.plan_settled(bad_argv)
        bad = (await page.js("document.getElementById('verdict').dataset.ok"), await page.text("verdict-error"),
               await page.text("verdict-title"), await page.text("verdict-fix"), await page.text("serve-cmd"),
               await page.text("run-title"))
        await page.screenshot("ui-plan-refused.png")
        # the URL holds the state: a reload shows the same plan
        await page.set("tp", "4")
        await page.plan_settled(bad_argv + ["--tensor-parallel-size", "4"])
        before = await page.text("kv-line")
        await page.goto(await page.js("location.href"))
        restored = (await page.js("document.getElementById('tp').value"), await page.js("document.getElementById('model').value"))
        await page.plan_settled(bad_argv + ["--tensor-parallel-size", "4"])
        after = await page.text("kv-line")
        svgs = await page.js("[document.querySelectorAll('#mem-stack svg rect[data-seg]').length, "
                             "document.querySelectorAll('#cap-curve svg circle').length]")
        return shown, bad, (before, after, restored), svgs, page.errors

    shown, bad, (before, after, restored), svgs, errors = in_browser(chromium, scenario)
    assert errors == [], errors
    for argv, kv_line, ok, error, serve, cli_line, yaml_text in shown:
        ref = cli_json("plan", *argv)
        assert kv_line == "\n".join(ref["kv"]["log_lines"]), argv
        assert ok == str(ref["startup"]["ok"]).lower()
        assert error == (ref["startup"]["error"] or "")
        assert serve == ref["serve_command"]
        assert yaml_text == ref["serve_config_yaml"]
        assert cli_line == "kvplan plan " + " ".join(argv)
    ref = cli_json("plan", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "H100-SXM5-80GB")
    assert bad[0] == "false" and bad[1] == ref["startup"]["error"] and "would not start" in bad[2]
    fw = ref["startup"]["fits_with"]
    assert bad[3].startswith(f"Fix: --tensor-parallel-size {fw['tensor_parallel_size']}"), bad[3]
    # like `kvplan plan`, the page never offers the command that fails: the layout that starts instead
    assert ref["serve_command_starts"] is False and bad[4] == fw["serve_command"] and "instead" in bad[5]
    assert restored == ("4", "meta-llama/Llama-2-70b-chat-hf") and before == after and before
    assert svgs[0] >= 4 and svgs[1] >= 1, svgs


BROKEN_LOG = "\n".join([
    json.dumps({"messages": [{"role": "user", "content": "hello " * 200}], "max_tokens": 128,
                "usage": {"prompt_tokens": 230, "completion_tokens": 90}}),
    "{this line is broken",
    json.dumps({"messages": [{"role": "user", "content": "summarise " * 400}], "max_tokens": 256,
                "usage": {"prompt_tokens": 812, "completion_tokens": 200}}),
    "not json at all",
    *[json.dumps({"messages": [{"role": "user", "content": "q" * (50 * i)}], "max_tokens": 64,
                  "usage": {"prompt_tokens": 40 + 10 * i, "completion_tokens": 30 + i}}) for i in range(1, 40)],
]) + "\n"


def test_drop_config_and_log_then_simulate(chromium, tmp_path):
    cfg_path = next((REPO / "src/kvplan/models/catalog").glob("*Qwen2.5-7B*.json"))
    config = json.dumps(json.loads(cfg_path.read_text())["config"]).encode()
    (tmp_path / "config.json").write_bytes(config)

    async def scenario(page: Page, url: str):
        await page.goto(url)
        await page.set("gpu", "L40S")
        await page.drop("config.json", config, "application/json")
        await page.wait("document.getElementById('model').value.startsWith('config.json (')", what="the config upload")
        upload = await page.js("window.kvplanUi.state.upload")
        await page.plan_settled(["--model", upload, "--gpu", "L40S"])
        dropped = (await page.text("kv-line"), await page.text("serve-cmd"), await page.text("model-summary"))
        # back to a catalog model, then the traffic view with a dropped request log
        await page.set("model", "meta-llama/Meta-Llama-3-8B")
        await page.set("gpu", "H100-SXM5-80GB")
        await page.js("document.getElementById('tab-traffic').click()")
        await page.drop("requests.jsonl", BROKEN_LOG.encode())
        await page.wait("document.getElementById('lengths-summary').dataset.used", what="the log's analysis")
        lengths = (await page.js("document.getElementById('lengths-summary').dataset.used"),
                   await page.text("lengths-summary"))
        await page.set("log-rate", "2")
        await page.js("document.getElementById('run-sim').click()")
        await page.wait("document.body.dataset.simDone === '1'", what="the log replay")
        log_sim = (await page.js("document.body.dataset.simArgv"), await page.text("sim-facts"), await page.text("error"))
        # a vllm-bench-style workload, with SLOs, into the compare tray twice
        await page.js("document.getElementById('wl-bench').click()")
        for element_id, value in (("rate", "6"), ("num-prompts", "200"), ("in-len", "512"), ("out-len", "64"),
                                  ("slo-ttft", "500"), ("slo-tpot", "1")):
            await page.set(element_id, value)
        await page.js("document.getElementById('add-compare').click()")
        await page.wait("document.body.dataset.simDone === '2' && window.kvplanUi.state.compare.length === 1",
                        what="the first simulation")
        sim_argv = json.loads(await page.js("document.body.dataset.simArgv"))
        shown = {"facts": await page.text("sim-facts"),
                 "ttft_row": await page.js("Array.from(document.querySelectorAll('#sim-pct tr[data-metric=ttft] td'))"
                                           ".map(t => t.textContent)"),
                 "passed": await page.js("document.getElementById('sim-verdict').dataset.passed"),
                 "checks": await page.js("Array.from(document.querySelectorAll('#sim-verdict li')).map(l => l.className)"),
                 "clock": await page.text("sim-clock"),
                 "lines": await page.js("document.querySelectorAll('#sim-timeline polyline, #sim-cdf polyline').length")}
        await page.set("tp", "2")
        await page.js("document.getElementById('add-compare').click()")
        await page.wait("window.kvplanUi.state.compare.length === 2", what="the second simulation")
        tray = await page.js("Array.from(document.querySelectorAll('#compare tbody tr')).map(r => r.innerText)")
        await page.screenshot("ui-traffic.png")
        # the link holds the view, the workload and the tray: opening it shows the same comparison
        await page.goto(await page.js("location.href"))
        await page.wait("window.kvplanUi.state.compare.length === 2", what="the tray restored from the URL")
        reopened = (await page.js("Array.from(document.querySelectorAll('#compare tbody tr')).map(r => r.innerText)"),
                    await page.js("document.getElementById('view-traffic').hidden"),
                    await page.js("document.getElementById('slo-tpot').value"))
        assert reopened == (tray, False, "1"), reopened
        return dropped, lengths, log_sim, sim_argv, shown, tray, page.errors

    dropped, lengths, log_sim, sim_argv, shown, tray, errors = in_browser(chromium, scenario)
    assert errors == [], errors
    ref = cli_json("plan", "--model", str(tmp_path / "config.json"), "--gpu", "L40S")
    assert dropped[0] == "\n".join(ref["kv"]["log_lines"])
    assert dropped[1] == ref["serve_command"].replace(ref["model"]["id"], "MODEL_DIR")
    assert dropped[2] == "uploaded: " + ref["model"]["summary"]
    assert int(lengths[0]) == 41 and "skipped" in lengths[1], lengths
    assert "--requests" in log_sim[0] and "throughput" in log_sim[1] and log_sim[2] == "", log_sim
    assert sim_argv[:4] == ["--model", "meta-llama/Meta-Llama-3-8B", "--gpu", "H100-SXM5-80GB"]
    ref = cli_json("simulate", *sim_argv)
    assert f"{ref['trace']['source']}" in shown["facts"]
    assert f"{ref['requests']['completed']:,} / {ref['requests']['total']:,}" in shown["facts"]
    p99 = ref["latency_s"]["ttft"]["p99"]
    assert shown["ttft_row"][3] == (f"{p99 * 1000:,.1f} ms" if p99 < 1 else f"{p99:,.2f} s")
    assert shown["passed"] == str(ref["verdict"]["passed"]).lower()
    assert shown["checks"] == ["pass" if c["passed"] else "fail" for c in ref["verdict"]["checks"]]
    assert "fail" in shown["checks"]  # a 1 ms TPOT is missed
    assert ref["profile"]["source"] in shown["clock"]
    assert shown["lines"] >= 5
    assert any(r.startswith("TP × PP × DP") and "1 × 1 × 1" in r and "2 × 1 × 1" in r for r in tray), tray


def test_bad_input_gets_a_message_and_the_page_keeps_working(chromium):
    async def scenario(page: Page, url: str):
        await page.goto(url + "?gpu=B999&model=meta-llama/Meta-Llama-3-8B")
        await page.wait("!document.getElementById('error').hidden", what="the unknown-GPU message")
        unknown_gpu = await page.text("error")
        await page.set("gpu", "H100-SXM5-80GB")
        await page.plan_settled(["--model", "meta-llama/Meta-Llama-3-8B", "--gpu", "H100-SXM5-80GB"])
        cleared = await page.js("document.getElementById('error').hidden")
        await page.drop("config.json", b'{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,,}')
        await page.wait("!document.getElementById('error').hidden", what="the malformed config message")
        malformed = await page.text("error")
        await page.js("(() => { const dt = new DataTransfer(); dt.items.add(new File([new Uint8Array(200 * 1024 * 1024)],"
                      " 'huge.jsonl')); window.kvplanUi.state.view = 'traffic'; document.dispatchEvent(new DragEvent("
                      "'drop', {dataTransfer: dt, bubbles: true, cancelable: true})); })()")
        await page.wait("document.getElementById('error').textContent.includes('huge.jsonl')", what="the size message")
        huge = await page.text("error")
        await page.js("window.kvplanUi.state.view = 'plan'")
        await page.drop("requests.jsonl", b"{broken\nnot json\n[1,2\n")
        await page.wait("document.getElementById('lengths-summary').dataset.used === '0'", what="the broken log")
        broken = await page.text("error")
        # and the page still plans
        await page.set("tp", "2")
        await page.plan_settled(["--model", "meta-llama/Meta-Llama-3-8B", "--gpu", "H100-SXM5-80GB",
                                 "--tensor-parallel-size", "2"])
        still = (await page.text("kv-line"), await page.js("document.getElementById('error').hidden"))
        await page.screenshot("ui-bad-input.png")
        return unknown_gpu, cleared, malformed, huge, broken, still, page.errors

    unknown_gpu, cleared, malformed, huge, broken, still, errors = in_browser(chromium, scenario)
    # the only errors the browser logs are the API's 4xx answers the page turned into messages
    assert all(e.startswith("log: Failed to load resource: the server responded with a status of 4") for e in errors), errors
    assert "Unknown GPU 'B999'" in unknown_gpu and cleared is True
    assert "config.json" in malformed and "Traceback" not in malformed, malformed
    assert "200.0 MiB" in huge and "20 MiB upload limit" in huge, huge
    assert "no usable record" in broken, broken
    ref = cli_json("plan", "--model", "meta-llama/Meta-Llama-3-8B", "--gpu", "H100-SXM5-80GB", "-tp", "2")
    assert still == ("\n".join(ref["kv"]["log_lines"]), True)


def test_sizing_view_answers_per_gpu_type_as_tune_does(chromium):
    """The "How many GPUs" view: per GPU type the fewest GPUs that carry the rate (`kvplan tune --gpus
    auto`, the same JSON), the cost, a saturation curve, the launch; the link reopens the view."""

    async def scenario(page: Page, url: str):
        await page.goto(url)
        await page.set("model", "qwen2.5-0.5b")
        await page.js("document.getElementById('tab-traffic').click()")
        for element_id, value in (("in-len", "256"), ("out-len", "64"), ("slo-ttft", "500")):
            await page.set(element_id, value)
        await page.js("document.getElementById('tab-sizing').click()")
        for element_id, value in (("size-rate", "40"), ("size-gpus", "L4,H100"), ("size-lb", "round_robin"),
                                  ("size-prices", "L4=0.7,H100=2.5")):
            await page.set(element_id, value)
        await page.js("document.getElementById('run-size').click()")
        await page.wait("document.body.dataset.sizeDone === '1'", timeout=300, what="the sizing answer")
        argv = json.loads(await page.js("document.body.dataset.sizeArgv"))
        rows = await page.js("Array.from(document.querySelectorAll('#size-table tbody tr'))"
                             ".map(r => [r.dataset.gpu, r.dataset.gpus, r.innerText])")
        shown = {"verdict": await page.js("document.getElementById('size-verdict').dataset.gpus"),
                 "curves": await page.js("document.querySelectorAll('#size-curve polyline').length"),
                 "launch": await page.text("size-launch"), "error": await page.text("error"),
                 "cli": await page.text("cli-cmd")}
        await page.screenshot("ui-sizing.png")
        await page.goto(await page.js("location.href"))
        await page.wait("document.body.dataset.ready === '1'", what="the page reopened from the link")
        reopened = (await page.js("document.getElementById('view-sizing').hidden"),
                    await page.js("document.getElementById('size-gpus').value"),
                    await page.js("document.getElementById('size-lb').value"))
        return argv, rows, shown, reopened, page.errors

    argv, rows, shown, reopened, errors = in_browser(chromium, scenario)
    assert errors == [], errors
    assert reopened == (False, "L4,H100", "round_robin"), reopened
    assert argv[:2] == ["--model", "qwen2.5-0.5b"] and "--gpus" in argv and "auto" in argv
    assert shown["error"] == "" and shown["cli"].startswith("kvplan tune --model qwen2.5-0.5b")
    ref = cli_json("tune", *argv)
    want = {s["gpu"]: s for s in ref["per_gpu_type"]}
    assert [r[0] for r in rows] == [s["gpu"] for s in ref["per_gpu_type"]]
    for gpu, gpus, text in rows:
        s = want[gpu]
        assert gpus == ("" if s["gpus"] is None else str(s["gpus"])), (gpu, gpus, s["gpus"])
        if s["cost"].get("usd_per_hour") is not None:
            assert f"${s['cost']['usd_per_hour']:,.2f}" in text, text
    assert shown["verdict"] == str(ref["winner"]["gpus"])
    assert shown["curves"] >= 1 and "vllm serve" in shown["launch"]


def test_the_page_carries_its_token(chromium):
    """`kvplan ui --host ADDR` prints a URL with ?token=...: the page sends it on every API call (a
    plan, an upload, a simulation), keeps it in its own links, and without it the API refuses."""
    async def scenario(page: Page, url: str):
        await page.goto(url + "?token=t0k3n-for-the-test")
        argv = ["--model", await page.js("document.getElementById('model').value"),
                "--gpu", await page.js("document.getElementById('gpu').value")]
        await page.plan_settled(argv)
        ok = await page.js("document.getElementById('verdict').dataset.ok")
        await page.drop("requests.jsonl", BROKEN_LOG.encode())
        await page.wait("document.getElementById('lengths-summary').dataset.used > 0", what="the uploaded log")
        link = await page.js("location.search")
        errors = list(page.errors)  # before the refused call below, which the browser logs as a failed load
        refused = await page.js("fetch('/api/models').then(r => r.status)")
        return ok, link, refused, errors

    ok, link, refused, errors = in_browser(chromium, scenario, token="t0k3n-for-the-test")
    assert errors == [], errors
    assert ok in ("true", "false") and "token=t0k3n-for-the-test" in link
    assert refused == 403


def test_another_site_cannot_drive_the_page_in_a_real_browser(chromium):
    """A page on another origin does what a browser lets any site do: no-cors POSTs of text/plain
    JSON and of a file, and a JSON POST that needs a preflight. Nothing runs and nothing is stored."""
    from aiohttp import web

    async def scenario(page: Page, url: str):
        target = url.rstrip("/")
        evil_js = f"""
        (async () => {{
          const out = [];
          const body = JSON.stringify({{argv: ["--model", "llama3-8b", "--gpu", "H100"]}});
          for (const [path, opts] of [
            ["/api/plan", {{method: "POST", mode: "no-cors", body, headers: {{"Content-Type": "text/plain"}}}}],
            ["/api/simulate", {{method: "POST", mode: "no-cors", body}}],
            ["/api/upload?kind=log&name=x.jsonl", {{method: "POST", mode: "no-cors", body: "{{}}\\n"}}],
            ["/api/plan", {{method: "POST", body, headers: {{"Content-Type": "application/json"}}}}],
            ["/api/models", {{}}],
          ]) {{
            try {{ const r = await fetch("{target}" + path, opts); out.push(r.type + ":" + r.status); }}
            catch (e) {{ out.push("blocked"); }}
          }}
          document.title = JSON.stringify(out);
        }})();
        """
        evil = web.Application()

        async def home(request):
            return web.Response(text="<!doctype html><title>evil</title><script src='/evil.js'></script>",
                                content_type="text/html")

        async def script(request):
            return web.Response(text=evil_js, content_type="application/javascript")

        evil.router.add_get("/", home)
        evil.router.add_get("/evil.js", script)
        runner = web.AppRunner(evil)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        evil_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            page.loaded.clear()
            await page.call("Page.navigate", url=f"http://localhost:{evil_port}/")
            await page.wait("document.title.startsWith('[')", what="the attack page's requests")
            tried = json.loads(await page.js("document.title"))
        finally:
            await runner.cleanup()
        import aiohttp  # the server runs in this event loop: ask it without blocking the loop

        upload_id = "upload:" + hashlib.sha256(b"{}\n").hexdigest()[:16]
        async with aiohttp.ClientSession() as session:
            async with session.get(target + "/api/jobs") as r:
                jobs = await r.json()
            async with session.get(f"{target}/api/tokenizer", params={"model": upload_id}) as r:
                stored = r.status  # 400: not a file uploaded to this page
        return tried, jobs, stored

    tried, jobs, stored = in_browser(chromium, scenario)
    assert len(tried) == 5 and tried[3] == "blocked" and tried[4] == "blocked", tried  # CORS: no answer to read
    assert jobs["started"] == 0, (tried, jobs)  # no plan, simulation or config read ever ran
    assert stored == 400  # the upload was not kept
