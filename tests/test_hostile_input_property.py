"""Hostile input to kvplan's readers (property tests, hypothesis ``ci`` profile in CI): any bytes or
any value give a result or a usage error naming the file and field, never a traceback. The start-up
log parser, the request-log readers (JSONL, JSON array, CSV, vLLM's log lines) and the config.json
reader are driven with raw bytes and with the specific attacks the security review found, pinned
with @example: unhashable dict keys and 5,000-digit numbers in a literal_eval'd log line, nesting
deeper than the parsers' stacks, NaN/Infinity/bool/non-integral fields, a 10,000,000-layer config."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from kvplan.errors import ConfigFieldError, UsageError
from kvplan.memory.startup_log import parse_startup_log, read_startup_log
from kvplan.models import load_config_file, spec_from_config

PREFIX = "(EngineCore_DP0 pid=1) INFO 11-30 12:00:00 [arg_utils.py:1] "
DEEP = "[" * 5000 + "]" * 5000
DIGITS = "9" * 5000

# ---------------------------------------------------------------------------- vLLM start-up logs
LITERALS = st.one_of(
    st.sampled_from(["{[1]: 2}", "{{1: 2}: 3}", "{'x': " + DIGITS + "}", "{'x': " + DEEP + "}", "{'x': (", "{",
                     "{'tensor_parallel_size': 'two', 'max_model_len': 1e400}", "{'model': ['a'], 1: 2}",
                     "{'api_key': 'sk-1', 'gpu_memory_utilization': float('nan')}", "{'block_size': True}"]),
    st.text(max_size=60).map(lambda t: "{" + t + "}"),
)
FIGURES = st.one_of(st.sampled_from([DIGITS, "1" + "0" * 400, "0." + DIGITS, "9,999," + DIGITS]),
                    st.from_regex(r"[0-9][0-9,]{0,60}(\.[0-9]{0,60})?", fullmatch=True))
LINES = [
    "non-default args: {lit}", "Initializing a V1 LLM engine (v0.9.0) with config: model='m', tensor_parallel_size={num}, "
    "max_seq_len={num}, x={lit}", "# GPU blocks: {num}", "GPU KV cache size: {num} tokens",
    "Maximum concurrency for {num} tokens per request: {num}x", "Available KV cache memory: {num} GiB",
    "(VllmWorker rank={num} pid=1) Available KV cache memory: 1.00 GiB", "Using max model len {num}",
    "estimated maximum model length is {num}", "Model loading took {num} GiB",
]


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LINES), LITERALS, FIGURES), min_size=1, max_size=6), st.binary(max_size=200))
@example([("non-default args: {lit}", "{[1]: 2}", "1")], b"")
@example([("non-default args: {lit}", "{'x': " + DIGITS + "}", "1")], b"")
@example([("non-default args: {lit}", "{'x': " + DEEP + "}", "1")], b"")
@example([("# GPU blocks: {num}", "{}", DIGITS)], b"")
@example([("(VllmWorker rank={num} pid=1) Available KV cache memory: 1.00 GiB", "{}", DIGITS)], b"")
def test_startup_log_parser_takes_any_line(lines, junk):
    text = "\n".join(PREFIX + tpl.format(lit=lit, num=num) for tpl, lit, num in lines)
    text += "\n" + junk.decode("utf-8", "replace")
    log = parse_startup_log(text)
    for key in ("tensor_parallel_size", "max_model_len", "block_size"):
        assert key not in log.args or isinstance(log.args[key], int) and not isinstance(log.args[key], bool)
    assert all(isinstance(k, str) for k in log.args)
    assert log.args.get("api_key") in (None, "<redacted>")
    for value in (log.num_gpu_blocks, log.kv_cache_tokens, log.max_model_len, log.concurrency_len):
        assert value is None or isinstance(value, int)


@settings(max_examples=examples(100), deadline=None)
@given(st.binary(max_size=3000))
@example(b"# GPU blocks: " + DIGITS.encode())
def test_startup_log_file_of_any_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("log") / "vllm.log"
    path.write_bytes(data)
    try:
        read_startup_log(path)
    except UsageError as exc:
        assert str(path) in str(exc)


# ---------------------------------------------------------------------------- request logs
RECORD_VALUES = st.one_of(
    st.sampled_from([DIGITS, "1e400", "-1e400", "NaN", "Infinity", "-Infinity", "true", "null", '"12"', "[]", "{}",
                     DEEP, "1.5", "-3", '"2024-13-45T99:99:99"', '"0001-01-01T00:00:00"', '"9999-12-31T23:59:59"',
                     "1" + "0" * 25, "123456789012345678901234567890123"]),
    st.integers(-10 ** 40, 10 ** 40).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
RECORD_KEYS = st.sampled_from(["max_tokens", "timestamp", "latency_ms", "duration", "session_id", "prompt",
                               "messages", "usage", "prompt_tokens", "completion_tokens", "conversations"])


def _record(fields) -> str:
    body = ", ".join(f'"{k}": {v}' for k, v in fields)
    return '{"prompt": "hello there", ' + body + "}" if body else '{"prompt": "hello there"}'


def _usage(fields) -> str:
    return '{"messages": [{"role": "user", "content": "hi"}], "usage": {"prompt_tokens": ' + \
        (fields[0][1] if fields else "5") + ', "completion_tokens": 4}}'


def _lengths(tmp_path, name: str, data: bytes):
    from kvplan.workload.analysis import LengthsOptions, analyze_lengths

    path = tmp_path / name
    path.write_bytes(data)
    try:
        res = analyze_lengths([str(path)], options=LengthsOptions(estimate=True))
    except UsageError:
        return None
    r = res.records
    assert r.read == r.used + sum(r.skipped.values()), r
    return res


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.lists(st.tuples(RECORD_KEYS, RECORD_VALUES), max_size=3), min_size=1, max_size=5),
       st.sampled_from(["r.jsonl", "r.json", "r.csv"]))
@example([[("max_tokens", DIGITS)]], "r.jsonl")
@example([[("timestamp", "1" + "0" * 400)]], "r.jsonl")
@example([[("prompt_tokens", DIGITS)]], "r.json")
@example([[("max_tokens", DEEP)]], "r.json")
@example([[("timestamp", "NaN")]], "r.jsonl")
def test_request_log_reader_skips_one_bad_record_only(tmp_path_factory, records, name):
    """Each hostile record is skipped and counted; the good record after it is still read."""
    tmp = tmp_path_factory.mktemp("req")
    lines = [_record(r) for r in records] + [_usage(r) for r in records] + ['{"prompt": "a good one", "max_tokens": 3}']
    if name == "r.json":
        data = ("[" + ",\n".join(lines) + "]").encode()
    elif name == "r.csv":
        data = ("prompt,max_tokens,timestamp\n" + "".join(f'x,{v},{v}\n' for r in records for _, v in r if "," not in v)
                + "good,3,1\n").encode()
    else:
        data = "\n".join(lines).encode() + b"\n"
    res = _lengths(tmp, name, data)
    assert res is not None and res.records.used >= 1, "the good record was lost"


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=2000), st.sampled_from(["r.jsonl", "r.json", "r.csv", "r.log", "r.jsonl.gz"]))
@example(b"[" + DEEP.encode() + b"]", "r.json")
@example(b'{"a": ' + DEEP.encode() + b"}\n", "r.jsonl")
@example(b'{"max_tokens": ' + DIGITS.encode() + b"}\n", "r.jsonl")
@example(b"INFO 07-09 09:47:45 [logger.py:39] Received request cmpl-1: prompt: 'hi', params: SamplingParams("
         b"max_tokens=" + DIGITS.encode() + b")\n", "r.log")
@example(b"INFO 07-09 09:47:45 [logger.py:39] Request cmpl-1 JSON body: {\"max_tokens\": " + DIGITS.encode() + b"}\n",
         "r.log")
def test_request_log_reader_takes_any_bytes(tmp_path_factory, data, name):
    _lengths(tmp_path_factory.mktemp("bytes"), name, data)


# ---------------------------------------------------------------------------- config.json
BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256,
        "intermediate_size": 14336, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
HOSTILE = st.one_of(st.sampled_from([None, True, False, "", "32", [], {}, [1], -1, 0, 1, 10 ** 7, 10 ** 30, 1e30,
                                     math.nan, math.inf, -math.inf, 0.5, 4096.0, -4096, 2 ** 63, "NaN"]),
                    st.integers(-10 ** 20, 10 ** 20), st.floats())
FIELDS = st.sampled_from(sorted(BASE) + ["head_dim", "sliding_window", "layer_types", "num_local_experts",
                                         "num_experts_per_tok", "moe_intermediate_size", "kv_lora_rank",
                                         "rope_scaling", "quantization_config", "text_config", "tie_word_embeddings",
                                         "full_attention_interval", "sliding_window_pattern", "q_lora_rank",
                                         "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "attention_chunk_size"])


@settings(max_examples=examples(300), deadline=None)
@given(st.dictionaries(FIELDS, HOSTILE, min_size=1, max_size=3), st.sampled_from(["llama", "gemma3_text", "qwen3",
                                                                                     "deepseek_v3", "llama4_text"]))
@example({"num_hidden_layers": 10_000_000}, "llama")
@example({"hidden_size": -4096}, "llama")
@example({"hidden_size": math.nan}, "llama")
@example({"num_attention_heads": True}, "llama")
@example({"vocab_size": 1e30}, "llama")
@example({"max_position_embeddings": math.inf}, "llama")
@example({"sliding_window_pattern": 0, "sliding_window": 512}, "gemma3_text")
def test_config_reader_gives_a_model_or_a_usage_error(changes, model_type):
    cfg = {**BASE, "model_type": model_type, **changes}
    if model_type == "deepseek_v3":
        cfg.setdefault("kv_lora_rank", 512)
        cfg.setdefault("qk_rope_head_dim", 64)
        cfg.setdefault("qk_nope_head_dim", 128)
        cfg.setdefault("v_head_dim", 128)
    try:
        spec = spec_from_config(cfg, "fuzz/config.json")
    except UsageError as exc:
        assert "fuzz/config.json" in str(exc)
        return
    assert 1 <= len(spec.layers) <= 2048 and spec.hidden_size >= 1 and spec.num_attention_heads >= 1


@pytest.mark.parametrize("field, value, said", [
    ("num_hidden_layers", 10_000_000, "must be between 1 and 2,048, got 10000000"),
    ("hidden_size", -4096, "must be between 1 and 1,048,576, got -4096"),
    ("hidden_size", "NaN", "must be an integer, got nan"),
    ("num_attention_heads", "true", "must be an integer, got True"),
    ("vocab_size", "1e30", "must be between 1 and 16,777,216, got 1e+30"),
    ("vocab_size", "128256.5", "must be an integer, got 128256.5"),
    ("max_position_embeddings", "Infinity", "must be an integer, got inf"),
    ("num_key_value_heads", "0", "must be between 1 and 16,384, got 0"),
])
def test_config_fields_out_of_their_physical_range_name_the_field(tmp_path, field, value, said):
    """A 250-byte config.json cannot ask for gigabytes (10,000,000 layers took 102 s and then
    MemoryError): each field is checked by name, before anything is built."""
    text = json.dumps(BASE).replace(f'"{field}": {json.dumps(BASE[field])}', f'"{field}": {value}')
    path = tmp_path / "config.json"
    path.write_text(text)
    assert len(text) < 300
    with pytest.raises(ConfigFieldError) as err:
        load_config_file(path)
    assert err.value.field == field and said in str(err.value), str(err.value)


@settings(max_examples=examples(150), deadline=None)
@given(st.binary(max_size=1000))
@example(b'{"num_hidden_layers": ' + DIGITS.encode() + b"}")
@example(b'{"a": ' + DEEP.encode() + b"}")
@example(b'{"hidden_size": NaN}')
def test_config_file_of_any_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_bytes(data)
    try:
        load_config_file(path)
    except UsageError as exc:
        assert "config.json" in str(exc)


def _catalog_configs() -> list[dict]:
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "src/kvplan/models/catalog"
    return [json.loads(p.read_text())["config"] for p in sorted(folder.glob("*.json"))]


CATALOG = _catalog_configs()
MUTANTS = st.one_of(st.sampled_from([None, True, "", "x", [], {}, [1, "a"], -1, 0, 1, 3.5, 10 ** 30, math.nan,
                                     math.inf, {"a": 1}]), st.integers(-10 ** 6, 10 ** 6))


@settings(max_examples=examples(80), deadline=None)
@given(st.integers(0, len(CATALOG) - 1), st.lists(st.tuples(st.sampled_from(["", "text_config", "vision_config",
                                                                             "quantization_config"]),
                                                            st.integers(0, 200), MUTANTS), min_size=1, max_size=3))
@example(0, [("quantization_config", 0, [128])])
def test_a_mutated_real_config_plans_or_is_a_usage_error(index, edits):
    """A real config with a field of the wrong kind (also in its text, vision and quantization parts):
    `kvplan plan` answers or names the field, never a traceback (the page's upload runs this)."""
    from kvplan.hardware import find_gpu
    from kvplan.memory import PlanRequest, plan
    from kvplan.models.params import count_params

    cfg = json.loads(json.dumps(CATALOG[index]))
    for part, which, value in edits:
        target = cfg.get(part) if part else cfg
        if not isinstance(target, dict):
            target = cfg
        if part == "quantization_config" and part not in cfg:
            target = cfg.setdefault(part, {"quant_method": "fp8"})
        keys = sorted(target) + ["weight_block_size", "modules_to_not_convert", "bits", "group_size"]
        target[keys[which % len(keys)]] = value
    try:
        spec = spec_from_config(cfg, "fuzz/config.json")
        count_params(spec)
        plan(PlanRequest(model=spec, gpu=find_gpu("H100")), what_ifs=False)
    except UsageError:
        pass
