"""Prometheus HTTP API answers: kvplan.ops.prom.parse_response either returns a result or raises
PromResponseError naming the query -- for any JSON, any bytes (hypothesis) -- and reads the
documented shapes exactly (NaN/Inf values, warnings, native-histogram samples skipped)."""
from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan.ops.prom.parse import PromResponseError, parse_response

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=20)
sample = st.tuples(st.floats(allow_nan=False, allow_infinity=False, width=32),
                   st.sampled_from(["1", "0.5", "NaN", "+Inf", "-Inf", "x", ""]) | st.integers())
envelopes = st.fixed_dictionaries({
    "status": st.sampled_from(["success", "error", "weird", None]),
    "data": st.one_of(json_values, st.fixed_dictionaries({
        "resultType": st.sampled_from(["vector", "matrix", "scalar", "string", "bogus"]),
        "result": st.one_of(json_values, st.lists(st.fixed_dictionaries({
            "metric": st.dictionaries(st.text(max_size=5), st.text(max_size=5) | st.integers(), max_size=3),
            "value": st.lists(sample.map(list), max_size=1).map(lambda x: x[0] if x else None),
            "values": st.lists(sample.map(list), max_size=3)}), max_size=3))})),
    "errorType": st.text(max_size=5), "error": json_values})


@settings(max_examples=250, deadline=None)
@given(envelopes, st.sampled_from(["query", "query_range", "series"]))
def test_any_envelope_parses_or_names_the_query(doc, endpoint):
    try:
        res = parse_response(json.dumps(doc), "q{x}", endpoint)
    except PromResponseError as e:
        assert str(e).startswith("query 'q{x}': ") and e.query == "q{x}"
        return
    for s in res.series:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in s.labels)
        assert all(isinstance(t, float) and isinstance(v, float) for t, v in s.samples)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_parse_or_name_the_query(body):
    try:
        parse_response(body, "up", "query")
    except PromResponseError as e:
        assert "query 'up'" in str(e)


def test_documented_shapes():
    body = {"status": "success", "warnings": ["partial"], "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "x", "job": "j"}, "values": [[1.5, "1"], [2.5, "NaN"], [3.5, "+Inf"]]}]}}
    r = parse_response(json.dumps(body), "x[1m]", "query")
    (s,) = r.series
    assert s.name == "x" and s.label("job") == "j" and r.warnings == ("partial",)
    assert s.samples[0] == (1.5, 1.0) and math.isnan(s.samples[1][1]) and s.samples[2][1] == math.inf
    vec = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {}, "value": [1, "2"]}, {"metric": {}, "histogram": [1, {"count": "1"}]}]}}
    assert len(parse_response(json.dumps(vec), "v").series) == 1  # the native histogram is skipped
    series = {"status": "success", "data": [{"__name__": "a", "job": "j"}]}
    assert parse_response(json.dumps(series), "{a}", "series").series[0].name == "a"
    scalar = {"status": "success", "data": {"resultType": "scalar", "result": [7, "3"]}}
    assert parse_response(json.dumps(scalar), "3").series[0].samples == ((7.0, 3.0),)


def test_error_envelope_and_deep_nesting():
    err = {"status": "error", "errorType": "bad_data", "error": "parse error at char 5"}
    try:
        parse_response(json.dumps(err), "sum(")
    except PromResponseError as e:
        assert str(e) == "query 'sum(': Prometheus answered bad_data error: parse error at char 5"
    try:
        parse_response("[" * 100000 + "]" * 100000, "deep")
    except PromResponseError as e:
        assert "query 'deep'" in str(e)
