"""Property-based tests (hypothesis) for the record parsers, the vLLM log reader, the exact
statistics and trim_messages."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from kvplan.workload import ChatTokenizer, analyze_lengths, trim_messages
from kvplan.workload.accumulate import coverage_counts
from kvplan.workload.issues import RecordError
from kvplan.workload.shapes import from_csv, from_json
from kvplan.workload.stats import Hist
from kvplan.workload.trim import split_turns
from kvplan.workload.vllm_log import VllmLogAssembler
from workload_helpers import CHATML_TOOLS, deepseek_dir, train

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
                    max_leaves=20)
KEYS = st.sampled_from(["messages", "prompt", "text", "conversations", "usage", "request", "response", "max_tokens",
                        "max_completion_tokens", "tools", "session_id", "timestamp", "latency_ms", "choices", "body"])
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)


@settings(max_examples=examples(400), deadline=None)
@given(st.dictionaries(KEYS | st.text(max_size=8), JSON, max_size=6))
def test_from_json_never_crashes(obj):
    try:
        reqs = from_json(obj, "f", 1)
    except RecordError as exc:
        assert exc.reason and exc.message
        return
    for r in reqs:
        assert r.prompt is not None or r.messages is not None or r.prompt_tokens is not None


@settings(max_examples=examples(200), deadline=None)
@given(st.dictionaries(st.sampled_from(["messages", "prompt", "prompt_tokens", "completion_tokens", "max_tokens",
                                        "timestamp", "text"]), st.text(max_size=30), max_size=5))
def test_from_csv_never_crashes(row):
    try:
        from_csv(row, "f.csv", 2)
    except RecordError:
        pass


ROLES = st.sampled_from(["user", "assistant", "system"])


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(ROLES, TEXT), min_size=1, max_size=6), st.integers(1, 10**6) | st.none(),
       st.sampled_from(["max_tokens", "max_completion_tokens"]))
def test_chat_records_round_trip(pairs, max_tokens, key):
    msgs = [{"role": r, "content": c} for r, c in pairs]
    obj = {"messages": msgs}
    if max_tokens is not None:
        obj[key] = max_tokens
    [r] = from_json(json.loads(json.dumps(obj)), "f", 3)
    assert list(r.messages) == msgs and r.max_tokens == max_tokens and r.shape == "openai-chat"
    assert r.turn == max(sum(1 for m in msgs if m["role"] == "user"), 1)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["human", "gpt"]), TEXT), min_size=1, max_size=8))
def test_sharegpt_gives_one_request_per_human_turn(turns):
    conv = [{"from": f, "value": v} for f, v in turns]
    humans = sum(1 for f, _ in turns if f == "human")
    try:
        reqs = from_json({"conversations": conv, "id": "c1"}, "f", 1)
    except RecordError as exc:
        assert humans == 0 and exc.reason == "empty_prompt"
        return
    assert len(reqs) == humans
    assert [r.turn for r in reqs] == list(range(1, humans + 1))
    assert all(r.messages[-1]["role"] == "user" and r.session == "c1" for r in reqs)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompt=TEXT, ids=st.lists(st.integers(0, 200000), max_size=30), max_tokens=st.integers(1, 10**5),
       out=TEXT, out_ids=st.lists(st.integers(0, 9), max_size=20), rid=st.from_regex(r"(chatcmpl|cmpl)-[0-9a-f]{1,12}", fullmatch=True),
       new=st.booleans(), prefix=st.sampled_from(["", "INFO 07-09 09:47:45 [logger.py:39] ",
                                                   "(APIServer pid=1) INFO 11-30 12:00:00 [request_logger.py:73] "]))
def test_vllm_log_lines_parse_back_exactly(prompt, ids, max_tokens, out, out_ids, rid, new, prefix):
    params = f"SamplingParams(n=1, temperature=0.7, stop=['</s>'], max_tokens={max_tokens}, min_tokens=0)"
    if new:  # vLLM 0.11+: INFO line without the prompt, DEBUG details line with it
        lines = [f"{prefix}Request {rid} details: prompt: {prompt!r}, prompt_token_ids: {ids}, prompt_embeds shape: None.",
                 f"{prefix}Received request {rid}: params: {params}, lora_request: None.",
                 f"{prefix}Generated response {rid} details: output_token_ids: {out_ids}",
                 f"{prefix}Generated response {rid}: output: {out!r}, finish_reason: stop"]
    else:
        lines = [f"{prefix}Received request {rid}: prompt: {prompt!r}, params: {params}, prompt_token_ids: {ids}, "
                 "lora_request: None, prompt_adapter_request: None.",
                 f"{prefix}Generated response {rid}: output: {out!r}, output_token_ids: {out_ids}, finish_reason: length"]
    asm = VllmLogAssembler()
    done = []
    for i, line in enumerate(lines, 1):
        got = asm.feed(line, "v.log", i)
        assert got is not None, line
        done += got
    done += asm.flush()
    assert len(done) == 1
    e = done[0]
    assert e["prompt"] == prompt and e["prompt_token_count"] == len(ids) and e["max_tokens"] == max_tokens
    assert e["output"] == out and e["output_token_count"] == len(out_ids)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=40), st.just(b'{"prompt_tokens": 1}'),
                          st.just(b'{"usage": {"prompt_tokens": 5, "completion_tokens": 2}, "max_tokens": 9}'),
                          st.just(b'{"usage": {"prompt_tokens": "x"}}'), st.just(b"\xff\xfe{}")), max_size=25))
def test_reader_accounts_for_every_line(tmp_path_factory, chunks):
    path = tmp_path_factory.mktemp("p") / "x.jsonl"
    body = b"\n".join(c.replace(b"\n", b" ") for c in chunks)
    path.write_bytes(b'{"usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n' + body)
    r = analyze_lengths([str(path)], None)
    rec = r.records
    assert rec.read == rec.used + sum(rec.skipped.values())
    assert rec.used >= 1 and r.counted_by["usage"] == rec.requests


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 2000), st.integers(0, 2000)), min_size=1, max_size=60),
       st.integers(1, 6000), st.floats(50, 99.99))
def test_exact_stats_match_brute_force(rows, L, pct):
    total, reject, observed, min_ac = Hist(), Hist(), Hist(), Hist()
    for p, b, o in rows:
        a = max(p + 1, b)
        total.add(p + b), reject.add(a), observed.add(p + o), min_ac.add(min(a, p + o))
    rej, clamp, trunc = coverage_counts(total.freeze(), reject.freeze(), observed.freeze(), min_ac.freeze(), L)
    assert rej == sum(1 for p, b, o in rows if p >= L or b > L)
    assert clamp == sum(1 for p, b, o in rows if not (p >= L or b > L) and p + b > L)
    assert trunc == sum(1 for p, b, o in rows if not (p >= L or b > L) and p + o > L)
    values = sorted(p for p, _, _ in rows)
    h = Hist()
    for v in values:
        h.add(v)
    d = h.freeze()
    assert d.quantile(pct) == values[max(1, math.ceil(pct / 100 * len(values) - 1e-9)) - 1]
    assert sum(1 for v in values if v <= d.quantile(pct)) >= pct / 100 * len(values) - 1e-9


# --- trim_messages -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    chatml = ChatTokenizer.from_path(str(train("bpe", tmp_path_factory.mktemp("t") / "bpe", CHATML_TOOLS,
                                               bos="<|im_start|>", eos="<|im_end|>")))
    return {"chatml": chatml, "deepseek": ChatTokenizer.from_path(str(deepseek_dir()))}


def _turn(draw, i):
    msgs = [{"role": "user", "content": draw(TEXT) or f"q{i}"}]
    if draw(st.booleans()) and draw(st.booleans()):
        msgs.append({"role": "assistant", "content": "",
                     "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": "{\"i\": 1}"}}]})
        msgs.append({"role": "tool", "content": draw(TEXT) or "ok"})
    msgs.append({"role": "assistant", "content": draw(TEXT) or f"a{i}"})
    return msgs


@st.composite
def conversations(draw):
    system = [{"role": "system", "content": draw(TEXT) or "sys"}] if draw(st.booleans()) else []
    n = draw(st.integers(1, 7))
    turns = [_turn(draw, i) for i in range(n)]
    last = turns[-1][:1]  # the request ends with the user's new message
    return system + [m for t in turns[:-1] for m in t] + last


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msgs=conversations(), budget=st.integers(20, 400), reserve=st.integers(0, 15),
       which=st.sampled_from(["chatml", "deepseek"]), max_turns=st.none() | st.integers(1, 4))
def test_trim_is_a_fitting_suffix_of_whole_turns(tokenizers, msgs, budget, reserve, which, max_turns):
    tok = tokenizers[which]
    if which == "deepseek":  # its template concatenates tool arguments as text: keep plain turns
        msgs = [m for m in msgs if m["role"] != "tool" and "tool_calls" not in m]
    assume(msgs and any(m["role"] == "user" for m in msgs))
    res = trim_messages(msgs, budget, tok, max_turns=max_turns, reserve_output=reserve)
    system, turns = split_turns(msgs)
    kept_sys, kept_turns = split_turns(list(res.messages))
    assert kept_sys == system  # the system prompt is kept
    assert kept_turns == turns[len(turns) - res.kept_turns:]  # a suffix of whole turns
    assert res.kept_turns + res.dropped_turns == len(turns)
    assert res.tokens == tok.count_messages(list(res.messages))  # the reported count is the real one
    if res.fits:
        assert res.tokens <= budget - reserve
        if max_turns is None and res.kept_turns < len(turns):  # the longest such suffix
            longer = system + [m for t in turns[len(turns) - res.kept_turns - 1:] for m in t]
            assert tok.count_messages(longer) > budget - reserve
    else:
        assert res.kept_turns == 1 and res.tokens > budget - reserve
    assert max_turns is None or res.kept_turns <= max_turns
    for i, m in enumerate(res.messages):  # a tool result never loses its call
        if m["role"] == "tool":
            assert any("tool_calls" in p for p in res.messages[:i])
    assert len(res.dropped_messages) == len(msgs) - len(res.messages)


def test_long_histories_use_binary_search_and_find_the_same_suffix(tokenizers):
    tok = tokenizers["deepseek"]
    msgs = [{"role": "system", "content": "Be brief."}]
    for i in range(45):  # above EXACT_SCAN_TURNS: the binary-search path
        msgs += [{"role": "user", "content": f"question {i} " * (1 + i % 5)},
                 {"role": "assistant", "content": f"answer {i} " * (1 + i % 3)}]
    msgs.append({"role": "user", "content": "and now?"})
    system, turns = split_turns(msgs)
    for budget in (60, 300, 900, 5000):
        res = trim_messages(msgs, budget, tok)
        fitting = [k for k in range(1, len(turns) + 1)
                   if tok.count_messages(system + [m for t in turns[len(turns) - k:] for m in t]) <= budget]
        assert res.kept_turns == (max(fitting) if fitting else 1) and res.fits == bool(fitting)


def test_trim_arguments_are_checked(tokenizers):
    with pytest.raises(ValueError):
        trim_messages([{"role": "user", "content": "x"}], 0, tokenizers["deepseek"])
    with pytest.raises(ValueError):
        trim_messages([{"role": "user", "content": "x"}], 10, tokenizers["deepseek"], max_turns=0)
    res = trim_messages([{"role": "system", "content": "s"}, {"role": "user", "content": "x"}], 100,
                        tokenizers["deepseek"], keep_system=False)
    assert [m["role"] for m in res.messages] == ["user"] and res.dropped_messages[0]["role"] == "system"
