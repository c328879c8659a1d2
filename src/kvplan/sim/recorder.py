"""What the simulator keeps of its steps beyond the aggregates: a bounded, deterministic sample of
each phase's steps (``prefill``: steps that compute prompt tokens; ``decode``: decode-only steps),
so a result can show the step model's breakdown of the median step of each phase.

The step loop hands every ``stride``-th step to :meth:`StepRecorder.add` (a countdown: one integer
test per step). A sample is a tuple of numbers (no objects for the garbage collector to walk) with
a weight: the steps it stands for (the stride when it was taken, times the steps of a decode
stretch, which is recorded as its first step). When a phase holds ``2 × cap`` samples, every
second one is dropped, the kept ones' weights double, and the stride doubles: the same samples for
the same run, and a weighted median that is the run's median within the sampling's resolution."""
from __future__ import annotations

from typing import Any, Final, Optional

#: (duration, tokens, seqs, kv read, pairs, prefill tokens, prefill seqs, max context, weight)
WEIGHT: Final = 8


class StepRecorder:
    __slots__ = ("cap", "stride", "samples", "steps")

    def __init__(self, cap: int = 1024):
        self.cap = cap
        self.stride = 1
        self.samples: dict[str, list] = {"prefill": [], "decode": []}
        self.steps = {"prefill": 0, "decode": 0}

    def add(self, duration: float, tokens: int, num_seqs: int, kv_read_tokens: Any, attn_pairs: Any,
            prefill_tokens: int, prefill_seqs: int, max_context: int, steps: int) -> int:
        """Record a sampled step (or the first of a decode stretch of ``steps`` steps); returns how
        many steps to let pass before the next sample. (The KV read and pairs are kept as given, an
        int or a float: a compiled float parameter would turn an int into a float.)"""
        phase = "prefill" if prefill_tokens else "decode"
        weight = steps * self.stride
        self.steps[phase] += weight
        samples = self.samples[phase]
        samples.append((duration, tokens, num_seqs, kv_read_tokens, attn_pairs, prefill_tokens, prefill_seqs,
                        max_context, weight))
        if len(samples) >= 2 * self.cap:
            samples[:] = [s[:WEIGHT] + (2 * s[WEIGHT],) for s in samples[::2]]
            self.stride *= 2
        return self.stride

    def median_step(self, phase: str) -> Optional[tuple]:
        """(duration, tokens, seqs, kv read, pairs, prefill tokens, prefill seqs, max context) of the
        phase's median step (weighted), or None."""
        samples = sorted(self.samples[phase])
        if not samples:
            return None
        half = sum(s[WEIGHT] for s in samples) / 2.0
        acc = 0
        for s in samples:
            acc += s[WEIGHT]
            if acc >= half:
                return s[:WEIGHT]
        return samples[-1][:WEIGHT]  # pragma: no cover - unreachable

    def counts(self) -> dict[str, int]:
        """Steps per phase (estimated from the weights once sampling has thinned)."""
        return dict(self.steps)
