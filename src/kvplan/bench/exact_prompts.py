"""``kvplan bench --prompt-length exact``: synthetic prompts of exactly ``--input-len`` tokens as
vLLM counts them, chat template included.

By default (``words``) a prompt of N is N random one-token words; the server then counts more: the
chat endpoint wraps the text in the model's chat template (role markers, BOS, the generation
prompt: 23 more tokens for Llama-3's template, so ``--input-len 128`` arrives as 151) and the
completions endpoint adds BOS. ``exact`` measures that overhead once with the model's tokenizer,
the way vLLM counts (chat: the rendered template tokenized without special tokens; completions: the
text with them), keeps only the words that add exactly one token after another word, and sends
N − overhead of them. Checked at start: two lengths must count exactly, or the run refuses.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError

FIRST_WORD = "The"  # every exact prompt starts with it (its tokens are part of the overhead)


@dataclass(frozen=True)
class ExactPrompts:
    words: tuple[str, ...]  # each adds exactly one token after another word (with its leading space)
    overhead_tokens: int  # template + BOS + the first word: a prompt of k more words counts overhead + k
    tokenizer: str

    def text(self, n_tokens: int, rng) -> str:
        k = max(0, n_tokens - self.overhead_tokens)
        return FIRST_WORD + "".join(" " + w for w in rng.choices(self.words, k=k))

    def to_dict(self) -> dict:
        return {"mode": "exact", "template_overhead_tokens": self.overhead_tokens, "tokenizer": self.tokenizer,
                "words": len(self.words)}


def _count(tok, endpoint: str, text: str) -> int:
    if endpoint == "chat":
        return tok.count_messages([{"role": "user", "content": text}])
    return tok.count_texts([text], add_special_tokens=True)[0]


def measure(tok, endpoint: str, candidates) -> ExactPrompts:
    """The overhead and the one-token words of ``tok`` for ``endpoint`` (chat or completions)."""
    base = tok.count_texts([FIRST_WORD], add_special_tokens=False)[0]
    singles = tok.count_texts([FIRST_WORD + " " + w for w in candidates], add_special_tokens=False)
    words = tuple(w for w, n in zip(candidates, singles) if n == base + 1)
    if len(words) < 50:
        raise UsageError(f"--prompt-length exact: the tokenizer ({tok.source}) has too few one-token words "
                         f"({len(words)}) to build prompts from")
    overhead = _count(tok, endpoint, FIRST_WORD)
    import random

    rng = random.Random(0)
    for k in (16, 301):  # the prompt must count exactly overhead + k, at a short and a longer length
        ex = ExactPrompts(words, overhead, str(tok.source))
        got = _count(tok, endpoint, ex.text(overhead + k, rng))
        if got != overhead + k:
            raise UsageError(f"--prompt-length exact: {tok.source} counts a {overhead + k}-token prompt as {got} "
                             "(its words merge); use --prompt-length words")
    return ExactPrompts(words, overhead, str(tok.source))
