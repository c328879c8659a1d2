"""``kvplan tune`` as a library call: :class:`TuneOptions` (the serve flags, the traffic flags and
tune's own, read and checked) -> :func:`run_tune` -> a :class:`~kvplan.tune.search.TuneResult`. The
space's flags are the serve flags read as comma-separated lists (``--max-num-seqs 64,128,256``,
:data:`SPACE_OVERRIDES`); the first value of each list is the base configuration, which a measured
KV memory and a ``--profile`` describe.

The flags' tables are :mod:`kvplan.tune.flags`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, TypeVar

from ..errors import UsageError
from ..serve_flags import human_int
from .flags import SPACE, TUNE_FLAGS

T = TypeVar("T")


def parse_list(text: Optional[str], flag: str, item: Callable[[str], T], *, allow_default: bool = False) -> tuple:
    """``"64,128,256"`` -> (64, 128, 256); duplicates dropped in order; ``default`` -> None (vLLM's
    default) where allowed. Any bad item is a usage error naming the flag and the item."""
    if text is None:
        return ()
    out: list = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            raise UsageError(f"{flag}: empty item in {text!r} (use e.g. {flag} 64,128)")
        if allow_default and part.lower() == "default":
            value = None
        else:
            try:
                value = item(part)
            except UsageError as exc:
                raise UsageError(f"{flag}: {exc}") from None
            except ValueError:
                raise UsageError(f"{flag}: cannot read {part!r}") from None
        if value not in out:
            out.append(value)
    return tuple(out)


def _positive_int(text: str) -> int:
    v = human_int(text, "value")
    if v < 1:
        raise UsageError(f"{text!r} must be at least 1")
    return v


def _fraction(text: str) -> float:
    v = float(text)
    if not 0 < v <= 1:
        raise UsageError(f"{text!r} is not in (0, 1]")
    return v


def _kv_dtype(text: str) -> str:
    from .space import KV_DTYPES

    v = text.lower()
    if v not in KV_DTYPES:
        raise UsageError(f"{text!r} is not one of {', '.join(KV_DTYPES)}")
    return v


def _gpu_name(text: str) -> str:
    from ..hardware import find_gpu

    return find_gpu(text).name


def build_space(*, max_num_seqs, max_num_batched_tokens, max_model_len, gpu_memory_utilization, kv_cache_dtype,
                gpus, tp, gpu, coverage):
    """The :class:`TuneSpace` of the CLI's list flags (unset flags keep the space's defaults)."""
    from .space import TuneSpace

    kw: dict = {}
    if max_num_seqs is not None:
        kw["max_num_seqs"] = parse_list(max_num_seqs, "--max-num-seqs", _positive_int, allow_default=True)
    if max_num_batched_tokens is not None:
        kw["max_num_batched_tokens"] = parse_list(max_num_batched_tokens, "--max-num-batched-tokens", _positive_int,
                                                  allow_default=True)
    if max_model_len is not None:
        kw["max_model_len"] = parse_list(max_model_len, "--max-model-len", _positive_int, allow_default=True)
    if gpu_memory_utilization is not None:
        kw["gpu_memory_utilization"] = parse_list(gpu_memory_utilization, "--gpu-memory-utilization", _fraction)
    if kv_cache_dtype is not None:
        kw["kv_cache_dtype"] = parse_list(kv_cache_dtype, "--kv-cache-dtype", _kv_dtype)
    if gpus is not None:
        kw["gpus"] = parse_list(gpus, "--gpus", _positive_int)
    if tp is not None:
        kw["tensor_parallel"] = parse_list(tp, "--tensor-parallel-size", _positive_int)
    if gpu is not None:
        kw["gpu"] = parse_list(gpu, "--gpu", _gpu_name)
    if coverage is not None:
        kw["coverage_pct"] = coverage
    return TuneSpace(**kw).validate()


@dataclass(frozen=True)
class TuneOptions:
    """What ``kvplan tune`` is asked: the serve flags given (by field; the space's as list texts),
    every traffic flag (by field, None unless given), and tune's own flags (by field)."""

    serve: Mapping[str, Any] = field(default_factory=dict)
    traffic: Mapping[str, Any] = field(default_factory=dict)
    own: Mapping[str, Any] = field(default_factory=dict)


def run_tune(opts: TuneOptions):
    """``kvplan tune``: the space of the list flags, the base request of their first values, the
    trace of the traffic flags (extended until the rows that could win are judged, when no length
    is given), then :func:`kvplan.tune.search.tune` (a ``TuneResult``), or with ``--gpus auto``
    :func:`kvplan.tune.sizing.size_space` (a ``Sizing``: per GPU type the fewest GPUs for the rate).
    A malformed flag is a UsageError naming it."""
    from ..serve_flags import request_from_values
    from ..slo import parse_slo
    from ..traffic.flags import traffic_maker

    given = dict(opts.serve)
    own = {f.field: opts.own.get(f.field, f.default) for f in TUNE_FLAGS}
    traffic = dict(opts.traffic)
    model, gpu, gpu_memory, vllm_version = (given.get(k) for k in ("model", "gpu", "gpu_memory", "vllm_version"))
    rate, requests = traffic.get("rate"), traffic.get("requests")
    coverage = own["coverage"]
    slos = parse_slo(own["slo"])
    sizing = (own["gpus"] or "").strip().lower() == "auto"
    objective = own["objective"] or ("min_gpus" if sizing else "goodput_per_gpu")
    # --gpu-memory describes one custom GPU (named by --gpu): no catalog list then.
    gpu_names = parse_list(gpu, "--gpu", _gpu_name) if gpu and not gpu_memory else ()
    space = build_space(max_num_seqs=given.get("max_num_seqs"), max_num_batched_tokens=given.get("max_num_batched_tokens"),
                        max_model_len=given.get("max_model_len"),
                        gpu_memory_utilization=given.get("gpu_memory_utilization"),
                        kv_cache_dtype=given.get("kv_cache_dtype"), gpus=None if sizing else own["gpus"],
                        tp=given.get("tensor_parallel_size"),
                        gpu=None if gpu_memory else gpu,
                        coverage=coverage if coverage is not None else (99.9 if requests else None))
    if not model and traffic.get("from_bench_cmd"):
        from ..traffic.bench_cmd import parse_bench_cmd

        model = parse_bench_cmd(traffic["from_bench_cmd"]).model
    # The base is the first value of each list: the measured KV memory and a --profile describe it.
    base = request_from_values({
        **{k: v for k, v in given.items() if k not in SPACE}, "model": model,
        "gpu": gpu_names[0] if gpu_names else gpu,
        "tensor_parallel_size": space.tensor_parallel[0] if space.tensor_parallel else 1,
        "kv_cache_dtype": space.kv_cache_dtype[0], "gpu_memory_utilization": space.gpu_memory_utilization[0]})
    make_trace, _ = traffic_maker(flags=traffic, model_spec=base.model, vllm_version=vllm_version)
    trace = make_trace(rate)
    # No length chosen: tune derives it, extending the trace until the rows that could win are judged.
    extend = None
    if (traffic.get("num_requests") is None and traffic.get("duration") is None and not requests
            and not traffic.get("num_prompts") and not traffic.get("from_bench_cmd")):
        def extend(n: int):
            longer, _ = traffic_maker(flags=dict(traffic, num_requests=n), model_spec=base.model,
                                      vllm_version=vllm_version)
            return longer(rate)
    prof = None
    if own["profile"]:
        from ..sim import StepTimeProfile

        prof = StepTimeProfile.load(own["profile"])
    from ..hardware.prices import load_prices

    prices = load_prices(own["gpu_price"])
    if sizing:
        from ..sim.capacity import trace_rate
        from .sizing import size_space

        target = rate if rate is not None else trace_rate(trace)
        if not target:
            raise UsageError("--gpus auto sizes a fleet for a rate: give --rate (or a log with timestamps)")
        return size_space(base, make_trace, slos, space=space, target_rate=target, objective=objective,
                          load_balancer=base.load_balancer, max_gpus=own["max_gpus"], prices=prices,
                          processes=own["processes"], ray_address=own["ray_address"], profile=prof)
    from .search import tune

    return tune(base, trace, slos, space=space, objective=objective, processes=own["processes"],
                ray_address=own["ray_address"], profile=prof, all_replicas=own["all_replicas"],
                exhaustive=own["exhaustive"], reuse=not own["no_reuse"], extend_trace=extend,
                load_balancer=base.load_balancer)
