"""Issue 30, findings 17 and 26 on the page: a model-limit error's fix is a shorter length only and
what-ifs planned at the fallback length say so; an uploaded log is named as the user dropped it,
never by the server's temporary path; an empty compare tray is its hint, not a column of headers.
The API parts run in process (aiohttp's test server); the drawing parts in headless Chromium."""
from __future__ import annotations

import json

from test_ui_api import EXAMPLE_LOG, post, run
from test_ui_browser import Page, chromium, in_browser  # noqa: F401  (the module fixture)


def test_an_uploaded_log_is_named_as_dropped_never_by_its_server_path():
    data = EXAMPLE_LOG.read_bytes()

    async def go(c):
        info = await (await c.post("/api/upload?kind=log&name=cs.jsonl.gz", data=data)).json()
        lengths = await post(c, "/api/lengths", [info["id"], "--model", "llama3-8b"])
        sim = await post(c, "/api/simulate", ["--model", "llama3-8b", "--gpu", "H100", "--requests", info["id"],
                                              "--rate", "5", "--num-requests", "200"])
        return c.server.app, lengths, sim

    app, (ls, ld), (ss, sd) = run(go)
    assert ls == 200 and ss == 200, (ld, sd)
    from kvplan.ui.server import UPLOADS

    root = str(app[UPLOADS].root)
    for answer in (ld, sd):
        assert root not in json.dumps(answer)
    assert ld["inputs"]["files"] == ["cs.jsonl.gz"]
    assert sd["trace"]["source"].startswith("cs.jsonl.gz: ")


def test_model_limit_fix_and_fallback_what_ifs_and_empty_tray(chromium):  # noqa: F811
    async def scenario(page: Page, url: str):
        await page.goto(url)
        tray = (await page.js("document.getElementById('compare').hidden"),
                await page.js("document.getElementById('compare-empty').hidden"))
        await page.set("model", "meta-llama/Llama-2-70b-chat-hf")
        await page.set("gpu", "A100-SXM4-80GB")
        await page.set("tp", "4")
        await page.set("mml", "8192")
        await page.plan_settled(["--model", "meta-llama/Llama-2-70b-chat-hf", "--gpu", "A100-SXM4-80GB",
                                 "--tensor-parallel-size", "4", "--max-model-len", "8192"])
        return tray, await page.text("verdict-fix"), await page.text("whatifs-title"), page.errors

    tray, fix, title, errors = in_browser(chromium, scenario)
    assert errors == [], errors
    assert tray == (True, False)  # the table hidden, its hint shown
    assert "--max-model-len 4096" in fix
    for offer in ("fp8", "--tensor-parallel-size 8", "--gpu-memory-utilization"):
        assert offer not in fix, fix  # none of them fixes a length above the model's limit
    assert title == "What if (each row planned at --max-model-len 4,096, the fallback length: 8,192 fails)"
