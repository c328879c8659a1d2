"""The GPU step-time model as a list of cost terms, the way :mod:`kvplan.memory.kv_specs` builds KV.

One engine step is described by a :class:`StepFeatures` record the scheduler fills once per step
(tokens, sequences, KV entries read, prefill attention pairs, and per-sequence features such as
the prefill sequences and the longest context). The step's duration is the sum of small frozen
:class:`CostTerm` objects, each one piece of what vLLM runs (the linear layers' GEMMs, the MoE
experts, the all-reduces, attention, elementwise kernels, the LM head, the sampler, the engine
core's CPU work ...), built once per configuration by :func:`kvplan.sim.opmodel.build` from the
resolved engine configuration and the vLLM version's rules. :meth:`StepModel.time` (the
simulator's hot path) and :meth:`StepModel.breakdown` (what ``kvplan simulate --format json``
shows) come from the same list, so they agree by construction.

A term's cost is split into standard parts, so the model can memoise what depends on one number
only (the simulator asks the same few hundred token and sequence counts millions of times):

    padded(m)        seconds at m tokens run at the CUDA-graph size (GEMMs, all-reduce, MoE); the
                     sum of every term's padded part is made monotone in m (a running maximum:
                     measured kernel times are not) and is memoised per token count
    per_token(m)     seconds at the real token count (attention per token-head, elementwise)
    per_seq(s)       seconds per step as a function of the scheduled sequences (LM head, sampler)
    fixed_s          seconds per step
    kv_token_s       seconds per KV entry read (attention's memory traffic)
    window_kv_s, window   KV entries of sliding-window layers, capped at ``window`` per sequence
    pair_s, prefill_fixed_s   prefill attention: seconds per (query, key) pair, plus a launch
                     when the step has any pair
    window_pair_s    prefill pairs of sliding-window layers: a query sees at most ``window`` keys,
                     so at most ``window`` pairs per prefill token are computed
    general(f)       anything else, from the whole :class:`StepFeatures` (evaluated every step)

and a ``resource``: ``"gpu"`` terms add up to the GPU's time, ``"cpu"`` terms to the engine core's;
with async scheduling the step takes the longer of the two (the CPU work of step k+1 overlaps
step k), without it their sum.

How to add a term (speculative decoding's draft model, LoRA's adapters, a new kernel):

1. a frozen dataclass subclassing :class:`CostTerm` (here, or in a module of its own), setting
   the parts it has (override the methods, set the coefficients) and ``resource`` if not the GPU;
   give it a ``name`` that says what vLLM runs;
2. build it in :func:`kvplan.sim.opmodel.build` from the :class:`~kvplan.sim.engine_config.EngineConfig`
   (and its ``semantics``) and append it to the list; a term that depends on a per-sequence
   feature the scheduler does not fill yet sets ``needs`` (e.g. ``("max_context",)``);
3. tests: the term's own seconds on a few :class:`StepFeatures`, and that the model's
   ``breakdown`` still sums to ``time`` (tests/test_sim_stepmodel.py checks every shipped term).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, Optional, Sequence


class StepFeatures(NamedTuple):
    """What one engine step computes, filled by the scheduler once per step (a tuple: the step
    loop makes one per step).

    ``tokens``: scheduled tokens (prefill chunks + one per decoding sequence); ``num_seqs``:
    scheduled sequences; ``kv_read_tokens``: KV entries attention reads, summed over them (a
    decode of a 1,000-token context reads 1,000); ``attn_pairs``: (query, key) pairs of the prefill
    chunks (a chunk of c new tokens after s cached ones: c·s + c²/2); ``prefill_tokens`` /
    ``prefill_seqs``: the prefill part; ``max_context``: the longest context in the step (0 unless
    a term asked for it: ``StepModel.needs``)."""

    tokens: int = 0
    num_seqs: int = 0
    kv_read_tokens: float = 0.0
    attn_pairs: float = 0.0
    prefill_tokens: int = 0
    prefill_seqs: int = 0
    max_context: int = 0

    @property
    def decode_seqs(self) -> int:
        return self.num_seqs - self.prefill_seqs

    def to_dict(self) -> dict:
        return self._asdict()


@dataclass(frozen=True, kw_only=True)
class CostTerm:
    """One piece of a step's cost. Subclasses override the parts they have (module docstring)."""

    name: str
    #: "gpu" or "cpu": which resource the term occupies
    resource: str = "gpu"
    fixed_s: float = 0.0
    kv_token_s: float = 0.0
    window_kv_s: float = 0.0
    window: int = 0
    pair_s: float = 0.0
    window_pair_s: float = 0.0
    prefill_fixed_s: float = 0.0
    #: per-sequence features the term reads from StepFeatures beyond the always-filled ones
    needs: tuple[str, ...] = ()
    #: which callable parts this class overrides (the model skips the rest)
    HAS_PADDED: ClassVar[bool] = False
    HAS_PER_TOKEN: ClassVar[bool] = False
    HAS_PER_SEQ: ClassVar[bool] = False
    HAS_GENERAL: ClassVar[bool] = False
    #: per_seq is ``seq_s · s`` (the model multiplies instead of memoising; CPU terms only)
    LINEAR_PER_SEQ: ClassVar[bool] = False

    def padded(self, m: int) -> float:
        """Seconds at ``m`` tokens, ``m`` already padded to the size that runs."""
        return 0.0

    def per_token(self, m: int) -> float:
        return 0.0

    def per_seq(self, s: int) -> float:
        return 0.0

    def general(self, f: StepFeatures) -> float:
        return 0.0

    def describe(self) -> dict:
        """The term's constants, for the JSON (not the hot path)."""
        out = {"name": self.name, "resource": self.resource}
        for k in ("fixed_s", "kv_token_s", "window_kv_s", "window", "pair_s", "window_pair_s", "prefill_fixed_s"):
            v = getattr(self, k)
            if v:
                out[k] = v
        return out


#: vLLM's CUDA-graph capture sizes (0.11+ default, max_cudagraph_capture_size 512): a batch of up
#: to 512 tokens runs padded to the next size (vllm/config/compilation.py).
CAPTURE_SIZES = (1, 2, 4) + tuple(range(8, 256, 8)) + tuple(range(256, 513, 16))


def pad_to_capture(tokens: int, sizes: Sequence[int] = CAPTURE_SIZES) -> int:
    """The CUDA-graph size a batch of ``tokens`` runs at (itself above the largest)."""
    if tokens > sizes[-1]:
        return tokens
    lo, hi = 0, len(sizes) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if sizes[mid] >= tokens:
            hi = mid
        else:
            lo = mid + 1
    return sizes[lo]


#: above the largest capture size the padded parts are evaluated on this grid, linear between
GRID_TOKENS = 64


@dataclass(frozen=True)
class StepModel:
    """A step-time model with the interface of :class:`kvplan.sim.steptime.StepTimeProfile`
    (``time``, ``step_time``, ``to_dict``, ``source``, ``request_overhead_s``), made of ``terms``."""

    terms: tuple[CostTerm, ...]
    async_overlap: bool
    cuda_graphs: bool
    source: str
    device: str
    clock: dict
    notes: tuple[str, ...] = ()
    #: the API server (front end) the simulator runs beside the engine: seconds per request
    #: before the engine sees it (and per prompt token), and latency added to TTFT/E2E
    request_overhead_s: float = 0.0
    api_request_s: float = 0.0
    api_prompt_token_s: float = 0.0
    #: per stream per engine step (detokenize + SSE chunk), and the chat template's rendering per
    #: request by renderer ("jinja", "harmony")
    api_chunk_s: float = 0.0
    api_chat_render_s: dict = field(default_factory=dict)
    _compiled: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        c = self._compiled
        gpu = [t for t in self.terms if t.resource == "gpu"]
        cpu = [t for t in self.terms if t.resource == "cpu"]
        c["padded"] = [t.padded for t in gpu if t.HAS_PADDED]
        c["per_token"] = [t.per_token for t in gpu if t.HAS_PER_TOKEN]
        c["per_seq"] = [t.per_seq for t in gpu if t.HAS_PER_SEQ]
        c["general"] = [t.general for t in gpu if t.HAS_GENERAL]
        fixed = 0.0
        for t in gpu:
            fixed += t.fixed_s
        c["fixed"] = fixed
        c["kv"] = _sum(t.kv_token_s for t in gpu)
        windowed = [t for t in gpu if t.window_kv_s]
        c["window_kv"] = _sum(t.window_kv_s for t in windowed)
        c["window"] = max((t.window for t in windowed), default=0)
        c["pair"] = _sum(t.pair_s for t in gpu)
        pair_windowed = [t for t in gpu if t.window_pair_s]
        c["window_pair"] = _sum(t.window_pair_s for t in pair_windowed)
        c["pair_window"] = max((t.window for t in pair_windowed), default=0)
        c["prefill_fixed"] = _sum(t.prefill_fixed_s for t in gpu)
        c["cpu_fixed"] = _sum(t.fixed_s for t in cpu)
        c["cpu_seq_s"] = _sum(t.seq_s for t in cpu if t.HAS_PER_SEQ and t.LINEAR_PER_SEQ)
        c["cpu_per_seq"] = [t.per_seq for t in cpu if t.HAS_PER_SEQ and not t.LINEAR_PER_SEQ]
        c["cpu_general"] = [t.general for t in cpu if t.HAS_GENERAL]
        c["needs"] = tuple(sorted({n for t in self.terms for n in t.needs}))
        c["tok"], c["seq"], c["cpu_seq"] = {}, {}, {}
        c["envelope"], c["grid"] = {}, {}
        c["sizes_below"] = list(CAPTURE_SIZES) if self.cuda_graphs else list(range(1, CAPTURE_SIZES[-1] + 1))
        c["running"] = 0.0
        # evaluate once so lookups with side effects (notes) have run
        if c["padded"]:
            self._tokens(1)
        object.__setattr__(self, "time", self._compile_time())

    # -- the hot path ---------------------------------------------------------------------------
    @property
    def needs(self) -> tuple[str, ...]:
        """Per-sequence features some term reads (the scheduler fills them only then)."""
        return self._compiled["needs"]

    def time(self, tokens: int, num_seqs: int, kv_read_tokens: float, attn_pairs: float,
             features: Optional[StepFeatures] = None) -> float:
        """Seconds for one step (the hot path: :class:`kvplan.sim.clock_core.StepClock` over the
        compiled parts, set per instance by ``_compile_time``; this method is only its signature)."""
        raise AssertionError("replaced per instance")  # pragma: no cover

    def _compile_time(self):
        """The hot path (two dict lookups and a few multiplications per step: memoised token and
        sequence parts, then the linear ones) as a :class:`~kvplan.sim.clock_core.StepClock`, a
        class the native build compiles; and ``decode_parts`` for the decode stretches."""
        from .clock_core import StepClock

        c = self._compiled
        tok, seq, cpu_seq = c["tok"], c["seq"], c["cpu_seq"]
        tokens_part, seqs_part = self._tokens, self._seqs
        fixed, kv, window, window_kv = c["fixed"], c["kv"], c["window"], c["window_kv"]
        cpu_fixed, cpu_seq_s, cpu_per_seq = c["cpu_fixed"], c["cpu_seq_s"], tuple(c["cpu_per_seq"])
        general, cpu_general = tuple(c["general"]), tuple(c["cpu_general"])
        overlap = self.async_overlap
        time = StepClock(c, tokens_part, seqs_part, lambda s: _sum(fn(s) for fn in cpu_per_seq), overlap,
                         StepFeatures).time

        def decode_parts(num_seqs: int):
            """``time(n, n, kv_read_tokens, 0.0)`` of a decode-only step of ``n`` sequences, split into
            what does not depend on the KV read: ``(gpu_base, kv, window, window_kv, cpu, overlap)``,
            whence the step is ``gpu = gpu_base + kv * kv_read_tokens`` (``+ window_kv * min(kv_read_tokens,
            n * window)`` with a window), then ``max(gpu, cpu)`` with ``overlap``, else ``gpu + cpu`` -
            the same operations in the same order as :meth:`time` (``gpu_base`` is its ``a + b + fixed``),
            so the same floats. None when a term reads the step's features (call :meth:`time`)."""
            if general or cpu_general:
                return None
            a = tok.get(num_seqs)
            if a is None:
                a = tok[num_seqs] = tokens_part(num_seqs)
            b = seq.get(num_seqs)
            if b is None:
                b = seq[num_seqs] = seqs_part(num_seqs)
            cpu = cpu_fixed + cpu_seq_s * num_seqs
            if cpu_per_seq:
                v = cpu_seq.get(num_seqs)
                if v is None:
                    v = cpu_seq[num_seqs] = _sum(fn(num_seqs) for fn in cpu_per_seq)
                cpu += v
            return a + b + fixed, kv, window, window_kv, cpu, overlap

        object.__setattr__(self, "decode_parts", decode_parts)
        return time

    def step_time(self, f: StepFeatures) -> float:
        return self.time(f.tokens, f.num_seqs, f.kv_read_tokens, f.attn_pairs, f)

    # -- the memoised parts -----------------------------------------------------------------------
    def _padded_sum(self, m: int) -> float:
        total = 0.0
        for fn in self._compiled["padded"]:
            total += fn(m)
        return total

    def _envelope_at_or_below(self, limit: int) -> None:
        """Measured kernel times are not monotone in m (another kernel wins at 16 rows than at 8,
        the padded size jumps at a capture boundary): a simulator whose step gets cheaper with more
        work reorders the scheduler's choices for no physical reason. The padded parts are
        therefore the running maximum over the sizes that really run (the capture sizes with CUDA
        graphs, every size eager; above them a 64-token grid, linear between)."""
        c = self._compiled
        sizes, envelope = c["sizes_below"], c["envelope"]
        while sizes and sizes[0] <= limit:
            size = sizes.pop(0)
            c["running"] = max(c["running"], self._padded_sum(size))
            envelope[size] = c["running"]

    def _grid_at(self, x: int) -> float:
        """The running maximum at grid point ``x`` (a multiple of GRID_TOKENS above the largest
        capture size): filled upwards from the highest point already known, in a loop (a first
        query at 131,072 batched tokens is 2,000 points above the capture sizes)."""
        c = self._compiled
        grid = c["grid"]
        value = grid.get(x)
        if value is not None:
            return value
        top = CAPTURE_SIZES[-1]
        start = x
        while start - GRID_TOKENS > top and start - GRID_TOKENS not in grid:
            start -= GRID_TOKENS
        if start - GRID_TOKENS > top:
            value = grid[start - GRID_TOKENS]
        else:
            self._envelope_at_or_below(top)
            value = c["envelope"][top]
        for point in range(start, x + 1, GRID_TOKENS):
            value = grid[point] = max(value, self._padded_sum(point))
        return value

    def padded_envelope(self, m: int) -> float:
        """The monotone padded part at ``m`` tokens."""
        c = self._compiled
        if not c["padded"]:
            return 0.0
        if m <= CAPTURE_SIZES[-1]:
            size = pad_to_capture(m) if self.cuda_graphs else m
            if size not in c["envelope"]:
                self._envelope_at_or_below(size)
            return c["envelope"][size]
        lo = m - m % GRID_TOKENS  # >= 512, the largest capture size, a multiple of 64
        lo_value, hi_value = self._grid_at(lo), self._grid_at(lo + GRID_TOKENS)
        return lo_value + (hi_value - lo_value) * (m - lo) / GRID_TOKENS

    def _tokens(self, m: int) -> float:
        linear = 0.0
        for fn in self._compiled["per_token"]:
            linear += fn(m)
        return self.padded_envelope(m) + linear

    def _seqs(self, s: int) -> float:
        total = 0.0
        for fn in self._compiled["per_seq"]:
            total += fn(s)
        return total

    def chat_render_s(self, model) -> float:
        """Seconds the API server spends rendering ``model``'s chat template per request: gpt-oss
        renders with openai_harmony (native code), every other model with transformers' Jinja."""
        renderer = "harmony" if getattr(model, "model_type", "") == "gpt_oss" else "jinja"
        return self.api_chat_render_s.get(renderer, 0.0)

    # -- reading the model --------------------------------------------------------------------
    def term(self, name: str) -> CostTerm:
        return next(t for t in self.terms if t.name == name)

    def breakdown(self, f: StepFeatures) -> dict[str, Any]:
        """Seconds per term for the step ``f`` (the same terms as :meth:`time`): ``gpu`` and
        ``cpu`` map each term to its seconds (``monotone envelope``: what the running maximum
        adds to the padded parts at this size), ``gpu_s`` / ``cpu_s`` their sums, ``step_s`` the
        step (the longer of the two with async scheduling, else their sum)."""
        m = f.tokens
        size = m if (not self.cuda_graphs or m > CAPTURE_SIZES[-1]) else pad_to_capture(m)
        gpu: dict[str, float] = {}
        cpu: dict[str, float] = {}
        raw_padded = 0.0
        for t in self.terms:
            v = 0.0
            if t.HAS_PADDED:
                p = t.padded(size) if m <= CAPTURE_SIZES[-1] else _grid_linear(t.padded, m)
                raw_padded += p
                v += p
            if t.HAS_PER_TOKEN:
                v += t.per_token(m)
            if t.HAS_PER_SEQ:
                v += t.per_seq(f.num_seqs)
            v += t.fixed_s + t.kv_token_s * f.kv_read_tokens
            if t.window_kv_s:
                v += t.window_kv_s * min(f.kv_read_tokens, f.num_seqs * t.window)
            if f.attn_pairs:
                v += t.prefill_fixed_s + t.pair_s * f.attn_pairs
                if t.window_pair_s:
                    v += t.window_pair_s * min(f.attn_pairs, t.window * (f.prefill_tokens or f.tokens))
            if t.HAS_GENERAL:
                v += t.general(f)
            (cpu if t.resource == "cpu" else gpu)[t.name] = v
        if self._compiled["padded"]:
            gpu["monotone envelope"] = max(0.0, self.padded_envelope(m) - raw_padded)
        gpu_s, cpu_s = sum(gpu.values()), sum(cpu.values())
        step = max(gpu_s, cpu_s) if self.async_overlap else gpu_s + cpu_s
        return {"features": f.to_dict(), "gpu": gpu, "cpu": cpu, "gpu_s": gpu_s, "cpu_s": cpu_s, "step_s": step,
                "async_scheduling": self.async_overlap}

    # -- compatibility accessors (tests, the JSON) ----------------------------------------------
    @property
    def per_kv_token_s(self) -> float:
        return self._compiled["kv"]

    @property
    def sliding_per_kv_token_s(self) -> float:
        return self._compiled["window_kv"]

    @property
    def sliding_window(self) -> int:
        return self._compiled["window"]

    def to_dict(self) -> dict[str, Any]:
        from .opmodel import MODEL_FORMAT

        c = self._compiled
        return {"format": MODEL_FORMAT, "source": self.source, "device": self.device, "clock": dict(self.clock),
                "terms": [t.describe() for t in self.terms],
                "per_kv_token_s": c["kv"], "per_attn_pair_s": c["pair"], "prefill_fixed_s": c["prefill_fixed"],
                "sliding_per_attn_pair_s": c["window_pair"],
                "sliding_per_kv_token_s": c["window_kv"], "sliding_window": c["window"], "fixed_gpu_s": c["fixed"],
                "cpu_step_s": c["cpu_fixed"], "cpu_seq_s": c["cpu_seq_s"], "async_overlap": self.async_overlap,
                "request_overhead_s": self.request_overhead_s, "api_request_s": self.api_request_s,
                "api_prompt_token_s": self.api_prompt_token_s, "api_chunk_s": self.api_chunk_s,
                "api_chat_render_s": dict(self.api_chat_render_s), "notes": list(self.notes),
                # what one step costs at a few shapes, so a reader sees the clock without running it
                "examples_s": {f"decode_{n}": round(self.time(n, n, n * 1024, 0.0), 6) for n in (1, 32, 256)}
                | {"prefill_2048": round(self.time(2048, 1, 2048, 2048 * 2048 / 2.0), 6)}}


def _grid_linear(fn, m: int) -> float:
    lo = m - m % GRID_TOKENS
    a, b = fn(lo), fn(lo + GRID_TOKENS)
    return a + (b - a) * (m - lo) / GRID_TOKENS


def _sum(values) -> float:
    total = 0.0
    for v in values:
        total += v
    return total
