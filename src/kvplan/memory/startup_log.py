"""Read the numbers vLLM measured out of a start-up log: any version, any log prefix.

vLLM prints its measurements (available KV memory, blocks, tokens, concurrency, weights, graph
memory) and its resolved configuration (``non-default args: {...}``, ``Initializing ... with
config: ...``). kvplan reads both, so ``plan --from-log`` replays the start-up with vLLM's own
measured budget and checks its arithmetic against vLLM's. Lines may carry any prefix (Docker,
Ray, ``(VllmWorker rank=1 pid=...)``, timestamps): patterns are searched, never anchored.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError, file_not_found

GIB = 1 << 30
#: a figure longer than this is not one vLLM printed (a 5,000-digit number is an attack on int())
_MAX_FIGURE_CHARS = 40
_TOO_LONG_FIGURE = re.compile(r"-?[0-9][0-9,.]{%d,}" % _MAX_FIGURE_CHARS)
_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
_SNUM = r"(-?[0-9][0-9,]*(?:\.[0-9]+)?)"  # figures that can go negative (an over-committed budget)


def _f(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass
class StartupLog:
    path: str = ""
    vllm_version: Optional[str] = None
    engine: Optional[str] = None
    model: Optional[str] = None
    args: dict[str, Any] = field(default_factory=dict)
    available_kv_gib: list[float] = field(default_factory=list)  # one per worker that logged it
    available_kv_by_rank: dict[int, float] = field(default_factory=dict)  # where the prefix names the rank
    kv_cache_tokens: Optional[int] = None
    kv_pool: Optional[str] = None  # GPU / CPU
    device: Optional[str] = None  # "cpu" when the log is the CPU backend's (its KV line, its KV space line)
    concurrency_len: Optional[int] = None
    max_concurrency: Optional[float] = None
    num_gpu_blocks: Optional[int] = None
    num_cpu_blocks: Optional[int] = None
    model_loading_gib: Optional[float] = None
    cudagraph_estimate_gib: Optional[float] = None
    total_gpu_memory_gib: Optional[float] = None
    gpu_memory_utilization: Optional[float] = None
    max_model_len: Optional[int] = None
    needed_kv_gib: Optional[float] = None  # from "To serve at least one request ..." errors
    error_available_kv_gib: Optional[float] = None
    estimated_max_model_len: Optional[int] = None
    errors: list[str] = field(default_factory=list)
    # which top-k/top-p sampler the V1 engine said it runs (topk_topp_sampler.py): True FlashInfer,
    # False PyTorch-native, None not printed; the profile run's sampler peak depends on it
    flashinfer_sampler: Optional[bool] = None
    lines_read: int = 0
    #: engine args the log printed that kvplan did not take: (name, why), e.g. a value of the wrong type
    ignored_args: list[tuple[str, str]] = field(default_factory=list)

    @property
    def available_kv_bytes(self) -> Optional[int]:
        """The smallest worker's KV memory (vLLM takes the minimum block count over workers)."""
        if not self.available_kv_gib:
            return None
        return int(round(min(self.available_kv_gib) * GIB))

    def available_kv_per_stage(self, tp: int, pp: int) -> Optional[tuple[int, ...]]:
        """Per pipeline stage (min over its TP ranks), when every rank's figure is known."""
        ranks = self.available_kv_by_rank
        if pp <= 1 or len(ranks) < tp * pp:
            return None
        return tuple(int(round(min(ranks[s * tp + t] for t in range(tp)) * GIB)) for s in range(pp))

    def available_kv_range(self) -> Optional[tuple[int, int]]:
        """Bytes range consistent with the printed GiB figure (rounded to 2 decimals)."""
        if not self.available_kv_gib:
            return None
        g = min(self.available_kv_gib)
        return int((g - 0.005) * GIB), int((g + 0.005) * GIB)


_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("available", re.compile(r"Available KV cache memory:\s*" + _SNUM + r"\s*GiB")),
    ("v0_rest", re.compile(r"the rest of the memory reserved for KV Cache is\s*" + _SNUM + r"\s*GiB")),
    ("v0_kvsize", re.compile(r"kv_cache_size=" + _SNUM + r"\s*GiB")),
    ("cpu_set", re.compile(r"(?:Explicitly|Auto) set \(" + _SNUM + r"/" + _NUM + r"\) GiB for KV cache")),
    ("v0_table_avail", re.compile(r"available_kv_cache_memory\s+" + _SNUM + r"\s*GiB")),
    ("v0_table_total", re.compile(r"total_gpu_memory\s+" + _NUM + r"\s*GiB")),
    ("err_avail", re.compile(r"\(" + _NUM + r" GiB KV cache is needed, which is larger than the available KV cache "
                             r"memory \(" + _SNUM + r" GiB\)")),
    ("err_estimate", re.compile(r"estimated maximum model length is\s*" + _NUM)),
    ("v0_total", re.compile(r"total_gpu_memory=?\s*\(?" + _NUM + r"\s*GiB\)?(?:\s*x\s*gpu_memory_utilization\s*\(" + _NUM + r"\))?")),
    ("v0_util", re.compile(r"gpu_memory_utilization=" + _NUM)),
    ("kv_tokens", re.compile(r"(GPU|CPU|XPU|TPU|HPU|NPU)(?: \+ host)? KV cache size:\s*" + _NUM + r"\s*tokens")),
    ("concurrency", re.compile(r"Maximum concurrency for\s*" + _NUM + r"\s*tokens per request:\s*" + _NUM + r"\s*x")),
    ("blocks", re.compile(r"(?:#\s*)?(?:GPU|cuda|CUDA|gpu|npu|xpu)\s+blocks:\s*" + _NUM + r"(?:,\s*#\s*CPU blocks:\s*" + _NUM + ")?")),
    ("cpu_blocks_only", re.compile(r"^(?!.*#\s*(?:GPU|cuda)).*#\s*CPU blocks:\s*" + _NUM)),
    ("loading", re.compile(r"(?:Model loading took|Loading model weights took)\s*" + _NUM + r"\s*(?:GiB|GB)")),
    ("cudagraph", re.compile(r"Estimated CUDA graph memory:\s*" + _NUM + r"\s*GiB")),
    ("free_total", re.compile(r"Free memory on device(?: \S+)? \(" + _NUM + r"/" + _NUM + r" GiB\)")),
    ("max_len", re.compile(r"Using max model len\s*" + _NUM)),
    ("version", re.compile(r"vLLM API server version\s*v?([0-9][0-9a-z.+\-]*)")),
    ("engine_cfg", re.compile(r"Initializing an? (?:(V1) )?LLM engine \(v?([0-9][^)]*)\) with config:\s*(.*)")),
    ("nondefault", re.compile(r"non-default args:\s*(\{.*\})")),
    # 0.4-0.8 print every argument once: api_server.py's ``logger.info("args: %s", args)`` (read in
    # the 0.6.4.post1 and 0.8.5 wheels), an argparse.Namespace repr with defaults included
    ("namespace", re.compile(r"\bargs: Namespace\((.*)\)\s*$")),
    # TopKTopPSampler.__init__ (vllm/v1/sample/ops/topk_topp_sampler.py, 0.7-0.21): the first says
    # FlashInfer samples; the others are each version's ways of falling back to the native path
    ("sampler_flashinfer", re.compile(r"Using FlashInfer for top-p & top-k sampling")),
    ("sampler_native", re.compile(r"FlashInfer is not available\. Falling back to the PyTorch-native|"
                                  r"FlashInfer top-p & top-k sampling sampler is disabled|"
                                  r"FlashInfer is available, but it is not enabled|"
                                  r"FlashInfer top-p/top-k sampling is available but disabled")),
    ("error", re.compile(r"((?:ValueError|RuntimeError|AssertionError|torch\.OutOfMemoryError|"
                         r"torch\.cuda\.OutOfMemoryError|NotImplementedError): .*)")),
]

_RANK = re.compile(r"\b(?:rank|Worker_TP\d+_PP\d+|rank_)=?(\d{1,9})\b")
#: what ``ast.literal_eval`` raises on a line that is not a Python literal: malformed, an unhashable
#: dict key, an integer of more than 4,300 digits, nesting deeper than the parser's stack
_LITERAL_ERRORS = (ValueError, SyntaxError, TypeError, MemoryError, RecursionError)

#: engine args kvplan reads from a log, and the type each must have (vLLM prints them so; a log
#: with another type was not written by vLLM and the arg is ignored, said in ``ignored_args``)
_INT_ARGS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "max_model_len",
             "max_num_seqs", "max_num_batched_tokens", "block_size", "num_gpu_blocks_override",
             "kv_cache_memory_bytes", "max_seq_len")
_FLOAT_ARGS = ("gpu_memory_utilization",)
_STR_ARGS = ("model", "dtype", "quantization", "kv_cache_dtype")
_BOOL_ARGS = ("enforce_eager", "async_scheduling", "enable_prefix_caching")
_MAX_ARG_INT = 1 << 40

REDACTED = "<redacted>"


def is_secret_name(name: str) -> bool:
    """Whether an arg's value is a secret: vLLM's ``api_key``, ``hf_token``, ``ssl_keyfile``, any
    ``*secret*``, ``*password*``, ``*credential*``, a name ending in ``token`` or ``key`` (not
    ``long_prefill_token_threshold`` nor ``max_num_batched_tokens``: those are not secrets)."""
    parts = [p for p in re.split(r"[_\-. ]+", name.lower()) if p]
    if not parts:
        return False
    last = parts[-1]
    return (last in ("token", "key", "keyfile", "apikey", "pass", "pwd") or "key_file" in name.lower()
            or any(p.startswith(("secret", "passw", "credential")) for p in parts))


_PAIR = re.compile(r"""(['"]?([A-Za-z][A-Za-z0-9_.\-]*)['"]?\s*[:=]\s*)('[^']*'|"[^"]*"|[^\s,})\]]+)""")
_FLAG = re.compile(r"""(--([a-z][a-z0-9\-]*)(?:=|\s+))('[^']*'|"[^"]*"|\S+)""")
_SECRET_HINT = re.compile(r"key|token|secret|passw|pwd|credential", re.IGNORECASE)


def redact_line(line: str) -> str:
    """A log line with the values of secret names redacted: ``'api_key': 'sk-...'``,
    ``api_key=...``, ``--api-key ...`` (vLLM prints its non-default args, and a launcher its
    command line)."""
    if not _SECRET_HINT.search(line):
        return line

    def pair(m: re.Match) -> str:
        value = m.group(3)
        if not is_secret_name(m.group(2)) or value in ("None", "True", "False", "''", '""'):
            return m.group(0)
        quote = value[0] if value[0] in "'\"" else ""
        return f"{m.group(1)}{quote}{REDACTED}{quote}"

    def flag(m: re.Match) -> str:
        if not is_secret_name(m.group(2)) or m.group(3).startswith("--"):
            return m.group(0)
        return f"{m.group(1)}{REDACTED}"

    return _FLAG.sub(flag, _PAIR.sub(pair, line))


def redact_args(args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with the values of secret names (:func:`is_secret_name`) replaced by ``<redacted>``
    (also inside nested dicts: a JSON config arg). True/False stay: they say whether, not what."""
    out: dict[str, Any] = {}
    for key, value in args.items():
        if isinstance(key, str) and is_secret_name(key) and value not in (None, "") and not isinstance(value, bool):
            out[key] = REDACTED
        elif isinstance(value, dict):
            out[key] = redact_args(value)
        else:
            out[key] = value
    return out


def _typed_args(args: dict, log: "StartupLog") -> dict[str, Any]:
    """The args with string keys whose known ones have the type vLLM prints (others are ignored and
    said in ``log.ignored_args``); secrets redacted."""
    out: dict[str, Any] = {}
    for key, value in args.items():
        if not isinstance(key, str):
            log.ignored_args.append((repr(key)[:60], "not a name"))
            continue
        if value is None:
            out[key] = value
            continue
        bad = None
        if key in _INT_ARGS:
            if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= _MAX_ARG_INT:
                bad = "not an integer vLLM could print"
        elif key in _FLOAT_ARGS:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                bad = "not a fraction in (0, 1]"
        elif key in _STR_ARGS:
            if not isinstance(value, str):
                bad = "not a string"
        elif key in _BOOL_ARGS:
            if not isinstance(value, bool):
                bad = "not True or False"
        if bad:
            log.ignored_args.append((key, bad))
            continue
        out[key] = value
    return redact_args(out)

# "key=value" pairs of the "Initializing ... with config:" line.
_CFG_FIELD = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|[^,]+)")


def namespace_args(text: str) -> dict[str, Any]:
    """The arguments of an ``argparse.Namespace(...)`` repr (the inside of the parentheses), as
    vLLM 0.4-0.8 log them. Values that are Python literals are kept; ``None`` (a flag left to
    vLLM's default) and object reprs (``<function ...>``, ``<ConfigFormat.AUTO: 'auto'>``) are
    dropped, so an unset flag reads as unset, as in a 0.9+ ``non-default args`` line."""
    out: dict[str, Any] = {}
    for part in _top_level_fields(text):
        key, sep, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key.isidentifier() or not raw or raw.startswith("<"):
            continue
        try:
            value = ast.literal_eval(raw)
        except _LITERAL_ERRORS:
            continue
        if value is not None:
            out[key] = value
    return out


def _top_level_fields(text: str) -> list[str]:
    """``a=1, b=[1, 2], c='x, y'`` → ``['a=1', 'b=[1, 2]', "c='x, y'"]``: commas inside brackets,
    braces, parentheses, angle-bracket reprs and quotes do not split."""
    parts: list[str] = []
    depth, quote, start, i = 0, "", 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p for p in (p.strip() for p in parts) if p]


def _config_line(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, raw in _CFG_FIELD.findall(text):
        raw = raw.strip()
        if raw.startswith("'"):
            out[key] = raw[1:-1]
            continue
        if raw.startswith("torch."):
            out[key] = raw[len("torch."):]
            continue
        try:
            out[key] = ast.literal_eval(raw)
        except _LITERAL_ERRORS:
            out[key] = raw
    return out


# Terminal colour / cursor codes (vLLM colours its log prefix when stdout is a TTY; `docker logs`
# and `kubectl logs` keep them).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# A new server run in the same file: each start prints its version or its non-default args once.
_RUN_START = re.compile(r"vLLM API server version|non-default args:|args: Namespace\(|Initializing an? (?:V1 )?LLM engine")


# vLLM's logger prefix (``INFO 05-09 22:51:18 [file.py:39]``; 0.4-0.7 without the brackets), and
# the level-less ``[file.py:NN]`` of prefixes stripped by a log shipper.
_VLLM_PREFIX = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.\d+)? "
                          r"\[?[\w.]+\.py:\d+\]")


def line_time(line: str) -> Optional[float]:
    """Seconds of the line's vLLM timestamp (``MM-DD HH:MM:SS``, which has no year: read as the
    leap year 2000, enough for durations within one log), or None."""
    m = _VLLM_PREFIX.search(line[:300])
    if not m:
        return None
    from datetime import datetime, timezone

    mon, day, hh, mm, ss = (int(g) for g in m.groups())
    try:
        return datetime(2000, mon, day, hh, mm, ss, tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def is_vllm_line(line: str) -> bool:
    """A line vLLM's logger wrote (its level, time and source-file prefix), or one of the start-up
    figures this module reads."""
    return bool(_VLLM_PREFIX.search(line[:300])) or any(p.search(line) for _, p in _PATTERNS)


def clean_line(line: str) -> str:
    """The line without ANSI escape codes and trailing whitespace (prefixes are kept: patterns
    are searched, not anchored)."""
    return _ANSI.sub("", line).rstrip() if "\x1b" in line else line.rstrip()


def split_runs(lines: list[str]) -> list[tuple[int, int]]:
    """``[(start, end), ...]`` line ranges (0-based, end exclusive), one per server run. A run
    begins at the first start-up marker after the previous run has already shown that marker."""
    starts = [0]
    seen: set[str] = set()
    for i, line in enumerate(lines):
        m = _RUN_START.search(line) if len(line) < 200_000 else None
        if not m:
            continue
        key = m.group(0)[:12]
        if key in seen:
            starts.append(i)
            seen = set()
        seen.add(key)
    bounds = sorted(set(starts))
    return [(a, b) for a, b in zip(bounds, bounds[1:] + [len(lines)]) if b > a] or [(0, len(lines))]


def parse_startup_log(text: str, path: str = "") -> StartupLog:
    log = StartupLog(path=path)
    for line in text.splitlines():
        log.lines_read += 1
        if len(line) > 200_000:
            continue  # a runaway line is not a log line
        line = clean_line(line)
        for name, pattern in _PATTERNS:
            m = pattern.search(line)
            if not m:
                continue
            g = m.groups()
            if any(x is not None and _TOO_LONG_FIGURE.fullmatch(x) for x in g):
                continue  # not a figure vLLM printed
            if name in ("available", "v0_rest", "v0_kvsize", "v0_table_avail"):
                log.available_kv_gib.append(_f(g[0]))
                rank = _RANK.search(line)
                if rank:
                    log.available_kv_by_rank[int(rank.group(1))] = _f(g[0])
            elif name == "cpu_set":
                log.device = "cpu"  # cpu_worker.py: "Explicitly/Auto set (x/y) GiB for KV cache"
                log.available_kv_gib.append(_f(g[0]))
                log.total_gpu_memory_gib = log.total_gpu_memory_gib or _f(g[1])
            elif name == "v0_table_total":
                log.total_gpu_memory_gib = _f(g[0])
            elif name == "err_avail":
                log.needed_kv_gib = _f(g[0])
                log.error_available_kv_gib = _f(g[1])
            elif name == "err_estimate":
                log.estimated_max_model_len = int(_f(g[0]))
            elif name == "v0_total":
                log.total_gpu_memory_gib = _f(g[0])
                if g[1]:
                    log.gpu_memory_utilization = _f(g[1])
            elif name == "v0_util" and log.gpu_memory_utilization is None:
                log.gpu_memory_utilization = _f(g[0])
            elif name == "kv_tokens":
                log.kv_pool, log.kv_cache_tokens = g[0], int(_f(g[1]))
                if g[0] == "CPU":
                    log.device = "cpu"
            elif name == "concurrency":
                log.concurrency_len, log.max_concurrency = int(_f(g[0])), _f(g[1])
            elif name == "blocks":
                log.num_gpu_blocks = int(_f(g[0]))
                if g[1]:
                    log.num_cpu_blocks = int(_f(g[1]))
            elif name == "cpu_blocks_only" and log.num_gpu_blocks is None:
                log.num_cpu_blocks = int(_f(g[0]))
            elif name == "loading":
                log.model_loading_gib = _f(g[0])
            elif name == "cudagraph":
                log.cudagraph_estimate_gib = _f(g[0])
            elif name == "free_total":
                log.total_gpu_memory_gib = _f(g[1])
            elif name == "max_len":
                log.max_model_len = int(_f(g[0]))
            elif name == "version":
                log.vllm_version = g[0]
            elif name == "engine_cfg":
                log.engine = "V1" if g[0] else log.engine or "V0"
                log.vllm_version = log.vllm_version or g[1]
                cfg = _typed_args(_config_line(g[2]), log)
                log.model = log.model or cfg.get("model")
                if cfg.get("device_config") == "cpu":
                    log.device = "cpu"
                for key in ("tensor_parallel_size", "pipeline_parallel_size", "dtype", "quantization",
                            "kv_cache_dtype", "enforce_eager"):
                    if key in cfg and key not in log.args:
                        log.args[key] = cfg[key]
                if isinstance(cfg.get("max_seq_len"), int) and log.max_model_len is None:
                    log.max_model_len = cfg["max_seq_len"]
            elif name == "nondefault":
                try:
                    args = ast.literal_eval(g[0])
                except _LITERAL_ERRORS:
                    args = None
                if isinstance(args, dict):
                    args = _typed_args(args, log)
                    log.args.update(args)
                    log.model = args.get("model", log.model)
            elif name == "namespace":
                for key, value in _typed_args(namespace_args(g[0]), log).items():
                    log.args.setdefault(key, value)  # a "non-default args" line (0.9+) wins
                if isinstance(log.args.get("model"), str):
                    log.model = log.model or log.args["model"]
            elif name == "sampler_flashinfer":
                log.flashinfer_sampler = True
            elif name == "sampler_native":
                log.flashinfer_sampler = False
            elif name == "error":
                log.errors.append(redact_line(g[0].strip()))
    log.args = redact_args(log.args)  # whichever line the args came from (an args line carries --api-key verbatim)
    if not log.available_kv_gib and log.error_available_kv_gib is not None:
        # Only the admission error names the KV memory (0.27+: already minus one block).
        log.available_kv_gib.append(log.error_available_kv_gib)
    if log.max_model_len is None and isinstance(log.args.get("max_model_len"), int):
        log.max_model_len = log.args["max_model_len"]
    return log


def read_log_text(path: str | Path) -> str:
    """A vLLM log file's text (undecodable bytes replaced), or a UsageError naming the file.
    The one place kvplan opens vLLM logs (plan --from-log, doctor)."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{p}: is a directory, expected a vLLM log file")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise file_not_found(p) from None
    except OSError as exc:
        raise UsageError(f"{p}: cannot read: {exc.strerror or exc}") from None
    return data.decode("utf-8", errors="replace")


def read_startup_log(path: str | Path) -> StartupLog:
    p = Path(path)
    log = parse_startup_log(read_log_text(p), str(p))
    if not (log.available_kv_gib or log.kv_cache_tokens or log.num_gpu_blocks is not None):
        raise UsageError(f"{p}: no vLLM KV-cache figures found in {log.lines_read} lines (looked for "
                         "'Available KV cache memory', 'KV cache size', '# GPU blocks', 'kv_cache_size=')")
    return log
