"""A model of the prompt and output token lengths ``vllm bench serve --dataset-name sharegpt`` sends,
without the dataset: a compact joint histogram shipped as ``sharegpt_lengths.json`` (its header
names the published statistics it was built from, their licences, and how; rebuilt by
``benchmarks/build_sharegpt_lengths.py``).

vLLM bench's ShareGPT sampler (``ShareGPTDataset.sample``, 0.10 … 0.33): shuffle the conversations
with ``random.seed(seed)``, take the first turn (prompt) and second turn (completion) of each,
tokenize both, and drop a pair whose prompt or completion has fewer than 4 tokens, whose prompt
has more than 1,024, or whose prompt + output exceeds 2,048 (``is_valid_sequence``); the output
budget (``max_tokens``) is the completion's length, or ``--sharegpt-output-len`` (then the short-
output check is skipped). This model draws (prompt, output) pairs from the histogram of the pairs
that pass those filters; with ``--sharegpt-output-len`` it draws prompts from the histogram of
prompts whose prompt + that length passes. It is an approximation (the histogram's header names the
published means it is fitted to): the real run sends particular
conversations in a particular order; kvplan reproduces their length distribution, not the draws.
"""
from __future__ import annotations

import bisect
import json
import math
import random
from functools import lru_cache
from pathlib import Path
from typing import Optional

MIN_LEN, MAX_PROMPT, MAX_TOTAL = 4, 1024, 2048
_FILE = Path(__file__).with_name("sharegpt_lengths.json")


@lru_cache(maxsize=1)
def load() -> dict:
    with open(_FILE, encoding="utf-8") as f:
        return json.load(f)


def _cells(output_len: Optional[int]) -> tuple[list, list]:
    """(cells, cumulative weights) of the histogram after vLLM bench's filters."""
    d = load()
    pe, oe = d["prompt_edges"], d["output_edges"]
    cells, cum, total = [], [], 0.0
    for i in range(len(pe) - 1):
        for j in range(len(oe) - 1):
            w = d["counts"][i][j]
            if w <= 0:
                continue
            p_lo, p_hi = pe[i], pe[i + 1] - 1
            o_lo, o_hi = oe[j], oe[j + 1] - 1
            if output_len is not None:
                # the output is fixed: the prompts whose prompt + output_len passes
                p_hi = min(p_hi, MAX_PROMPT, MAX_TOTAL - output_len)
                p_lo = max(p_lo, MIN_LEN)
                if p_hi < p_lo:
                    continue
                cells.append((p_lo, p_hi, output_len, output_len))
            else:
                p_lo, p_hi = max(p_lo, MIN_LEN), min(p_hi, MAX_PROMPT)
                o_lo = max(o_lo, MIN_LEN)
                if p_hi < p_lo or o_hi < o_lo or p_lo + o_lo > MAX_TOTAL:
                    continue
                cells.append((p_lo, p_hi, o_lo, o_hi))
            total += w
            cum.append(total)
    return cells, cum


#: Tokens per Llama-3 token on ShareGPT text for tokenizers of at most 64k entries (Llama-2 and
#: Mistral v0.1 style SentencePiece): the two published runs the length model is fitted to give
#: 270.64 prompt tokens with Llama-2's tokenizer and 229.71 with Llama-3.1's (128k entries).
SMALL_VOCAB_SCALE = 270.64 / 229.71
SMALL_VOCAB = 64_000
#: ... and for vocabularies of 140k entries or more (Qwen2/3 and GLM-4's 151k, gpt-oss's o200k):
#: the GPUStack runs of the dev set (1,000 ShareGPT prompts, seed 0) counted 217.4 (Qwen3),
#: 214.5 (GLM-4.5-Air) and 215.3 (gpt-oss-20b) prompt tokens per request, 0.939x Llama-3's 229.71
#: on average (token counts of the data set, not timings).
LARGE_VOCAB_SCALE = 215.7 / 229.71
LARGE_VOCAB = 140_000


def tokenizer_scale(vocab_size: int) -> float:
    """ShareGPT lengths in this tokenizer per Llama-3 token (approximate: by vocabulary size)."""
    if 0 < vocab_size <= SMALL_VOCAB:
        return SMALL_VOCAB_SCALE
    return LARGE_VOCAB_SCALE if vocab_size >= LARGE_VOCAB else 1.0


#: A chat model answering a ShareGPT prompt ends its reply (EOS) before the reference reply's
#: length (bench's max_tokens) on this share of requests, at a uniform point of it, unless
#: ``--ignore-eos``: the reply gets 1 - share/2 of the reference tokens on average. From the dev
#: set's token counts (GPUStack, chat endpoint): Qwen3-14B/32B 0.89, GLM-4.5-Air 0.90,
#: gpt-oss-20b 0.87, Qwen3-8B (100 prompts) 0.91 of the reference length.
EARLY_STOP_SHARE = 0.22


def early_stops(outputs: list[int], seed: int, share: float = EARLY_STOP_SHARE) -> list[int]:
    """The tokens each reply gets when the model may stop before bench's ``max_tokens`` (the
    reference reply's length), deterministic in ``seed``."""
    rng = random.Random(f"sharegpt-eos:{seed}")
    out = []
    for o in outputs:
        stop = rng.random() < share
        at = rng.random()
        out.append(max(1, math.ceil(o * at)) if stop else o)
    return out


def reply_stops(outputs: list[int], seed: int, median: float, sigma: float) -> list[int]:
    """The tokens each reply gets when the model ends its own reply (log-normal length, ``median``
    tokens, log ``sigma``) unless bench's ``max_tokens`` (``outputs``) comes first; deterministic
    in ``seed``."""
    rng = random.Random(f"reply-eos:{seed}")
    return [min(o, max(1, round(median * math.exp(sigma * rng.gauss(0.0, 1.0))))) for o in outputs]


def sample_pairs(n: int, seed: int, output_len: Optional[int] = None, scale: float = 1.0) -> list[tuple[int, int]]:
    """``n`` (prompt, output) token lengths, deterministic in ``seed``: a histogram cell by its
    weight, then uniform lengths inside it (redrawn until prompt + output passes the 2,048 cap).
    ``scale``: this tokenizer's tokens per Llama-3 token (:func:`tokenizer_scale`), applied to the
    draws and kept within bench's bounds."""
    cells, cum = _cells(output_len)
    rng = random.Random(f"sharegpt:{seed}")
    out = []
    total = cum[-1]
    while len(out) < n:
        c = cells[bisect.bisect_right(cum, rng.random() * total)]
        p = rng.randint(c[0], c[1])
        o = rng.randint(c[2], c[3])
        if scale != 1.0:
            # the published post-filter means scale by the tokenizers' ratio: so do the draws,
            # kept within bench's bounds
            p = min(round(p * scale), MAX_PROMPT)
            if output_len is None:
                o = min(round(o * scale), MAX_TOTAL - p)
        if p + o <= MAX_TOTAL:
            out.append((p, o))
    return out


def describe() -> str:
    return load().get("description", "ShareGPT length model")
