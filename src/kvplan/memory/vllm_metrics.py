"""vLLM's Prometheus metric names and their renames across versions, in one table (vllm-memory-model.md §7).

Every metric kvplan reads has a stable key (``kv_cache_usage``, ``ttft``, ...), its kind, and each
name vLLM has exposed it under, newest first, with the first version whose default exposition
kvplan follows under that name. vLLM renamed ``gpu_cache_usage_perc`` -> ``kv_cache_usage_perc``,
``gpu_prefix_cache_*`` -> ``prefix_cache_*`` and ``time_per_output_token_seconds`` ->
``inter_token_latency_seconds``: in 0.11 both names were exported, from 0.15 only the new ones; the
switch is at 0.11, so a rule never watches a name that the server has hidden (0.11 hides
``gpu_cache_usage_perc`` unless ``--show-hidden-metrics-for-version``). V0 (before 0.8) had no
prefix-cache counters, only hit-rate gauges.

Readers of a live server (:mod:`kvplan.bench.metrics`: ``ALIASES``, one key -> every name it has
had) accept any of the names; writers of rules for one version (:mod:`kvplan.ops.alerts`) take
:func:`name_for` that version.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, Optional

GAUGE, COUNTER, HISTOGRAM = "gauge", "counter", "histogram"
#: a gauge whose value means nothing and whose labels carry the information (vllm:lora_requests_info)
INFO = "info"
_ALWAYS = (0, 0)

#: key -> (kind, ((exposed name, first version exposing it), ...) newest first); counters with
#: ``_total``, histograms as their family name
METRICS: Mapping[str, tuple[str, tuple[tuple[str, tuple[int, ...]], ...]]] = MappingProxyType({
    "kv_cache_usage": (GAUGE, (("vllm:kv_cache_usage_perc", (0, 11)), ("vllm:gpu_cache_usage_perc", _ALWAYS))),
    "requests_running": (GAUGE, (("vllm:num_requests_running", _ALWAYS),)),
    "requests_waiting": (GAUGE, (("vllm:num_requests_waiting", _ALWAYS),)),
    "preemptions": (COUNTER, (("vllm:num_preemptions_total", _ALWAYS),)),
    "prefix_cache_queries": (COUNTER, (("vllm:prefix_cache_queries_total", (0, 11)),
                                       ("vllm:gpu_prefix_cache_queries_total", (0, 8)))),
    "prefix_cache_hits": (COUNTER, (("vllm:prefix_cache_hits_total", (0, 11)),
                                    ("vllm:gpu_prefix_cache_hits_total", (0, 8)))),
    "prompt_tokens": (COUNTER, (("vllm:prompt_tokens_total", _ALWAYS),)),
    "generation_tokens": (COUNTER, (("vllm:generation_tokens_total", _ALWAYS),)),
    "request_success": (COUNTER, (("vllm:request_success_total", _ALWAYS),)),
    "ttft": (HISTOGRAM, (("vllm:time_to_first_token_seconds", _ALWAYS),)),
    "itl": (HISTOGRAM, (("vllm:inter_token_latency_seconds", (0, 11)),
                        ("vllm:time_per_output_token_seconds", _ALWAYS))),
    "tpot": (HISTOGRAM, (("vllm:request_time_per_output_token_seconds", _ALWAYS),)),
    "e2e": (HISTOGRAM, (("vllm:e2e_request_latency_seconds", _ALWAYS),)),
    "queue_time": (HISTOGRAM, (("vllm:request_queue_time_seconds", _ALWAYS),)),
    # Speculative decoding (V1: v1/spec_decode/metrics.py SpecDecodingProm, read in 0.8.5, 0.10.1.1, 0.11.0,
    # 0.19.0, 0.33.0; V0: engine/metrics.py, 0.6.4.post1, 0.8.5). Acceptance rate =
    # rate(accepted) / rate(draft tokens); mean acceptance length = 1 + rate(accepted) / rate(drafts).
    "spec_accepted_tokens": (COUNTER, (("vllm:spec_decode_num_accepted_tokens_total", _ALWAYS),)),
    "spec_draft_tokens": (COUNTER, (("vllm:spec_decode_num_draft_tokens_total", _ALWAYS),)),
    "spec_drafts": (COUNTER, (("vllm:spec_decode_num_drafts_total", (0, 8)),)),
    "spec_accepted_per_position": (COUNTER, (("vllm:spec_decode_num_accepted_tokens_per_pos_total", (0, 8)),)),
    # LoRA (V0 engine/metrics.py 0.6.4.post1; V1 v1/metrics/loggers.py 0.8.5-0.33.0): a gauge whose labels
    # carry the adapters (running_lora_adapters, waiting_lora_adapters, max_lora)
    "lora_requests_info": (INFO, (("vllm:lora_requests_info", _ALWAYS),)),
})

#: V0-only speculative-decoding metrics (engine/metrics.py; gone with V0 in 0.11): not in METRICS, whose
#: names every version of a key shares
V0_SPEC_DECODE_GAUGES = ("vllm:spec_decode_draft_acceptance_rate", "vllm:spec_decode_efficiency")

#: stable key -> every exposed name it has had, newest first
ALIASES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {key: tuple(name for name, _ in names) for key, (_, names) in METRICS.items()})


def keys_of(kind: str) -> tuple[str, ...]:
    """The keys of one kind (gauge, counter, histogram), in table order."""
    return tuple(key for key, (k, _) in METRICS.items() if k == kind)


def name_for(key: str, version: tuple[int, ...]) -> Optional[str]:
    """The name vLLM ``version`` exposes ``key`` under (None: that version has no such metric)."""
    for name, since in METRICS[key][1]:
        if version >= since:
            return name
    return None
