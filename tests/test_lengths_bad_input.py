"""Bad input: every kind gives a message with the file and line, is counted by reason, and the
run goes on; --strict stops at the first one (exit 1); usage errors exit 2."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from kvplan.workload import LengthsOptions, StrictModeError, analyze_lengths

GOOD = json.dumps({"usage": {"prompt_tokens": 100, "completion_tokens": 10}, "max_tokens": 50})


def kvplan(*args, stdin=None):
    env = dict(os.environ, COLUMNS="120", KVPLAN_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], capture_output=True, text=True, env=env,
                          timeout=120, input=stdin)


def write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def test_each_bad_line_is_counted_with_file_and_line(tmp_path):
    lines = [GOOD, "{not json", json.dumps([1, 2]), json.dumps({"messages": "x"}),
             json.dumps({"usage": {"prompt_tokens": -3}}), "", json.dumps({"foo": 1}), GOOD]
    data = "\n".join(lines).encode() + b"\n\xff\xfe bad bytes\n" + GOOD.encode()
    path = write(tmp_path, "mixed.jsonl", data)
    r = analyze_lengths([path], None)
    assert r.records.read == 9 and r.records.used == 3
    assert r.records.skipped == {"malformed_json": 1, "wrong_type": 3, "unknown_shape": 1, "not_utf8": 1}
    assert r.records.lines_ignored == 1
    where = {(i.line, i.reason) for i in r.issues}
    assert {(2, "malformed_json"), (3, "wrong_type"), (4, "wrong_type"), (5, "wrong_type"), (7, "unknown_shape"),
            (9, "not_utf8")} <= where
    assert all(i.file == path for i in r.issues)
    assert any("usage.prompt_tokens must not be negative" in i.message for i in r.issues)


def test_files_that_cannot_be_read(tmp_path):
    empty = write(tmp_path, "empty.jsonl", b"")
    good = write(tmp_path, "good.jsonl", GOOD.encode() + b"\n")
    r = analyze_lengths([empty, str(tmp_path), str(tmp_path / "missing.jsonl"), good], None)
    assert r.files.skipped == {"empty_file": 1, "not_a_file": 1, "file_not_found": 1}
    assert r.records.used == 1 and r.files.read == 1
    msgs = {i.reason: i for i in r.issues}
    assert msgs["not_a_file"].file == str(tmp_path) and "directory" in msgs["not_a_file"].message


def test_huge_line_is_skipped_in_bounded_memory(tmp_path):
    big = json.dumps({"prompt": "x" * 300_000}).encode()
    path = write(tmp_path, "big.jsonl", GOOD.encode() + b"\n" + big + b"\n" + GOOD.encode() + b"\n")
    r = analyze_lengths([path], None, LengthsOptions(max_record_bytes=100_000))
    assert r.records.skipped == {"line_too_long": 1} and r.records.used == 2
    assert r.issues[0].line == 2


def test_truncated_gzip_keeps_what_was_read(tmp_path):
    body = "".join(json.dumps({"usage": {"prompt_tokens": i, "completion_tokens": i % 97}, "id": f"r{i * 7919}"}) + "\n"
                   for i in range(1, 20001)).encode()
    whole = gzip.compress(body)
    path = write(tmp_path, "cut.jsonl.gz", whole[: len(whole) // 2])
    r = analyze_lengths([path], None)
    assert 0 < r.records.used < 20000
    assert r.records.skipped == {"truncated_file": 1}
    issue = r.issues[0]
    assert issue.reason == "truncated_file" and issue.line == r.records.used + 1 and "truncated" in issue.message


def test_gzip_and_zstd_are_recognised_by_content(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    body = ("\n".join([GOOD] * 5) + "\n").encode()
    gz = write(tmp_path, "a.log", gzip.compress(body))  # the name says nothing
    zs = write(tmp_path, "b.jsonl.zst", zstandard.ZstdCompressor().compress(body))
    r = analyze_lengths([gz, zs], None)
    assert r.records.used == 10 and r.prompt_tokens.max == 100


def test_json_array_streams_and_reports_bad_elements(tmp_path):
    arr = "[\n  " + ",\n  ".join([GOOD, "42", GOOD]) + "\n]\n"
    path = write(tmp_path, "a.json", arr.encode())
    r = analyze_lengths([path], None)
    assert r.records.used == 2 and r.records.skipped == {"wrong_type": 1} and r.issues[0].line == 3
    broken = write(tmp_path, "b.json", ("[" + GOOD + ", {\"usage\": ").encode())
    r = analyze_lengths([broken], None)
    assert r.records.used == 1 and r.records.skipped == {"malformed_json": 1}


def test_csv_rows(tmp_path):
    csv_text = ("prompt_tokens,completion_tokens,max_tokens,messages\n100,5,20,\n"
                "x,5,20,\n7,1,,\"[{\"\"role\"\": \"\"user\"\", \"\"content\"\": \"\"hi\"\"}]\"\n")
    r = analyze_lengths([write(tmp_path, "a.csv", csv_text.encode())], None)
    assert r.records.used == 2 and r.records.skipped == {"wrong_type": 1} and r.issues[0].line == 3


def test_strict_stops_at_the_first_bad_record(tmp_path):
    path = write(tmp_path, "s.jsonl", (GOOD + "\n{oops\n" + GOOD + "\n").encode())
    with pytest.raises(StrictModeError) as exc:
        analyze_lengths([path], None, LengthsOptions(strict=True))
    assert exc.value.issue.line == 2
    out = kvplan("lengths", path, "--strict")
    assert out.returncode == 1 and f"{path}:2: not valid JSON" in out.stderr and "(--strict)" in out.stderr
    out = kvplan("lengths", path)
    assert out.returncode == 0 and "malformed_json 1" in out.stdout


def test_no_tokenizer_is_a_counted_reason_and_estimate_is_labelled(tmp_path):
    path = write(tmp_path, "c.jsonl", (json.dumps({"messages": [{"role": "user", "content": "hello there"}]}) + "\n"
                                       + GOOD + "\n").encode())
    r = analyze_lengths([path], None, LengthsOptions(estimate=False))
    assert r.records.skipped == {"no_tokenizer": 1} and not r.estimated
    for opts in (LengthsOptions(), LengthsOptions(estimate=True)):  # the one rule: estimate without a tokenizer
        r = analyze_lengths([path], None, opts)
        assert r.records.used == 2 and r.counted_by == {"usage": 1, "tokenizer": 0, "estimate": 1} and r.estimated
        assert r.notes[0].startswith("ESTIMATE")
    out = kvplan("lengths", path)
    assert "ESTIMATE" in out.stdout and "estimate 1" in out.stdout
    md = kvplan("lengths", path, "--format", "markdown")
    assert "ESTIMATE" in md.stdout.splitlines()[0]
    assert "no_tokenizer 1" in kvplan("lengths", path, "--no-estimate").stdout


def test_usage_errors_exit_2(tmp_path):
    good = write(tmp_path, "g.jsonl", GOOD.encode())
    assert kvplan("lengths", str(tmp_path / "*.nothing")).returncode == 2
    assert kvplan("lengths", good, "--percentile", "120").returncode == 2
    out = kvplan("lengths", good, "--tokenizer", str(tmp_path / "nope"))
    assert out.returncode == 2 and "no such file or folder" in out.stderr
    out = kvplan("lengths", good, "--tokenizer", str(tmp_path))
    assert out.returncode == 2 and "no tokenizer.json" in out.stderr


def test_nothing_usable_exits_1(tmp_path):
    out = kvplan("lengths", write(tmp_path, "bad.jsonl", b"{x\n"))
    assert out.returncode == 1 and "no usable record" in out.stderr


def test_stdin(tmp_path):
    out = kvplan("lengths", "-", "--format", "json", stdin=GOOD + "\n" + GOOD + "\n")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["records"]["used"] == 2
