"""The report contract (issue #13): one JSON writer, one Markdown escaping, one (kind, format) ->
renderer registry that every command's ``--format`` reads.

Every registered renderer draws a real result of its kind; JSON is strict (no NaN/Infinity), ASCII
and ends with one newline; Markdown cells keep their table intact whatever the text holds."""
from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from sim_helpers import FLAT, plan_request, trace

from kvplan._json import dumps_line, dumps_report, finite
from kvplan.report import registry as reports
from kvplan.report._markdown import cell, code, fence, row

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = [FIXTURES / "bench_runs" / "tiny-llama-cpu-rate0.5.json", FIXTURES / "bench_runs" / "tiny-llama-cpu-rate2.json"]


# --------------------------------------------------------------------------- JSON
def test_nan_and_infinity_become_null_at_any_depth():
    obj = {"a": math.nan, "b": [1.5, math.inf, (-math.inf, 2)], "c": {"d": float("nan")}, "e": True, "f": None}
    text = dumps_report(obj)
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"a": None, "b": [1.5, None, [None, 2]], "c": {"d": None}, "e": True, "f": None}
    assert json.loads(dumps_line(obj)) == json.loads(text)
    assert finite(math.nan) is None and finite(3.0) == 3.0


def test_json_is_ascii_indented_in_key_order_with_one_trailing_newline():
    text = dumps_report({"z": "max_model_len 4,048 − max_tokens ≥ 1 … ×", "a": [1, 2], "path": Path("/x/ü")})
    assert text.isascii() and "\\u2212" in text and "\\u2265" in text
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert text.splitlines()[1] == '  "z": "max_model_len 4,048 \\u2212 max_tokens \\u2265 1 \\u2026 \\u00d7",'
    d = json.loads(text)
    assert list(d) == ["z", "a", "path"] and d["z"] == "max_model_len 4,048 − max_tokens ≥ 1 … ×"
    assert d["path"] == "/x/ü"  # a value JSON has no type for is its str
    line = dumps_line({"a": 1, "b": "é"})
    assert line == '{"a":1,"b":"\\u00e9"}'


# --------------------------------------------------------------------------- Markdown
def _cells(line: str) -> int:
    """Cells of a GFM table row: pipes not escaped by a backslash (an escaped backslash does not escape)."""
    n, i = 0, 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        n += line[i] == "|"
        i += 1
    return n - 1


@pytest.mark.parametrize("text", ["a|b", "a\nb|c", "a\r\nb", "trailing\\", "x\\|y", "`code` | and ``` fence", "\\\\|"])
def test_a_cell_never_splits_or_ends_a_row(text):
    line = row(["first", text, "last"])
    assert "\n" not in line and "\r" not in line and "`" not in line
    assert _cells(line) == 3, line


def test_cell_escapes():
    assert cell("a|b") == "a\\|b"
    assert cell("one\ntwo\r\nthree") == "one two three"
    assert cell("it's `x`") == "it's 'x'"
    assert cell("C:\\logs\\x|y") == "C:\\\\logs\\\\x\\|y"  # a backslash stays a backslash, the pipe stays escaped
    assert cell(1234) == "1234" and cell(None) == "None"
    # inside a code span backslashes are literal: only the pipe (GFM splits rows first) and backticks
    assert code("a\\b|c`d") == "a\\b\\|c'd"
    assert fence("x ``` y") == "x ''' y"


# --------------------------------------------------------------------------- the registry
def test_the_cli_choices_are_the_registered_formats():
    T, J, M = "table", "json", "markdown"
    assert {k: reports.formats(k) for k in reports.kinds()} == {
        "plan": (T, J, M), "lengths": (T, J, M), "simulate": (T, J, M), "tune": (T, J, M), "doctor": (T, J, M),
        "profile": (T, J, M), "preflight": (T, J, M), "bench": (T, J), "bench-compare": (T, J),
        "calibration": (T, J)}
    assert reports.choices_text("tune") == "table, json or markdown" and reports.choices_text("bench") == "table or json"
    assert [m.value for m in reports.format_enum("plan")] == ["table", "json", "markdown"]
    with pytest.raises(KeyError, match="no 'xml' renderer"):
        reports.renderer("plan", "xml")


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> dict:
    """A real result of every kind, small."""
    from kvplan.bench.compare import compare
    from kvplan.bench.io import load_result
    from kvplan.memory import plan
    from kvplan.ops.doctor import diagnose, read_source
    from kvplan.sim import simulate
    from kvplan.sim.calibrate import calibrate
    from kvplan.tune.search import TuneSpace, tune
    from kvplan.slo import parse_slo
    from kvplan.workload.analysis import LengthsOptions, analyze_lengths

    tmp = tmp_path_factory.mktemp("samples")
    log = tmp / "requests.jsonl"
    log.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"question {i} – ünïcode | pipe"}],
                                       "max_tokens": 64}) + "\n" for i in range(20)) + "not json\n",
                   encoding="utf-8")
    req = plan_request(2048)
    pr = plan(req, what_ifs=False)
    out = {
        "plan": plan(plan_request(4096)),
        "lengths": analyze_lengths([str(log)], None, LengthsOptions(estimate=True)),
        "simulate": simulate(req, trace(n=20), profile=FLAT, plan_result=pr, slo=parse_slo("ttft_p99=2s")).to_dict(),
        "tune": tune(req, trace(n=20), parse_slo("ttft_p99=2s"), space=TuneSpace(max_num_seqs=(64, 128)),
                     profile=FLAT, processes=1, judge_saturation=False),
        "doctor": diagnose([read_source(str(FIXTURES / "doctor_logs" / "05-preemption-v0-vllm-6102.log"))]),
        "bench": load_result(RUNS[1]),
        "bench-compare": compare(load_result(RUNS[0]), load_result(RUNS[1])).to_dict(),
        "calibration": calibrate([str(p) for p in RUNS], device="CPU").to_dict(),
    }
    from test_preflight import _hostile_result
    from test_profile import TINY_LLAMA, _result

    from kvplan.hardware import custom_gpu, parse_size
    from kvplan.memory import PlanRequest
    from kvplan.models import load_model

    (tmp / "tiny").mkdir()
    (tmp / "tiny" / "config.json").write_text(json.dumps(TINY_LLAMA))
    tiny = plan(PlanRequest(model=load_model(str(tmp / "tiny")), gpu=custom_gpu(parse_size("16GiB"), "CPU"),
                            device="cpu", dtype="float32", vllm_version="0.32", max_model_len=2048,
                            kv_cache_memory_bytes=1 << 30))
    out["profile"] = _result(tiny, ok=False)
    out["preflight"] = _hostile_result()
    return out


def test_every_registered_renderer_renders_a_sample(samples):
    assert set(samples) == set(reports.kinds())
    for (kind, fmt), r in reports.RENDERERS.items():
        text = reports.render(kind, fmt, samples[kind])
        assert isinstance(text, str) and text.strip(), (kind, fmt)
        assert text.endswith("\n"), (kind, fmt)
        if fmt == "json":
            assert text.isascii() and not text.endswith("\n\n"), kind
            json.loads(text, parse_constant=lambda c: pytest.fail(f"{kind}: {c} in the JSON"))
        if fmt == "markdown":
            assert not text.endswith("\n\n"), kind
            for line in text.splitlines():
                assert not line.startswith("|") or line.rstrip().endswith("|"), (kind, line)
        if r.draws:  # a drawing drawn to a file: plain text, the file width
            assert "\x1b[" not in text and max(map(len, text.splitlines())) <= reports.FILE_WIDTH, kind


def test_emit_prints_text_and_writes_files(samples, tmp_path, capsys):
    reports.emit("tune", "json", samples["tune"])
    assert json.loads(capsys.readouterr().out)["schema_version"] == 1
    reports.emit("tune", "table", samples["tune"], output=tmp_path / "t.txt", top=1)
    assert (tmp_path / "t.txt").read_text(encoding="utf-8") == reports.render("tune", "table", samples["tune"], top=1)
    reports.emit("plan", "markdown", samples["plan"], compact=True)  # options a renderer does not take are dropped
    assert capsys.readouterr().out == reports.render("plan", "markdown", samples["plan"])
    buf = io.StringIO()
    from rich.console import Console

    reports.emit("plan", "table", samples["plan"], console=Console(file=buf, width=100), compact=True)
    assert "KV cache" in buf.getvalue()
