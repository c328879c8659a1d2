"""The log lines ``kvplan doctor`` recognises: vLLM's own messages, V0 and V1 wordings.

Patterns are searched inside each cleaned line (kvplan.memory.startup_log.clean_line), never
anchored, so any prefix (Docker/Kubernetes timestamps, ``(EngineCore_DP0 pid=…)``, Ray's
``(RayWorkerWrapper pid=…)``) is fine. Numbers come out as named groups. The start-up errors the
planner also writes (kvplan.memory.admission) are matched by the patterns of their templates in
kvplan.memory.error_texts: one text, written and read.
"""
from __future__ import annotations

import re

from ...memory import error_texts as et

_N = et.INT
_F = et.FLOAT

# V1 (0.6+ engine): the admission check in kv_cache_utils.check_enough_kv_cache_memory.
KV_TOO_SMALL_V1 = et.KV_TOO_SMALL_V1
# V0: _verify_cache / check_enough_kv_cache_memory of the worker.
KV_TOO_SMALL_V0 = et.KV_TOO_SMALL_V0.pattern
NO_BLOCKS = et.NO_BLOCKS.pattern
# _get_and_verify_max_len (config/model.py): --max-model-len above what the model's config.json allows.
MAX_LEN_ABOVE_DERIVED = et.MAX_LEN_ABOVE_DERIVED.pattern
# vLLM's config checks that refuse a flag before anything starts (admission.scheduler_config_errors,
# admission.block_size_refused write the same templates)
SCHED_BATCH_BELOW_LEN = et.SCHED_BATCH_BELOW_LEN.pattern
SCHED_BATCH_BELOW_SEQS = et.SCHED_BATCH_BELOW_SEQS.pattern
BLOCK_SIZE_CHOICE = et.BLOCK_SIZE_CHOICE.pattern
NO_COMMON_BLOCK_SIZE = et.NO_COMMON_BLOCK_SIZE.pattern
NEGATIVE_KV = re.compile(r"Available KV cache memory:\s*(?P<gib>-[0-9.]+)\s*GiB|kv_cache_size=(?P<v0>-[0-9.]+)\s*GiB"
                         r"|(?:#\s*)?(?:GPU|cuda) blocks:\s*0\b")
FREE_MEMORY = et.FREE_MEMORY.pattern
OOM = re.compile(r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory")
OOM_DETAIL = re.compile(r"Tried to allocate (?P<alloc>" + _F + r") (?P<alloc_unit>[GMK]i?B)\..*?GPU \S* ?has a total "
                        r"capacity of (?P<total>" + _F + r") (?P<total_unit>[GMK]i?B) of which (?P<free>" + _F
                        + r") (?P<free_unit>[GMK]i?B) is free")
OOM_CUDAGRAPH = re.compile(r"captur|cuda_?graph|CUDAGraph|graph_capture", re.IGNORECASE)
OOM_SAMPLING = re.compile(r"sampler|_sample\b|logprobs|best_of|compute_logits|apply_penalties", re.IGNORECASE)
OOM_PREFILL = re.compile(r"profile_run|_dummy_run|determine_available_memory|_dummy_sampler_run|max_num_batched_tokens")
PREEMPT_V0 = re.compile(r"Sequence group \S+ is preempted by PreemptionMode\.(?P<mode>\w+) mode because there is not "
                        r"enough KV cache space.*?total_num_cumulative_preemption=(?P<total>" + _N + r")")
STATS = re.compile(r"Avg prompt throughput:\s*(?P<prompt>" + _F + r") tokens/s, Avg generation throughput:\s*(?P<gen>"
                   + _F + r") tokens/s, Running:\s*(?P<running>" + _N + r") reqs?")
STATS_WAITING = re.compile(r"(?:Waiting|Pending):\s*(?P<waiting>" + _N + r") reqs?")
STATS_SWAPPED = re.compile(r"Swapped:\s*(?P<swapped>" + _N + r") reqs?")
STATS_PREEMPT = re.compile(r"Preemptions:\s*(?P<preemptions>" + _N + r")")
STATS_KV = re.compile(r"(?:GPU|CPU|XPU|TPU|HPU|NPU)? ?KV cache usage:\s*(?P<kv>" + _F + r")%")
TOO_LONG = [
    re.compile(r"maximum context length is (?P<limit>" + _N + r") tokens\. However, (?:you requested|your prompt "
               r"contains|your request has) (?:at least )?(?P<requested>" + _N + r")"),
    re.compile(r"prompt \(length (?P<requested>" + _N + r")\) is longer than the maximum model length of (?P<limit>"
               + _N + r")"),
    re.compile(r"Input prompt \((?P<requested>" + _N + r") tokens\) is too long and exceeds limit of (?P<limit>"
               + _N + r")"),
]
TP_NOT_DIVISIBLE = [
    et.TP_NOT_DIVISIBLE.pattern,
    re.compile(r"(?P<what>[\w ]+?) \((?P<value>" + _N + r")\) (?:is not|must be) divisible by (?:the )?"
               r"(?:tensor[ _]parallel[ _]size|tp_size|weight quantization block_n) ?=? ?\(?(?P<tp>" + _N + r")\)?"),
]
# Durations of the start-up phases (seconds). Some contain others (read in 0.8.5/0.19.0:
# gpu_model_runner.load_model times the download and the weight loading together and prints
# "Model loading took"; core.py's "init engine" times profile_run, which compiles, and the graph
# capture): PHASE_PARTS says which, so a total never counts a second twice.
SLOW_PHASES = [
    ("download", re.compile(r"Time spent downloading weights for \S+: (?P<s>" + _F + r") seconds")),
    ("load", re.compile(r"Loading weights took (?P<s>" + _F + r") seconds")),
    ("model_loading", re.compile(r"Model loading took " + _F + r" ?GiB(?: memory)? and (?P<s>" + _F + r") seconds")),
    ("compile", re.compile(r"torch\.compile takes (?P<s>" + _F + r") s in total")),
    ("cudagraph", re.compile(r"Graph capturing finished in (?P<s>" + _F + r") secs")),
    ("engine_init", re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<s>" + _F + r") seconds")),
]
#: phase -> the phases it contains (the outer phase's time already includes them)
PHASE_PARTS = {"model_loading": ("download", "load"), "engine_init": ("compile", "cudagraph")}
#: request sampling parameters as the request log prints them (SamplingParams repr, 0.4-0.33)
SAMPLING_N = re.compile(r"SamplingParams\(n=(?P<n>\d+)(?:, best_of=(?P<best_of>\d+|None))?")
SAMPLING_LOGPROBS = re.compile(r"(?<!prompt_)logprobs=(?P<logprobs>\d+|None)")
# vLLM's CPU backend sizes its KV cache in host memory (cpu_worker.py) and names the pool "CPU".
CPU_KV = re.compile(r"(?:Explicitly|Auto) set \(" + _F + r"/" + _F + r"\) GiB for KV cache|\bCPU KV cache size:")
# uvicorn's access log: vLLM 0.32 logs a rejected request only as this line (the reason is in the body).
HTTP_400 = re.compile(r'"(?:POST|GET) /v1/\S+ HTTP/[0-9.]+" 400\b')
WARNING = re.compile(r"\bWARNING\b|\bWARN\b")
ERROR = re.compile(r"\bERROR\b|\bCRITICAL\b|^\S*Error: |Traceback \(most recent call last\)")


def num(text: str | None) -> float | None:
    return None if text is None else float(text.replace(",", ""))


def to_gib(value: float, unit: str) -> float:
    return value * {"GiB": 1.0, "GB": 1.0, "MiB": 1 / 1024, "MB": 1 / 1024, "KiB": 1 / 1024 ** 2, "KB": 1 / 1024 ** 2}[unit]
