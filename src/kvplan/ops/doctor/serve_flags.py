"""What ``kvplan doctor`` recognises of LoRA, speculative decoding and swap space: vLLM's refusals (the
templates of kvplan.memory.error_texts, which the planner writes with the same text) and the phase of an
out-of-memory that happens while vLLM builds LoRA buffers or loads / profiles a drafter."""
from __future__ import annotations

import re
from typing import Any, Callable, Optional

from ...memory import error_texts as et
from . import signatures as sig
from .model import Evidence, Finding, Fix

#: (key, pattern) searched in every line; the key picks the finding below
PATTERNS: tuple[tuple[str, re.Pattern], ...] = (
    ("lora_cpu_loras", et.LORA_CPU_LORAS.pattern),
    ("lora_rank_not_allowed", et.LORA_RANK_NOT_ALLOWED.pattern),
    ("lora_adapter_rank", et.LORA_ADAPTER_RANK.pattern),
    ("lora_vocab", et.LORA_VOCAB.pattern),
    ("lora_cpu_offload", et.LORA_CPU_OFFLOAD.pattern),
    ("spec_draft_model", et.SPEC_DRAFT_MODEL.pattern),
    ("spec_n_predict", et.SPEC_N_PREDICT.pattern),
    ("swap_space", et.SWAP_SPACE.pattern),
    # V1's periodic line (v1/spec_decode/metrics.py SpecDecodingLogging, 0.8.5-0.19.0 wordings):
    # "SpecDecoding metrics: ... Mean acceptance length: L, ... Accepted: A tokens, Drafted: D tokens, ..."
    ("spec_metrics", re.compile(r"SpecDecoding metrics: .*?Mean acceptance length: (?P<length>" + et.FLOAT
                                + r").*?Accepted: (?P<accepted>" + et.INT + r") tokens, Drafted: (?P<drafted>"
                                + et.INT + r") tokens")),
    # V0's (engine/metrics.py, 0.6.4.post1-0.10): "Speculative metrics: Draft acceptance rate: 0.512, ..."
    ("spec_metrics_v0", re.compile(r"Speculative metrics: Draft acceptance rate: (?P<rate>" + et.FLOAT + r")")),
)

# An OOM's traceback or surrounding lines that name the phase (vLLM 0.8-0.19 frames and log lines):
# LoRA's create_lora_weights / punica wrappers; the drafter's load_model / dummy_run and the rejection sampler.
OOM_LORA = re.compile(r"create_lora_weights|lora_manager|load_lora_model|punica|LoRAModelManager", re.IGNORECASE)
OOM_DRAFTER = re.compile(r"drafter|spec_decode|proposer|rejection_sampler|eagle|Loading drafter model", re.IGNORECASE)

_ALLOWED_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
#: below this draft acceptance rate speculation mostly costs time (kvplan.ops.thresholds spec_acceptance)
_LOW_ACCEPTANCE = 0.3


def scan(line: str) -> list[tuple[str, re.Match]]:
    return [(key, m) for key, pattern in PATTERNS if (m := pattern.search(line))]


def oom_phase(text: str) -> Optional[str]:
    """"drafter" or "lora" when the OOM's context names that phase; None otherwise (checked before the
    sampler: the rejection sampler's frames also say "sampler")."""
    if OOM_DRAFTER.search(text):
        return "drafter"
    if OOM_LORA.search(text):
        return "lora"
    return None


def oom_fixes(phase: str, args: dict[str, Any]) -> list[Fix]:
    if phase == "lora":
        rank, loras = int(args.get("max_lora_rank") or 16), int(args.get("max_loras") or 1)
        out = [Fix(f"--max-lora-rank {max(8, rank // 2)}" if rank > 8 else "--max-loras 1",
                   "LoRA's stacked buffers are max_loras × max_lora_rank on every module (halving either halves them; "
                   "kvplan plan --enable-lora shows the size)", "capacity")]
        if loras > 1:
            out.append(Fix(f"--max-loras {max(1, loras // 2)}", "fewer adapter slots on the GPU (more in --max-cpu-loras "
                           "host memory instead)", "throughput"))
        return out
    return [Fix("a smaller num_speculative_tokens, or --max-num-seqs 128",
                "the drafter's profile runs the rejection sampler over max_num_seqs rows of the vocabulary; fewer rows, "
                "less memory (kvplan plan --speculative-config shows the drafter's weights and profile)", "throughput"),
            Fix("--gpu-memory-utilization lower by the drafter's weights (V0 does not charge them)",
                "the drafter's weights must fit outside the KV budget where vLLM does not count them", "capacity")]


def _next_rank(rank: int) -> int:
    return next((r for r in _ALLOWED_RANKS if r >= rank), _ALLOWED_RANKS[-1])


def findings(hits: dict[str, list[tuple[int, re.Match]]], args: dict[str, Any],
             evidence: Callable[[list[int]], tuple[Evidence, ...]]) -> list[Finding]:
    out: list[Finding] = []
    for i, m in hits.get("lora_cpu_loras", [])[:1]:
        cpu, slots = int(sig.num(m.group("cpu_loras"))), int(sig.num(m.group("max_loras")))
        out.append(Finding("lora_config", "error", f"--max-cpu-loras {cpu} below --max-loras {slots}", evidence([i]),
                           (("max_cpu_loras", cpu), ("max_loras", slots)),
                           (Fix(f"--max-cpu-loras {slots}", "the CPU cache must hold every GPU slot's adapter", "free"),)))
    for i, m in hits.get("lora_rank_not_allowed", [])[:1]:
        rank = int(sig.num(m.group("rank")))
        out.append(Finding("lora_config", "error", f"--max-lora-rank {rank} is not a rank vLLM accepts", evidence([i]),
                           (("max_lora_rank", rank),),
                           (Fix(f"--max-lora-rank {_next_rank(rank)}", "the next rank vLLM accepts", "free"),)))
    for i, m in hits.get("lora_adapter_rank", [])[:1]:
        rank, limit = int(sig.num(m.group("rank"))), int(sig.num(m.group("max_rank")))
        new = _next_rank(rank)
        out.append(Finding("lora_adapter_rank", "error", f"an adapter of rank {rank} above --max-lora-rank {limit}",
                           evidence([i]), (("adapter_rank", rank), ("max_lora_rank", limit)),
                           (Fix(f"--max-lora-rank {new}", f"LoRA's GPU buffers grow {new / limit:g}x with the rank "
                                "(kvplan plan --enable-lora --max-lora-rank shows by how much)", "capacity"),)))
    for i, m in hits.get("lora_vocab", [])[:1]:
        out.append(Finding("lora_config", "error", f"the vocabulary is above what vLLM's LoRA takes ({m.group('limit')})",
                           evidence([i]), (("vocab_limit", int(sig.num(m.group("limit")))),),
                           (Fix("serve the adapter merged into the weights, or without --enable-lora",
                                "vLLM's LoRA logits kernel has no larger vocabulary", "operational"),)))
    for i, _ in hits.get("lora_cpu_offload", [])[:1]:
        out.append(Finding("lora_config", "error", "LoRA with --cpu-offload-gb is refused by this vLLM", evidence([i]),
                           (), (Fix("drop --cpu-offload-gb, or run the V1 engine (vLLM 0.8+: VLLM_USE_V1=1)",
                                    "V1 takes LoRA with offloaded weights", "operational"),)))
    for i, _ in hits.get("spec_draft_model", [])[:1]:
        out.append(Finding("speculative_config", "error", "this vLLM's V1 engine has no draft-model speculation",
                           evidence([i]), (),
                           (Fix("an EAGLE/EAGLE-3 head, MTP or n-gram in --speculative-config",
                                "the methods V1 runs before 0.19", "accuracy"),
                            Fix("vLLM 0.19 or newer", "draft models run on V1 from 0.19", "operational"))))
    for i, m in hits.get("spec_n_predict", [])[:1]:
        k, n = int(sig.num(m.group("k"))), int(sig.num(m.group("n")))
        out.append(Finding("speculative_config", "error", f"num_speculative_tokens {k} is not a multiple of the MTP "
                           f"layers' n_predict {n}", evidence([i]), (("num_speculative_tokens", k), ("n_predict", n)),
                           (Fix(f'"num_speculative_tokens": {max(n, k // n * n)}', "a multiple of n_predict", "free"),)))
    spec = hits.get("spec_metrics", [])
    spec_v0 = hits.get("spec_metrics_v0", [])
    if spec or spec_v0:
        if spec:
            accepted = sum(sig.num(m.group("accepted")) or 0 for _, m in spec)
            drafted = sum(sig.num(m.group("drafted")) or 0 for _, m in spec)
            rate = accepted / drafted if drafted else None
            lengths = [sig.num(m.group("length")) for _, m in spec]
            numbers: tuple = (("accepted_tokens", int(accepted)), ("drafted_tokens", int(drafted)),
                              ("acceptance_rate", round(rate, 4) if rate is not None else None),
                              ("mean_acceptance_length_last", lengths[-1]))
            idx = [i for i, _ in spec]
        else:
            rate = sig.num(spec_v0[-1][1].group("rate"))
            numbers, idx = (("acceptance_rate", rate),), [i for i, _ in spec_v0]
        low = rate is not None and rate < _LOW_ACCEPTANCE
        fixes = [Fix(f"kvplan simulate --speculative-config ... --spec-acceptance {rate:.2f}" if rate is not None
                     else "kvplan simulate --spec-acceptance RATE",
                     "the TPOT this acceptance gives against no speculation, at your traffic", "free")]
        if low:
            fixes.insert(0, Fix("fewer num_speculative_tokens, or a drafter trained on this model / traffic",
                                "rejected drafts cost verification work and KV slots for no tokens", "throughput"))
        out.append(Finding("spec_decode_acceptance", "warning" if low else "info",
                           f"speculative decoding accepts {rate:.0%} of drafted tokens" if rate is not None
                           else "speculative decoding metrics", evidence(idx[-3:]), numbers, tuple(fixes)))
    for i, m in hits.get("swap_space", [])[:1]:
        usage, total = sig.num(m.group("usage")), sig.num(m.group("total"))
        tp = int(args.get("tensor_parallel_size") or 1)
        fit = max(0, int(0.4 * (total or 0) / tp))
        out.append(Finding("swap_space", "error", f"{usage} GiB of swap space against {total} GiB of host memory",
                           evidence([i]), (("swap_gib", usage), ("host_memory_gib", total)),
                           (Fix(f"--swap-space {fit}", "swap space per GPU × TP under 40 % of the host's memory "
                                "(V1 never uses it)", "free"),)))
    return out
