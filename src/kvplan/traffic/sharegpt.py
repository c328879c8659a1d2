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
#: 270.64 prompt tokens with Llama-2's tokenizer and 229.71 with Llama-3.1's. Larger vocabularies
#: (Llama-3, Qwen2/3, GLM-4, gpt-oss's o200k) are taken at Llama-3's lengths.
SMALL_VOCAB_SCALE = 270.64 / 229.71
SMALL_VOCAB = 64_000


def tokenizer_scale(vocab_size: int) -> float:
    """ShareGPT lengths in this tokenizer per Llama-3 token (approximate: by vocabulary size)."""
    return SMALL_VOCAB_SCALE if 0 < vocab_size <= SMALL_VOCAB else 1.0


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
