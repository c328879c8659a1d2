"""How long one engine step takes: a roofline with a handful of coefficients.

vLLM's V1 engine runs one forward pass per step over every scheduled token (decodes and prefill
chunks together). Its duration is bounded below by reading the weights once and the KV cache of
every scheduled sequence (memory) and by the matmul and attention FLOPs (compute); on top come a
fixed per-step cost (scheduling, sampling, launches), a per-sequence cost (input preparation,
sampler rows) and tensor-parallel all-reduces. The coefficients are either derived from the GPU
catalog (``default_profile``: vendor peaks times typical efficiencies, a prior) or fitted to a real
run (``kvplan calibrate``, see :mod:`kvplan.sim.calibrate`), and the profile says which.

    t = overhead_s + per_seq_s · seqs
        + max(weights_read_s + per_kv_token_s · kv_read_tokens,
              per_token_s · tokens + per_attn_pair_s · attn_pairs)
        + comm_per_token_s · tokens + comm_fixed_s
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from ..memory import PlanRequest, PlanResult
    from ..memory.engine_spec import EngineSpec

PROFILE_FORMAT = "kvplan-step-profile/1"

#: Efficiencies a well-tuned vLLM reaches on datacenter GPUs: decode is memory-bound at about
#: 70-80% of peak bandwidth, large prefills reach about half of the dense peak. Priors only:
#: `kvplan calibrate` replaces them with measured values.
DEFAULT_MBU = 0.75
DEFAULT_MFU = 0.5
DEFAULT_OVERHEAD_S = 0.004  # scheduler + sampler + launch per step (CUDA graphs on)
DEFAULT_EAGER_OVERHEAD_S = 0.012  # without CUDA graphs decode launches dominate small batches
DEFAULT_PER_SEQ_S = 2e-5
ALLREDUCE_LATENCY_S = 1.5e-5  # one NCCL all-reduce on NVLink, small message


@dataclass(frozen=True)
class StepShape:
    """What one step computes. ``kv_read_tokens``: KV entries read by attention, summed over the
    scheduled sequences (a decode of a 1,000-token context reads 1,000); ``attn_pairs``: query ×
    key pairs of the prefill chunks (a chunk of c new tokens after s cached ones: c·s + c²/2)."""

    prefill_tokens: int = 0
    decode_tokens: int = 0
    num_seqs: int = 0
    kv_read_tokens: int = 0
    attn_pairs: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens


@dataclass(frozen=True)
class StepTimeProfile:
    """Coefficients of the step-time roofline (seconds). ``source`` says where they came from."""

    overhead_s: float
    per_seq_s: float
    weights_read_s: float
    per_kv_token_s: float
    per_token_s: float
    per_attn_pair_s: float
    comm_per_token_s: float = 0.0
    comm_fixed_s: float = 0.0
    source: str = "roofline"
    device: str = ""
    notes: tuple[str, ...] = ()
    fit: Optional[dict[str, Any]] = None  # calibration quality (residuals, samples), when fitted
    #: Share of the shorter of memory and compute that does not overlap the longer one: 0 is the
    #: roofline (a GPU streams weights while it multiplies); 1 makes the step the plain sum, which
    #: is what `kvplan calibrate` fits (a CPU, or any run too short to tell the regimes apart).
    serial_fraction: float = 0.0
    #: Latency outside the engine's steps that every request pays once before its first token
    #: reaches the client: HTTP, tokenisation, the hop to the engine process, detokenisation and
    #: the stream. 0 in the roofline prior (the simulator then predicts engine-side TTFT, as
    #: vLLM's own histogram measures it); fitted by `kvplan calibrate` from client timings.
    request_overhead_s: float = 0.0

    def step_time(self, shape) -> float:
        """The step's time from a :class:`StepShape` or the scheduler's
        :class:`kvplan.sim.stepmodel.StepFeatures` (both have ``tokens``)."""
        return self.time(shape.tokens, shape.num_seqs, shape.kv_read_tokens, shape.attn_pairs)

    def time(self, tokens: int, num_seqs: int, kv_read_tokens: float, attn_pairs: float,
             features=None) -> float:
        """The same as :meth:`step_time` on plain numbers (the simulator's hot path; ``features``,
        the step's StepFeatures, is not needed by a profile's sums)."""
        memory = self.weights_read_s + self.per_kv_token_s * kv_read_tokens
        compute = self.per_token_s * tokens + self.per_attn_pair_s * attn_pairs
        if memory > compute:
            roof = memory + self.serial_fraction * compute
        else:
            roof = compute + self.serial_fraction * memory
        return (self.overhead_s + self.per_seq_s * num_seqs + roof
                + self.comm_per_token_s * tokens + self.comm_fixed_s)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return {"format": PROFILE_FORMAT, **d}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "profile") -> "StepTimeProfile":
        if data.get("format") != PROFILE_FORMAT:
            raise UsageError(f"{where}: not a kvplan step-time profile (format {data.get('format')!r}, "
                             f"expected {PROFILE_FORMAT!r}); write one with `kvplan calibrate`")
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        try:
            kw["notes"] = tuple(kw.get("notes", ()))
            prof = cls(**kw)
        except TypeError as exc:
            raise UsageError(f"{where}: incomplete step-time profile: {exc}") from None
        for f in fields(cls):
            v = getattr(prof, f.name)
            if isinstance(v, float) and not v >= 0:
                raise UsageError(f"{where}: {f.name} must be a non-negative number, got {v!r}")
        if prof.serial_fraction > 1:
            raise UsageError(f"{where}: serial_fraction must be within 0..1, got {prof.serial_fraction!r}")
        return prof

    @classmethod
    def load(cls, path: str | Path) -> "StepTimeProfile":
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UsageError(f"{p}: cannot read profile: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise UsageError(f"{p}:{exc.lineno}: not JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise UsageError(f"{p}: a step-time profile is a JSON object")
        return cls.from_dict(data, str(p))


def default_profile(request: "PlanRequest", plan_result: "EngineSpec | PlanResult | None" = None, *,
                    async_scheduling: Optional[bool] = None, expert_parallel: bool = False):
    """The step-time model a GPU run uses without a calibrated profile: the per-operator model over
    measured vLLM kernel tables (:mod:`kvplan.sim.opmodel`; the nearest measured GPU's efficiencies
    at this GPU's own peaks when it has no tables, and the result says so). A calibrated profile
    (``kvplan calibrate``) is passed explicitly and always wins. ``async_scheduling`` (default: the
    vLLM version's default for this layout, ``VllmSemantics.async_scheduling_by_default``) decides
    whether the engine's CPU work overlaps the GPU's. ``plan_result``: the request's resolved engine
    (an EngineSpec, or the plan result carrying one; None: planned now)."""
    if request.device == "cpu":
        return roofline_profile(request, plan_result)  # raises: no CPU prior
    gpu = request.gpu
    if not gpu.bandwidth_gbs or not gpu.bf16_tflops:
        return roofline_profile(request, plan_result)  # raises the catalog's own error
    from .engine_config import engine_spec_of
    from .opmodel import build

    return build(request, engine_spec_of(request, plan_result), async_scheduling=async_scheduling,
                 expert_parallel=expert_parallel)


def roofline_profile(request: "PlanRequest",
                     plan_result: "EngineSpec | PlanResult | None" = None) -> StepTimeProfile:
    """The roofline prior for ``request``'s model on its GPU and tensor-parallel size: weights and KV
    bytes per GPU over the catalog bandwidth, FLOPs per token (2 × active parameters per GPU, plus
    attention) over the catalog peak, and two all-reduces per layer over the interconnect."""
    from ..models.params import active_params
    from .engine_config import engine_spec_of

    if request.device == "cpu":
        # vLLM's CPU backend has no catalog roofline: its speed depends on the host's cores, ISA
        # and threads, so only a measurement says it.
        raise UsageError("--device cpu: kvplan has no step-time roofline for vLLM's CPU backend; fit one on a "
                         "real run of the server (`kvplan bench ... --output run.json`, then `kvplan calibrate "
                         "run.json --device cpu --output profile.json`) and pass --profile profile.json")
    engine = engine_spec_of(request, plan_result)
    gpu, spec = request.gpu, request.model
    tp = request.tensor_parallel_size
    pp = request.pipeline_parallel_size
    notes: list[str] = []
    if not gpu.bandwidth_gbs or not gpu.bf16_tflops:
        raise UsageError(f"{gpu.name}: the GPU catalog has no bandwidth/TFLOP/s for it, so there is no "
                         "roofline; calibrate a profile on a real run (`kvplan calibrate`) and pass --profile")
    bw = gpu.bandwidth_gbs * 1e9 * DEFAULT_MBU
    peak = gpu.bf16_tflops * 1e12 * DEFAULT_MFU
    if engine.kv_cache_dtype.startswith("fp8") or (request.quantization or "").startswith("fp8"):
        if gpu.fp8_tflops:
            peak = gpu.fp8_tflops * 1e12 * DEFAULT_MFU
    weights_bytes = engine.weights_bytes_per_gpu
    # Pipeline stages run one after the other for a given micro-batch: a step pays every stage.
    weights_read_s = weights_bytes * pp / bw
    per_kv_token_s = engine.kv_bytes_per_token_per_gpu * pp / bw
    flops_per_token = 2.0 * active_params(spec) / tp
    per_token_s = flops_per_token / peak
    # Attention score + value matmuls: 2 × 2 × heads/TP × head_dim FLOPs per (query, key) pair per layer.
    heads = max(1, spec.num_attention_heads // tp)
    per_attn_pair_s = 4.0 * heads * spec.head_dim * spec.num_layers / peak
    comm_per_token_s = comm_fixed_s = 0.0
    if tp > 1:
        ic = (gpu.interconnect_gbs or 64) * 1e9
        # Ring all-reduce moves 2(tp-1)/tp of the activation; two per layer (attention, MLP).
        act = spec.hidden_size * 2
        comm_per_token_s = 2 * spec.num_layers * act * 2 * (tp - 1) / tp / ic
        comm_fixed_s = 2 * spec.num_layers * ALLREDUCE_LATENCY_S
    overhead = DEFAULT_EAGER_OVERHEAD_S if request.enforce_eager else DEFAULT_OVERHEAD_S
    notes.append(f"roofline prior: {DEFAULT_MBU:.0%} of {gpu.bandwidth_gbs:g} GB/s, {DEFAULT_MFU:.0%} of "
                 f"peak TFLOP/s; calibrate on a real run for measured coefficients")
    return StepTimeProfile(
        overhead_s=overhead, per_seq_s=DEFAULT_PER_SEQ_S, weights_read_s=weights_read_s,
        per_kv_token_s=per_kv_token_s, per_token_s=per_token_s, per_attn_pair_s=per_attn_pair_s,
        comm_per_token_s=comm_per_token_s, comm_fixed_s=comm_fixed_s,
        source=f"roofline default for {gpu.name} TP{tp}" + (f" PP{pp}" if pp > 1 else ""),
        device=gpu.name, notes=tuple(notes),
    )
