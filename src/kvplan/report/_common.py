"""Small formatting helpers shared by the plan renderers."""
from __future__ import annotations

from ..memory.layout_fit import layout_fit_text  # noqa: F401 - the renderers' import
from ..memory.result import PlanResult

GIB = 1 << 30


def gib(value: float) -> str:
    return f"{value:,.2f} GiB"


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{int(n):,} B"


def memory_segments(r: PlanResult) -> list[tuple[str, float]]:
    """The per-GPU memory stack, bottom to top, in GiB (what the bar shows)."""
    m = r.memory
    reserved_outside = max(m.total_gib_per_gpu - m.requested_gib, 0.0)
    kv = m.kv_cache_used_gib
    unused = max(m.requested_gib - m.non_kv_gib - kv, 0.0) if m.source == "estimate" else 0.0
    flag_terms = [(name, value) for name, value in (("LoRA adapters", m.lora_gib), ("draft model", m.draft_weights_gib))
                  if value > 0]
    return [
        ("weights", m.weights_gib_per_gpu),
        *flag_terms,
        ("non-torch", m.non_torch_gib),
        ("activation peak", m.activation_peak_gib),
        ("CUDA graphs", m.cudagraph_gib),
        ("KV cache", kv),
        ("unused budget", unused),
        ("outside budget (1 - utilization)", reserved_outside),
    ]


def headline(r: PlanResult) -> str:
    """``MODEL on 72× A100 (DP 18 replicas × TP 4) — ...``: the GPUs of the whole deployment first,
    then how they split; the memory figures below are per GPU of one replica."""
    p = r.parallel
    total = p.total_gpus
    gpus = f"{total}× {r.flags.gpu}" if total > 1 else r.flags.gpu
    par = f"TP {p.tensor_parallel_size}" + (f" × PP {p.pipeline_parallel_size}" if p.pipeline_parallel_size > 1 else "")
    if p.data_parallel_size > 1:
        par = f"DP {p.data_parallel_size} replicas × {par}, {p.gpus_per_replica} GPU{'s' if p.gpus_per_replica > 1 else ''} each"
    return f"{r.model.id} on {gpus} ({par}) — vLLM {r.vllm_semantics} rules ({r.engine})"


def verdict_title(r: PlanResult) -> str:
    word = "STARTS" if r.startup.ok else "FAILS"
    return f"verdict: {word}" + (" (borderline)" if r.startup.borderline else "")


def borderline_text(r: PlanResult) -> str | None:
    """Why a verdict inside the estimate's error could go either way, and what settles it."""
    s = r.startup
    if not s.borderline or s.kv_margin_gib is None:
        return None
    side = "short of" if s.kv_margin_gib < 0 else "above"
    if s.estimate_error_gib is not None and abs(s.kv_margin_gib) > s.estimate_error_gib:
        # outside the error band: it is the install that decides (memory/_assemble.py, NO_FLASHINFER)
        return (f"Borderline: with FlashInfer's sampler (the release image) the estimated KV memory is "
                f"{s.kv_margin_gib:.2f} GiB above what one {r.flags.max_model_len:,}-token request needs; a plain "
                f"pip install of this vLLM has no FlashInfer, and then vLLM refuses. To settle it, {s.settle_with}.")
    return (f"Borderline: the estimated KV memory is {abs(s.kv_margin_gib):.2f} GiB {side} what one "
            f"{r.flags.max_model_len:,}-token request needs, inside the estimate's error of ±{s.estimate_error_gib:.2f} "
            f"GiB, so vLLM may {'start' if s.kv_margin_gib < 0 else 'refuse'} after all. To settle it, {s.settle_with}.")


def run_block(r: PlanResult) -> tuple[str, str, str] | None:
    """(title, command, yaml) of the command to run, or None: a FAILS verdict never offers the
    failing command. The asked configuration at the largest length that starts, else the
    smallest layout that starts at the asked length."""
    if r.serve_command_starts:
        if r.startup.ok:
            return "run it (vllm serve, or vllm serve --config FILE)", r.serve_command, r.serve_config_yaml
        return (f"run it at --max-model-len {r.what_if_max_model_len or r.startup.suggested_max_model_len:,}: the "
                f"largest length that starts ({r.flags.max_model_len:,} fails)", r.serve_command, r.serve_config_yaml)
    f = r.startup.fits_with
    if f is not None and f.found:
        return (f"run this instead: TP {f.tensor_parallel_size} × PP {f.pipeline_parallel_size} on {f.gpus_per_replica} "
                f"GPUs (the asked layout fails)", f.serve_command, f.serve_config_yaml)
    return None


def what_if_caption(r: PlanResult) -> str:
    if r.what_if_at_fallback_length and r.what_if_max_model_len:
        return (f"what if (each row planned at --max-model-len {r.what_if_max_model_len:,}, the fallback length: "
                f"{r.flags.max_model_len:,} fails)")
    return "what if"


def serve_flag_lines(r: PlanResult) -> list[str]:
    """One line per serve flag that moves memory (LoRA, speculative decoding, CPU offload, host memory)."""
    f, m = r.flags, r.memory
    out = []
    if f.lora is not None:
        lo = f.lora
        out.append(f"LoRA: {lo.max_loras} adapter slot(s) at rank {lo.max_lora_rank} ({lo.lora_dtype}): {lo.gpu_gib:.2f} GiB "
                   f"per GPU of stacked A/B buffers; one adapter at that rank is {lo.adapter_gib:.3f} GiB"
                   + (f"; {lo.extra_vocab} extra vocabulary rows" if lo.extra_vocab else "")
                   + (f"; CUDA graphs captured {lo.cudagraph_cases}x (with and without LoRA)" if lo.cudagraph_cases > 1
                      else ""))
    if f.speculative is not None:
        sd = f.speculative
        head = f" ({sd.model})" if sd.model else ""
        out.append(f"Speculative decoding: {sd.method}{head}, {sd.num_speculative_tokens} token(s) per step: "
                   f"{sd.weights_gib:.2f} GiB of drafter weights, {sd.kv_layers} KV layer(s) in the pool, "
                   f"{sd.lookahead_tokens} lookahead slot(s) reserved per running request"
                   + (" (head shape derived from the target)" if sd.derived_from_target else ""))
    if f.cpu_offload_gb:
        out.append(f"CPU offload: {m.cpu_offload_gib:.2f} GiB of weights per GPU in pinned host memory "
                   f"(--cpu-offload-gb {f.cpu_offload_gb:g})")
    if m.host is not None:
        h = m.host
        parts = [f"{name} {value:.2f} GiB" for name, value in (("offloaded weights", h.cpu_offload_gib),
                                                              ("LoRA adapter cache", h.lora_cache_gib),
                                                              ("swap space", h.swap_space_gib)) if value]
        out.append(f"Host memory per GPU worker: {h.total_gib:.2f} GiB ({', '.join(parts)})"
                   + (f"; {h.num_cpu_blocks:,} CPU blocks" if h.num_cpu_blocks else ""))
    return out
