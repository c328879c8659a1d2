"""vLLM's start-up error texts, written once: each :class:`Text` is a template that
:mod:`kvplan.memory.admission` fills to write the message vLLM prints (per version), and the
regular expression ``kvplan doctor`` (:mod:`kvplan.ops.doctor.signatures`) searches log lines with
is derived from the same template: its literal text escaped, each field a named group of the
numbers or words vLLM prints there. A template holds the part of a message that every version
shares and the doctor recognises; admission adds the version-dependent tails around it.

Fields: ``{name}`` is a named group of the field's kind (``INT``, ``FLOAT``, ``WORD`` or an
alternation given as a tuple of the texts vLLM prints); an ``Alt`` (texts) or ``Raw`` (a regular
expression) kind is matched without a group (a wording that differs between versions, e.g.
``model's`` / ``models's``); ``{name?}``: the field may be missing, and so may the space after it.
"""
from __future__ import annotations

import re
from typing import Union

#: how vLLM prints a whole number (the doctor also reads thousands separators)
INT = r"[0-9][0-9,]*"
#: a number with an optional fraction (GiB amounts, utilizations)
FLOAT = r"-?[0-9][0-9,]*(?:\.[0-9]+)?"
#: a config.json key
WORD = r"\w+"


class Alt(tuple):
    """Texts a field may hold that differ between versions: matched without a group."""


class Raw(str):
    """A field matched by this regular expression, without a group."""


_FIELD = re.compile(r"\{(\w+)(\??)\}")
Kind = Union[str, tuple]


class Text:
    """One template: ``format(**values)`` writes it, ``pattern`` is its regular expression."""

    def __init__(self, template: str, **kinds: Kind):
        self.template = template
        self.kinds = kinds
        names = [m.group(1) for m in _FIELD.finditer(template)]
        if set(names) != set(kinds):
            raise ValueError(f"fields {names} and kinds {sorted(kinds)} differ in {template!r}")
        self.pattern = re.compile(self._regex())

    def _regex(self) -> str:
        out, pos = [], 0
        for m in _FIELD.finditer(self.template):
            out.append(re.escape(self.template[pos:m.start()]))
            name, optional = m.group(1), m.group(2) == "?"
            kind = self.kinds[name]
            if isinstance(kind, Alt):
                group = "(?:" + "|".join(re.escape(k) for k in kind) + ")"
            elif isinstance(kind, Raw):
                group = str(kind)
            else:
                body = "|".join(re.escape(k) for k in kind) if isinstance(kind, tuple) else kind
                group = f"(?P<{name}>{body})"
            pos = m.end()
            if optional:
                group += "?"
                if self.template.startswith(" ", pos):
                    group += " ?"
                    pos += 1
            out.append(group)
        out.append(re.escape(self.template[pos:]))
        return "".join(out)

    def format(self, **values) -> str:
        return _FIELD.sub(lambda m: str(values[m.group(1)]), self.template)


# ``_check_enough_kv_cache_memory`` (V1 engine, kv_cache_utils.py): the head of every version's text
# (0.22 fixed "models's"), then the estimate (0.9+, when a length fits).
KV_TOO_SMALL = Text("To serve at least one request with the {model_s} max seq len ({max_len}), ({needed} GiB KV "
                    "cache is needed, which is larger than the available KV cache memory ({available} GiB)",
                    model_s=Alt(("model's", "models's")), max_len=INT, needed=FLOAT, available=FLOAT)
KV_ESTIMATE = Text(" Based on the available memory, the estimated maximum model length is {estimate}", estimate=INT)
#: the doctor's pattern: the head, its period, and the estimate when the text has one
KV_TOO_SMALL_V1 = re.compile(KV_TOO_SMALL.pattern.pattern + r"(?:\." + KV_ESTIMATE.pattern.pattern + ")?")

# V0 engine (_verify_cache / check_enough_kv_cache_memory of the worker), after "The model's ".
KV_TOO_SMALL_V0 = Text("max seq len ({max_len}) is larger than the maximum number of tokens that can be stored in "
                       "KV cache ({tokens})", max_len=INT, tokens=INT)

# No KV block fits at all (every version; the tails differ).
NO_BLOCKS = Text("No available memory for the cache blocks")

# _get_and_verify_max_len (config/model.py): --max-model-len above what the model's config.json
# allows; then model_max_length and the version's advice.
MAX_LEN_ABOVE_DERIVED = Text("User-specified max_model_len ({requested}) is greater than the derived max_model_len "
                             "({key}={derived} or model_max_length=", requested=INT, key=WORD, derived=FLOAT)

# request_memory (v1/worker/utils.py): the device is named from 0.10 on (``{device}``: " cuda:0" or "").
FREE_MEMORY = Text("Free memory on device{device} ({free}/{total} GiB) on startup is less than desired GPU memory "
                   "utilization ({util}, {requested} GiB)", device=Raw(r"(?: \S+)?"), free=FLOAT, total=FLOAT,
                   util=FLOAT, requested=FLOAT)

# verify_with_parallel_config (config/model.py): heads, KV heads or experts over TP.
TP_NOT_DIVISIBLE = Text("Total number of {what?} ({value}) must be divisible by tensor parallel size ({tp})",
                        what=("attention heads", "key-value heads", "experts"), value=INT, tp=INT)

# Serve flags that move memory (kvplan.memory.lora, spec_decode, offload): vLLM's refusals, written by
# kvplan.memory._resolve / offload and read by ``kvplan doctor``.
# LoRAConfig (config/lora.py 0.19.0; config.py 0.6.4.post1-0.8.5): the CPU cache below the GPU slots.
LORA_CPU_LORAS = Text("max_cpu_loras ({cpu_loras}) must be >= max_loras ({max_loras})", cpu_loras=INT, max_loras=INT)
# LoRAConfig._verify_args (0.6.4.post1-0.11.0); a pydantic Literal from 0.19.
LORA_RANK_NOT_ALLOWED = Text("max_lora_rank ({rank}) must be one of {ranks}", rank=INT, ranks=Raw(r"\(?[0-9, ]*\)?"))
# PEFTHelper.validate_legal (lora/peft_helper.py 0.8.5, 0.19.0; worker_manager.py 0.6.4.post1): an adapter
# whose rank is above --max-lora-rank, when it is loaded.
LORA_ADAPTER_RANK = Text("LoRA rank {rank} is greater than max_lora_rank {max_rank}", rank=INT, max_rank=INT)
# LogitsProcessorWithLoRA.create_lora_weights (0.12+; "32000 >= vocab_size <= 257024" wording up to 0.11).
LORA_VOCAB = Text("When using LoRA, vocab size must be <= {limit}", limit=INT)
# LoRAConfig.verify_with_cache_config: 0.7 (every engine) and 0.8-0.10 (V0).
LORA_CPU_OFFLOAD = Text("{text}", text=Alt(("CPU offload is not supported with LoRA yet.",
                                            "V0 LoRA does not support CPU offload, please use V1.")))
# SpeculativeConfig.__post_init__ (0.10.1.1-0.18: V1 without a draft-model proposer).
SPEC_DRAFT_MODEL = Text("Speculative decoding with draft model is not supported yet")
# SpeculativeConfig.__post_init__ (0.19.0): MTP layers reused past n_predict.
SPEC_N_PREDICT = Text("num_speculative_tokens:{k} must be divisible by n_predict={n}", k=INT, n=INT)
# CacheConfig.verify_with_parallel_config (0.6-0.17): the swap space of the node's TP workers.
SWAP_SPACE = Text("Too large swap space. {usage} GiB out of the {total} GiB total CPU memory is allocated for the swap "
                  "space", usage=FLOAT, total=FLOAT)


# SchedulerConfig._verify_args (the same texts 0.6.4-0.33: config.py, then config/scheduler.py)
SCHED_BATCH_BELOW_LEN = Text("max_num_batched_tokens ({batched}) is smaller than max_model_len ({max_len}). This "
                             "effectively limits the maximum sequence length to max_num_batched_tokens",
                             batched=INT, max_len=INT)
SCHED_BATCH_BELOW_SEQS = Text("max_num_batched_tokens ({batched}) must be greater than or equal to max_num_seqs "
                              "({seqs}).", batched=INT, seqs=INT)
# --block-size outside argparse's choices (0.6.4-0.17), or no attention kernel for it (0.18+,
# v1/worker/utils.py)
BLOCK_SIZE_CHOICE = Text("argument --block-size: invalid choice: {block} (choose from {choices})",
                         block=INT, choices=Raw(r"[0-9, ]*"))
NO_COMMON_BLOCK_SIZE = Text("No common block size for {block}", block=INT)
