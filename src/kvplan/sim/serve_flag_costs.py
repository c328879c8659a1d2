"""What speculative decoding and LoRA adapters do to an engine step, on top of the GPU step
model (:mod:`kvplan.sim.stepmodel`).

**Speculative decoding** (``--speculative-config``). vLLM's V1 scheduler gives every decoding request
``1 + k`` tokens per step (its sampled token and the ``k = num_speculative_tokens`` draft tokens,
``Scheduler.schedule``: ``num_new_tokens = 1 + len(spec_token_ids)``); the target model verifies
them in that one forward (its linear layers, LM head and sampler see ``1 + k`` rows per decoding
request), the rejection sampler keeps the accepted prefix plus one token, and the drafter proposes
the next ``k`` (EAGLE / EAGLE-3 / MTP, ``EagleProposer.propose``: one pass of the head over the
step's scheduled tokens, then ``k - 1`` passes of one token per request, each with the head's LM
head; a draft model: the same with its whole model; n-gram: a CPU lookup, no GPU pass). The
acceptance is the one vLLM reports, ``--spec-acceptance`` =
``vllm:spec_decode_num_accepted_tokens_total / vllm:spec_decode_num_draft_tokens_total`` (the
"Avg Draft acceptance rate" of its SpecDecoding log line; ``kvplan watch`` / ``doctor`` read it from a
server): a step then emits ``E = 1 + k·ρ`` tokens per decoding request on average, vLLM's "mean
acceptance length" (``1 + accepted / drafts``).

The engine (:mod:`kvplan.sim.engine`) advances a decoding request by one token per step; this
module makes one simulated step cost what one token costs: a verify step's time (the target at the
verify rows, plus the drafter's passes) scaled by ``(P + D) / (P + E·D)`` for ``P`` prefill tokens
and ``D`` decoding requests - exact for decode-only steps (TPOT), the prefill's own rate for
prefill-only steps, weighted by tokens between. Deterministic: every request accepts the mean.
What it leaves out: the lookahead slots' KV (``k`` per request, reserved by ``allocate_slots``;
kvplan's plan counts them, the engine's block accounting does not), and the spread of acceptance
between requests and positions.

**LoRA** (``--enable-lora``): per step the punica kernels run, for each wrapped projection, a shrink
(``tokens x in -> r``) and an expand (``r -> out``) per active adapter; their time is the larger of
the adapter weights read (every active adapter's A and B, ``r·(in + out)`` elements) and the
FLOPs (``2·tokens·r·(in + out)``) at the GPU's peak, plus two launches per wrapped module
(:class:`LoRAAdapters`; ``--active-loras``, default ``--max-loras``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Optional

from .stepmodel import CostTerm, StepFeatures

if TYPE_CHECKING:  # pragma: no cover
    from ..memory import PlanRequest, PlanResult
    from ..memory.engine_spec import EngineSpec

#: vLLM's metric the acceptance is (and bench/watch measure)
ACCEPTANCE_METRIC = ("vllm:spec_decode_num_accepted_tokens_total / vllm:spec_decode_num_draft_tokens_total "
                     "(the SpecDecoding log line's 'Avg Draft acceptance rate')")
#: seconds per kernel launch of the LoRA shrink / expand kernels (inside the CUDA graph: a gap, not a
#: Python launch; the same order as the step model's per-layer gaps)
LORA_LAUNCH_S = 4e-6


class SpeculativeStepModel:
    """A step model for a server running speculative decoding: ``base`` (the target's step model)
    at the verify rows, the drafter's passes (``drafter``: the head's own step model, GPU terms
    only; None for n-gram), scaled to one token per decoding request (module docstring)."""

    def __init__(self, base, drafter, *, method: str, num_speculative_tokens: int, acceptance: float,
                 note: str = "") -> None:
        self.base = base
        self.drafter = drafter
        self.method = method
        self.k = int(num_speculative_tokens)
        self.acceptance = float(acceptance)
        self.tokens_per_step = 1.0 + self.k * self.acceptance
        self._note = note

    def __getattr__(self, name: str) -> Any:  # request_overhead_s, api_*, source, needs, clock ...
        base = self.__dict__.get("base")
        if base is None or name.startswith("__"):  # unpickling, copy: not the base's
            raise AttributeError(name)
        return getattr(base, name)

    # -- the hot path ------------------------------------------------------------------------------
    def _split(self, tokens: int, num_seqs: int, attn_pairs: float, features: Optional[StepFeatures]):
        if features is not None:
            decode = features.num_seqs - features.prefill_seqs
        else:  # the engine's decode stretches: every scheduled request decodes
            decode = num_seqs if not attn_pairs and tokens == num_seqs else max(0, num_seqs - 1)
        return max(0, tokens - decode), decode

    def parts(self, tokens: int, num_seqs: int, kv_read_tokens: float, attn_pairs: float,
              features: Optional[StepFeatures] = None) -> tuple[float, float, float]:
        """(target verify seconds, drafter seconds, scale to one token per decoding request)."""
        prefill, decode = self._split(tokens, num_seqs, attn_pairs, features)
        extra = self.k * decode  # the draft tokens verified beside each decoding request's own
        verify_f = None
        if features is not None:
            verify_f = features._replace(tokens=features.tokens + extra, num_seqs=features.num_seqs + extra)
        verify = self.base.time(tokens + extra, num_seqs + extra, kv_read_tokens, attn_pairs, verify_f)
        draft = 0.0
        if self.drafter is not None and (tokens or decode):
            # one pass over the step's tokens (the logits of one row per request), then k - 1 passes of one
            # token per decoding request
            rows = num_seqs
            draft = self.drafter.time(tokens + extra, rows, kv_read_tokens, 0.0)
            if self.k > 1 and decode:
                draft += (self.k - 1) * self.drafter.time(decode, decode, kv_read_tokens * decode / max(1, num_seqs),
                                                          0.0)
        scale = 1.0
        if decode:
            scale = (prefill + decode) / (prefill + self.tokens_per_step * decode)
        return verify, draft, scale

    def time(self, tokens: int, num_seqs: int, kv_read_tokens: float, attn_pairs: float,
             features: Optional[StepFeatures] = None) -> float:
        verify, draft, scale = self.parts(tokens, num_seqs, kv_read_tokens, attn_pairs, features)
        return (verify + draft) * scale

    def step_time(self, f: StepFeatures) -> float:
        return self.time(f.tokens, f.num_seqs, f.kv_read_tokens, f.attn_pairs, f)

    # -- reading the model -----------------------------------------------------------------------
    def breakdown(self, f: StepFeatures) -> dict:
        prefill, decode = self._split(f.tokens, f.num_seqs, f.attn_pairs, f)
        extra = self.k * decode
        d = self.base.breakdown(f._replace(tokens=f.tokens + extra, num_seqs=f.num_seqs + extra))
        verify, draft, scale = self.parts(f.tokens, f.num_seqs, f.kv_read_tokens, f.attn_pairs, f)
        d["gpu"]["drafter (" + self.method + ")"] = draft
        d["gpu_s"] += draft
        d["speculative"] = {"verify_s": verify, "drafter_s": draft, "tokens_per_step": self.tokens_per_step,
                            "scale": scale}
        d["step_s"] = (verify + draft) * scale
        return d

    def to_dict(self) -> dict:
        d = dict(self.base.to_dict())
        d["speculative"] = self.describe()
        d["notes"] = list(d.get("notes", ())) + [self._note]
        return d

    def describe(self) -> dict:
        return {"method": self.method, "num_speculative_tokens": self.k, "acceptance": self.acceptance,
                "acceptance_metric": ACCEPTANCE_METRIC, "tokens_per_step": round(self.tokens_per_step, 4),
                "drafter_on_gpu": self.drafter is not None}


@dataclass(frozen=True, kw_only=True)
class LoRAAdapters(CostTerm):
    """The punica shrink and expand kernels of the active adapters (module docstring): per wrapped
    module ``(in, out)`` summed over the layers, at ``rank`` for ``active`` adapters."""

    rank: int
    active: int
    in_out: float  # Σ over wrapped modules of (in + out) elements per rank
    modules: int  # wrapped modules (two kernels each)
    bandwidth: float
    flops: float
    dtype_bytes: int = 2
    HAS_PER_TOKEN = True

    def per_token(self, m: int) -> float:
        if not m:
            return 0.0
        weights = self.active * self.rank * self.in_out * self.dtype_bytes / self.bandwidth
        compute = 2.0 * m * self.rank * self.in_out / self.flops
        return max(weights, compute) + 2 * self.modules * LORA_LAUNCH_S

    def describe(self) -> dict:
        return super().describe() | {"rank": self.rank, "active": self.active, "modules": self.modules}


def speculative_model(base, request: "PlanRequest", plan_result: "EngineSpec | PlanResult | None",
                      acceptance: Optional[float]):
    """``base`` wrapped for ``request``'s ``--speculative-config`` at ``acceptance`` (vLLM's draft
    acceptance rate; None: 0, every draft rejected - the cost without the gain, and a note says so).
    ``plan_result``: the request's resolved engine (an EngineSpec or the plan result carrying one)."""
    from ..errors import UsageError
    from ..memory.spec_decode import EAGLE3_DRAFT_VOCAB, NO_WEIGHT_METHODS, build_drafter
    from .engine_config import engine_spec_of

    if request.speculative_config is None:
        if acceptance is not None:
            raise UsageError("--spec-acceptance needs --speculative-config")
        return base
    if acceptance is not None and not 0.0 <= acceptance <= 1.0:
        raise UsageError(f"--spec-acceptance must be in [0, 1] (vLLM's draft acceptance rate), got {acceptance}")
    engine = engine_spec_of(request, plan_result)
    # the drafter's layers and method (its weights' bytes do not matter here: the kernel model times them)
    drafter = build_drafter(request.speculative_config, engine.model, engine.semantics,
                            engine.tensor_parallel_size, 2, engine.quantization)
    head = None
    if drafter.method not in NO_WEIGHT_METHODS and drafter.layers:
        head = _drafter_step_model(engine, drafter, EAGLE3_DRAFT_VOCAB)
    rho = 0.0 if acceptance is None else float(acceptance)
    k = drafter.num_speculative_tokens
    note = (f"speculative decoding ({drafter.method}, k={k}): each decoding request verifies 1 + {k} tokens per "
            f"step and emits 1 + k x {rho:g} = {1 + k * rho:.2f} on average (--spec-acceptance: {ACCEPTANCE_METRIC})"
            + ("" if acceptance is not None else "; no --spec-acceptance given: 0 assumed, every draft rejected")
            + ("; the n-gram proposer runs on the CPU (not timed)" if head is None else
               f"; the drafter's {len(drafter.layers)} layer(s) run one pass over the step's tokens and {k - 1} "
               "of one token per request"))
    return SpeculativeStepModel(base, head, method=drafter.method, num_speculative_tokens=k, acceptance=rho,
                                note=note)


def _drafter_step_model(engine: "EngineSpec", drafter, eagle3_vocab: int):
    """The drafter's own step model: the kernel model of a model made of its layers (and its LM
    head: the target's vocabulary, an EAGLE-3 head's draft vocabulary), GPU terms only, without
    the target's per-step sampler and engine-core work."""
    from .engine_config import EngineConfig
    from .opmodel import build_for
    from .stepmodel import StepModel

    target = engine.model
    layers = tuple(replace(layer, index=i) for i, layer in enumerate(drafter.layers))
    vocab = min(eagle3_vocab, target.vocab_size) if drafter.method == "eagle3" else target.vocab_size
    spec = replace(target, layers=layers, vocab_size=vocab, name=f"{target.name} drafter ({drafter.method})")
    cfg = EngineConfig.from_spec(engine)
    cfg = replace(cfg, model=spec, tensor_parallel_size=drafter.tensor_parallel_size, pipeline_parallel_size=1)
    full = build_for(cfg)
    keep = tuple(t for t in full.terms if t.resource == "gpu" and t.name != "sampler and step launch")
    return StepModel(terms=keep, async_overlap=False, cuda_graphs=full.cuda_graphs, source=full.source + " (drafter)",
                     device=full.device, clock=full.clock)


def with_lora(base, request: "PlanRequest", active_loras: Optional[int] = None):
    """``base`` plus the :class:`LoRAAdapters` term of ``request``'s ``--enable-lora`` (``active_loras``
    adapters in a step, default ``--max-loras``); ``base`` itself without LoRA."""
    from ..errors import UsageError
    from ..models.params import layer_tensors

    if not request.enable_lora:
        if active_loras:
            raise UsageError("--active-loras needs --enable-lora")
        return base
    max_loras = request.max_loras or 1
    active = max_loras if active_loras is None else int(active_loras)
    if not 0 <= active <= max_loras:
        raise UsageError(f"--active-loras must be between 0 and --max-loras ({max_loras}), got {active}")
    if not hasattr(base, "terms"):
        return base  # a calibrated profile: its steps were measured as they ran
    rank = request.max_lora_rank or 16
    tp = request.tensor_parallel_size
    spec = request.model
    in_out = 0.0
    modules = 0
    for layer in spec.layers:
        fused = set()  # q/k/v are one wrapped module (MergedQKVParallelLinearWithLoRA): one shrink, one expand
        for t in layer_tensors(spec, layer):
            if not t.quantizable or t.expert or t.name in ("router",) or t.name.endswith("bias"):
                continue
            k_in = t.group_dim or spec.hidden_size  # as opmodel.build_for shapes the layer's GEMMs
            if t.shard == "row":
                k_in = max(1, k_in // tp) if t.group_dim else k_in
            in_out += k_in + t.numel_per_rank(tp) / k_in  # each slice's A (r x in) and B (out x r)
            fused.add("qkv" if t.name in ("q_proj", "k_proj", "v_proj") else t.name)
        modules += len(fused)
    gpu = request.gpu
    term = LoRAAdapters(name=f"LoRA adapters ({active} active, rank {rank})", rank=rank, active=active,
                        in_out=in_out, modules=modules, bandwidth=(gpu.bandwidth_gbs or 1000) * 1e9 * 0.8,
                        flops=(gpu.bf16_tflops or 100) * 1e12 * 0.5)
    return replace(base, terms=base.terms + (term,), _compiled={})
