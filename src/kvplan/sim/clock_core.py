"""The step model's hot path (:meth:`kvplan.sim.stepmodel.StepModel.time`) as a small class the
native build compiles (:mod:`kvplan._native`): the simulator calls it once per engine step.

It holds what ``StepModel`` resolved from its cost terms - the memoised token and sequence parts
(shared dicts, filled on first use), the linear coefficients, the windows - and computes a step's
seconds with the same operations in the same order as the interpreted closure did, so the same
floats. The KV read and the pairs arrive as the scheduler computed them (an int or a float) and
are used as given: only sums of the model's own floats are typed as floats."""
from __future__ import annotations

from typing import Any, Callable


class StepClock:
    """``time(tokens, num_seqs, kv_read_tokens, attn_pairs, features=None)`` of one step model."""

    def __init__(self, parts: dict, tokens_part: Callable[[int], float], seqs_part: Callable[[int], float],
                 cpu_seq_part: Callable[[int], float], overlap: bool, make_features: Callable[..., Any]) -> None:
        self.tok: dict = parts["tok"]
        self.seq: dict = parts["seq"]
        self.cpu_seq: dict = parts["cpu_seq"]
        self.tokens_part = tokens_part
        self.seqs_part = seqs_part
        self.cpu_seq_part = cpu_seq_part
        self.fixed: float = parts["fixed"]
        self.kv: float = parts["kv"]
        self.window: int = parts["window"]
        self.window_kv: float = parts["window_kv"]
        self.prefill_fixed: float = parts["prefill_fixed"]
        self.pair: float = parts["pair"]
        self.window_pair: float = parts["window_pair"]
        self.pair_window: int = parts["pair_window"]
        self.cpu_fixed: float = parts["cpu_fixed"]
        self.cpu_seq_s: float = parts["cpu_seq_s"]
        self.has_cpu_per_seq = bool(parts["cpu_per_seq"])
        self.general: tuple = tuple(parts["general"])
        self.cpu_general: tuple = tuple(parts["cpu_general"])
        self.overlap = overlap
        self.make_features = make_features

    def time(self, tokens: int, num_seqs: int, kv_read_tokens: Any, attn_pairs: Any, features: Any = None) -> float:
        """Seconds for one step."""
        a = self.tok.get(tokens)
        if a is None:
            a = self.tokens_part(tokens)
            self.tok[tokens] = a
        b = self.seq.get(num_seqs)
        if b is None:
            b = self.seqs_part(num_seqs)
            self.seq[num_seqs] = b
        gpu = a + b + self.fixed + self.kv * kv_read_tokens
        window = self.window
        if window:
            cap = num_seqs * window
            gpu += self.window_kv * (kv_read_tokens if kv_read_tokens < cap else cap)
        if attn_pairs:
            gpu += self.prefill_fixed + self.pair * attn_pairs
            if self.window_pair:
                cap = self.pair_window * (features.prefill_tokens if features is not None and features.prefill_tokens
                                          else tokens)
                gpu += self.window_pair * (attn_pairs if attn_pairs < cap else cap)
        cpu = self.cpu_fixed + self.cpu_seq_s * num_seqs
        if self.has_cpu_per_seq:
            v = self.cpu_seq.get(num_seqs)
            if v is None:
                v = self.cpu_seq_part(num_seqs)
                self.cpu_seq[num_seqs] = v
            cpu += v
        general, cpu_general = self.general, self.cpu_general
        if general or cpu_general:
            f = features if features is not None else self.make_features(tokens, num_seqs, kv_read_tokens, attn_pairs)
            for fn in general:
                gpu += fn(f)
            for fn in cpu_general:
                cpu += fn(f)
        if self.overlap:
            return gpu if gpu > cpu else cpu
        return gpu + cpu
