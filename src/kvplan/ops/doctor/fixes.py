"""Fixes with predicted effects, ranked by cost (:data:`model.COSTS`).

With a planner (planned.LogPlanner: the model is known and the log measured the KV memory) every
memory prediction is a re-plan (planned_fixes.py, ``basis: "plan"``). Without one, the fallback
below uses the log's own figures (vLLM's measured KV memory, its KV bytes per token as
implied by "X GiB KV cache is needed" for max_model_len tokens): KV tokens scale linearly with KV
memory and inversely with bytes per token, which is exactly how vLLM sizes the cache
(num_blocks = available // page_size). Where the log lacks a figure the effect says so.
"""
from __future__ import annotations

from typing import Any, Optional

from . import planned_fixes as pf
from .model import Fix
from .planned import LogPlanner, log_basis
from .planned_fixes import Coverage, cover, ranked, shorter_context_cost

BLOCK = 16


def _floor_block(n: float) -> int:
    return max(BLOCK, int(n) // BLOCK * BLOCK)


def kv_too_small(max_len: int, kv_tokens: float, args: dict[str, Any], util: Optional[float],
                 total_gib: Optional[float], available_gib: Optional[float], coverage: Coverage = None,
                 planner: Optional[LogPlanner] = None, why: str = "no planner") -> tuple[Fix, ...]:
    """``kv_tokens``: tokens the measured cache holds (vLLM's estimate, or its token count)."""
    if planner is not None:
        return pf.kv_too_small(planner, max_len, args, util, coverage)
    basis = log_basis(why)
    fixes: list[Fix] = []
    fit = _floor_block(kv_tokens)
    fixes.append(_shorter(coverage, max_len, fit, f"starts; one {fit:,}-token request fits (1.0x concurrency)"
                          f"{cover(coverage, fit)}", kv_tokens, basis))
    p99 = getattr(coverage, "p99", None) if coverage is not None else None
    if p99 and 0 < p99 < fit:
        l99 = min(fit, -(-int(p99) // BLOCK) * BLOCK)
        fixes.append(_shorter(coverage, max_len, l99, f"covers P99 of your requests ({l99:,} tokens){cover(coverage, l99)} "
                              f"and gives {kv_tokens / l99:.1f}x concurrency", kv_tokens, basis))
    quarter = _floor_block(kv_tokens / 4)
    if quarter >= 1024 and quarter < fit:
        fixes.append(_shorter(coverage, max_len, quarter, f"starts with {kv_tokens / quarter:.1f}x concurrency at "
                              f"{quarter:,} tokens per request{cover(coverage, quarter)}", kv_tokens, basis))
    kvmb = args.get("kv_cache_memory_bytes")
    if isinstance(kvmb, int) and kvmb > 0:
        # An explicit KV size replaces the utilisation budget: scale it to one max_model_len request.
        need = int(kvmb * max_len / kv_tokens) + 1
        fixes.append(Fix(f"--kv-cache-memory-bytes {need}", f"max_model_len {max_len:,} fits (1.0x concurrency; an "
                         f"upper bound scaled from vLLM's estimate); {need / kvmb:.1f}x the {kvmb:,} bytes set now", "free",
                         (("kv_cache_memory_bytes", need),), basis))
    elif util is not None and util < 0.95 and available_gib is not None and available_gib > 0 and total_gib:
        extra = (0.95 - util) * total_gib
        tokens = kv_tokens * (available_gib + extra) / available_gib
        fixes.append(Fix("--gpu-memory-utilization 0.95", _fits(max_len, tokens, f"adds {extra:.2f} GiB of KV cache"), "free",
                         (("extra_kv_gib", round(extra, 2)), ("kv_tokens", int(tokens))), basis))
    elif util is None or total_gib is None:
        fixes.append(Fix("--gpu-memory-utilization 0.95", "more KV memory: each +0.01 adds 1% of the GPU's memory "
                         f"({pf.missing_from_log(util, total_gib)})", "free"))
    if "fp8" not in str(args.get("kv_cache_dtype", "auto")):
        tokens = kv_tokens * 2  # 16-bit -> 8-bit cache entries: same bytes hold twice the tokens
        fixes.append(Fix("--kv-cache-dtype fp8", _fits(max_len, tokens, "doubles KV tokens"), "accuracy",
                         (("kv_tokens", int(tokens)),), basis))
    tp = int(args.get("tensor_parallel_size", 1) or 1)
    fixes.append(Fix(f"--tensor-parallel-size {tp * 2}", f"{tp * 2} GPUs: each holds half the KV bytes per token and half the "
                     "weights, so more than twice the KV tokens (run kvplan plan for the exact figure)", "hardware",
                     (("tensor_parallel_size", tp * 2),)))
    return ranked(fixes)


def _shorter(coverage: Coverage, max_len: int, length: int, effect: str, kv_tokens: float, basis: str) -> Fix:
    """``--max-model-len length`` (shorter than ``max_len``), priced by planned_fixes.shorter_context_cost."""
    cost, price = shorter_context_cost(coverage, max_len, length)
    return Fix(f"--max-model-len {length}", effect, cost,
               (("max_model_len", length), ("max_concurrency", round(kv_tokens / length, 2))), basis, price)


def _fits(max_len: int, tokens: float, what: str) -> str:
    if tokens >= max_len:
        return f"{what}: {int(tokens):,} tokens, max_model_len {max_len:,} fits with {tokens / max_len:.2f}x concurrency"
    return f"{what}: {int(tokens):,} tokens, still short of {max_len:,}; largest max_model_len ≈ {_floor_block(tokens):,}"


def no_blocks(available_gib: Optional[float], weights_gib: Optional[float], util: Optional[float],
              total_gib: Optional[float], args: dict[str, Any], planner: Optional[LogPlanner] = None,
              why: str = "no planner") -> tuple[Fix, ...]:
    if planner is not None:
        return pf.no_blocks(planner, util, args)
    basis = log_basis(why)
    fixes: list[Fix] = []
    short = -available_gib if available_gib is not None and available_gib < 0 else None
    if util is not None and total_gib:
        need = util + ((short or 0.0) + 1.0) / total_gib  # +1 GiB so there is some cache to use
        if need <= 0.98:
            fixes.append(Fix(f"--gpu-memory-utilization {min(0.98, round(need + 0.005, 2)):.2f}",
                             f"covers the {short or 0:.2f} GiB shortfall plus 1 GiB of KV cache", "free",
                             (("gpu_memory_utilization", round(need, 2)),), basis))
    else:
        fixes.append(Fix("--gpu-memory-utilization 0.95", f"a larger budget ({pf.missing_from_log(util, total_gib)})",
                         "free"))
    if not args.get("enforce_eager"):
        fixes.append(Fix("--enforce-eager", "frees the CUDA-graph memory (slower decode)", "throughput"))
    fixes.append(Fix("--max-num-batched-tokens 2048", "a smaller profiling batch: lower activation peak", "throughput"))
    if weights_gib and not args.get("quantization"):
        fixes.append(Fix("a quantized checkpoint (e.g. FP8)", f"weights ≈ {weights_gib / 2:.1f} GiB instead of {weights_gib:.1f} GiB",
                         "accuracy", (("weights_gib", round(weights_gib / 2, 2)),), basis))
    tp = int(args.get("tensor_parallel_size", 1) or 1)
    if weights_gib:
        fixes.append(Fix(f"--tensor-parallel-size {tp * 2}", f"weights per GPU ≈ {weights_gib / 2:.1f} GiB, "
                         f"frees {weights_gib / 2:.1f} GiB per GPU for the KV cache", "hardware",
                         (("tensor_parallel_size", tp * 2), ("freed_gib", round(weights_gib / 2, 2))), basis))
    return ranked(fixes)


def free_memory(free: float, total: float, util: float, requested: float) -> tuple[Fix, ...]:
    """Always the log's arithmetic: vLLM stops before it measures the KV memory, so there is nothing
    to re-plan from (the figures are the error line's own free/total/requested)."""
    basis = log_basis("vLLM stopped before measuring the KV memory")
    fit = int(free / total * 100 - 1) / 100  # a point below what is free, as vLLM compares at start-up
    return ranked([
        Fix(f"--gpu-memory-utilization {fit:.2f}", f"fits in the {free:.2f} GiB free; the budget shrinks by "
            f"{requested - fit * total:.2f} GiB (that much less KV cache)", "free",
            (("gpu_memory_utilization", fit), ("budget_gib", round(fit * total, 2))), basis),
        Fix("stop the other process on the GPU (nvidia-smi shows it)", f"frees {total - free:.2f} GiB; keeps "
            f"--gpu-memory-utilization {util}", "operational", (("used_by_others_gib", round(total - free, 2)),), basis),
    ])


def oom(kind: str, args: dict[str, Any], util: Optional[float], planner: Optional[LogPlanner] = None,
        sampling: Optional[dict[str, int]] = None) -> tuple[Fix, ...]:
    """``sampling``: what the run's request lines showed (lines with SamplingParams, how many with
    n/best_of > 1, how many asked for logprobs): the evidence for the request-side sampler fix."""
    fixes: list[Fix] = []
    planned = pf.oom(planner, kind, args, util) if planner is not None else []
    done = {f.change.split()[0] for f in planned}
    fixes.extend(planned)
    lower = round((util or 0.9) - 0.05, 2)
    if kind == "cudagraph":
        fixes.append(Fix("--enforce-eager", "no CUDA graphs are captured, so their memory is not needed (slower decode)", "throughput"))
        fixes.append(Fix("--max-num-seqs 128", "fewer, smaller graphs to capture (capture sizes go up to max_num_seqs)", "throughput"))
    elif kind == "sampling":
        seen = sampling or {}
        heavy = seen.get("n_gt_1", 0) + seen.get("logprobs", 0)
        premise = ("" if heavy else
                   f"requests with n > 1, best_of or logprobs: none of the log's {seen['lines']} request line(s) has one"
                   if seen.get("lines") else "requests with n > 1, best_of or logprobs: the log shows no request "
                   "parameters (vLLM logs them with --enable-log-requests)")
        evidence = (f"; {seen.get('n_gt_1', 0)} logged request(s) with n/best_of > 1, {seen.get('logprobs', 0)} "
                    "with logprobs") if heavy else ""
        fixes.append(Fix("lower n / best_of / logprobs in the requests (or --max-logprobs 5)",
                         "the sampler's logits are [num_seqs × n × vocab]: memory scales with n and logprobs" + evidence,
                         "free", premise=premise))
        fixes.append(Fix("--max-num-seqs 128", "fewer sequences sampled per step: the sampler's logits (and its "
                         "top-k/top-p sort) are [num_seqs × vocab]", "throughput"))
    elif kind == "prefill" and "--max-num-batched-tokens" not in done and planner is None:
        mnbt = int(args.get("max_num_batched_tokens") or 8192)
        fixes.append(Fix(f"--max-num-batched-tokens {max(512, mnbt // 2)}", f"halves the prefill batch ({mnbt:,} tokens): "
                         "lower activation peak", "throughput", (("max_num_batched_tokens", max(512, mnbt // 2)),)))
    base = "" if util is not None else " (from the default 0.90: the log does not show the value used)"
    evaluated = planner is not None and util is not None and planner.total_bytes  # pf.oom re-planned it
    if "--gpu-memory-utilization" not in done and not evaluated:
        fixes.append(Fix(f"--gpu-memory-utilization {lower:.2f}", "leaves 5% more of the GPU outside vLLM's budget for "
                     f"activations and graphs (KV cache shrinks by the same amount){base}", "free",
                     (("gpu_memory_utilization", lower),)))
    return ranked(fixes)


def preemption(max_concurrency: Optional[float], args: dict[str, Any], peak_running: Optional[int],
               planner: Optional[LogPlanner] = None, why: str = "no planner", util: Optional[float] = None) -> tuple[Fix, ...]:
    if planner is not None:
        return pf.preemption(planner, args, util, peak_running)
    basis = log_basis(why)
    fixes: list[Fix] = []
    cap = int(max_concurrency) if max_concurrency and max_concurrency >= 1 else None
    if peak_running and cap and peak_running > cap:
        fixes.append(Fix(f"--max-num-seqs {max(1, cap)}", f"at most {cap} requests run at once, what the KV cache holds at "
                         "max_model_len; the rest wait instead of being preempted", "throughput", (("max_num_seqs", cap),),
                         basis))
    else:
        fixes.append(Fix("--max-num-seqs (lower)", "fewer requests share the KV cache, so none is evicted", "throughput"))
    if "fp8" not in str(args.get("kv_cache_dtype", "auto")):
        fixes.append(Fix("--kv-cache-dtype fp8", "doubles KV tokens: twice the requests fit before preemption", "accuracy",
                         (), basis))
    fixes.append(Fix("--gpu-memory-utilization 0.95", "more KV memory (if the GPU has it)", "free"))
    return ranked(fixes)


def too_long(limit: int, requested: int, kv_tokens: Optional[int], coverage: Coverage = None,
             planner: Optional[LogPlanner] = None, why: str = "no planner") -> tuple[Fix, ...]:
    if planner is not None:
        return pf.too_long(planner, limit, requested, coverage)
    fixes = [Fix("truncate prompts / lower max_tokens in the client", f"requests stay within {limit:,} tokens", "free")]
    want = _floor_block(requested + BLOCK - 1)
    if kv_tokens:
        eff = (f"KV cache holds {kv_tokens:,} tokens: {kv_tokens / want:.2f}x concurrency at {want:,}" if kv_tokens >= want
               else f"the KV cache ({kv_tokens:,} tokens) is too small for it: more KV memory first")
    else:
        eff = "needs KV memory for one such request (check with kvplan plan)"
    fixes.append(Fix(f"--max-model-len {want}", eff + cover(coverage, want), "free" if kv_tokens and kv_tokens >= want else "hardware",
                     (("max_model_len", want),), log_basis(why)))
    return ranked(fixes)


def tp_divisible(value: int, tp: int) -> tuple[Fix, ...]:
    # Powers of two first: GPU counts per node are, and KV heads (usually a power of two) must
    # divide by TP or TP by them.
    ok = sorted((d for d in range(tp - 1, 0, -1) if value % d == 0), key=lambda d: (d & (d - 1) != 0, -d))
    fixes = []
    if ok:
        d = ok[0]
        fixes.append(Fix(f"--tensor-parallel-size {d}", f"{value} divides by {d}", "free", (("tensor_parallel_size", d),)))
        if tp % d == 0 and tp // d > 1:
            fixes.append(Fix(f"--tensor-parallel-size {d} --pipeline-parallel-size {tp // d}",
                             f"same {tp} GPUs: TP {d} × PP {tp // d}", "throughput",
                             (("tensor_parallel_size", d), ("pipeline_parallel_size", tp // d))))
    return ranked(fixes)


def slow_start(phases: dict[str, float]) -> tuple[Fix, ...]:
    fixes: list[Fix] = []
    if phases.get("download", 0) > 30:
        fixes.append(Fix("pre-download the weights (hf download) to a persistent HF_HOME volume",
                         f"saves ≈ {phases['download']:.0f} s per start", "operational"))
    load = phases.get("load") or max(0.0, phases.get("model_loading", 0.0) - phases.get("download", 0.0))
    if load > 60:
        fixes.append(Fix("weights on local NVMe (not network storage); safetensors", f"load took {load:.0f} s", "operational"))
    if phases.get("compile", 0) > 30:
        fixes.append(Fix("keep VLLM_CACHE_ROOT (~/.cache/vllm) on a persistent volume",
                         f"torch.compile's cache skips ≈ {phases['compile']:.0f} s on the next start", "operational"))
        fixes.append(Fix("--enforce-eager", "no compile and no graph capture (slower decode)", "throughput"))
    return ranked(fixes)


def config_refused(check: str, numbers: dict) -> tuple[Fix, ...]:
    """The flag changes that pass the check vLLM refused (its own rule, so no memory prediction)."""
    n = {k: int(v.replace(",", "")) for k, v in numbers.items() if k != "choices" and v}
    fixes: list[Fix] = []
    if check == "batch_below_seqs":
        fixes.append(Fix(f"--max-num-batched-tokens {n['seqs']}", "a step's token budget of at least one token per "
                         "running sequence, as vLLM requires", "free", (("max_num_batched_tokens", n["seqs"]),)))
        fixes.append(Fix(f"--max-num-seqs {n['batched']}", "no more running sequences than the step's tokens",
                         "throughput", (("max_num_seqs", n["batched"]),)))
    elif check == "batch_below_len":
        fixes.append(Fix("--enable-chunked-prefill", "prompts longer than the step's budget are prefilled in chunks",
                         "free"))
        fixes.append(Fix(f"--max-num-batched-tokens {n['max_len']}", "one step holds a whole max-length prompt",
                         "free", (("max_num_batched_tokens", n["max_len"]),)))
        cost, price = shorter_context_cost(None, n["max_len"], n["batched"])
        fixes.append(Fix(f"--max-model-len {n['batched']}", "no prompt longer than the step's budget", cost,
                         (("max_model_len", n["batched"]),), price=price))
    elif check == "block_choice":
        choices = sorted(int(c) for c in numbers.get("choices", "").replace(" ", "").split(",") if c.isdigit())
        block = n["block"]
        if choices:
            near = min(choices, key=lambda c: (abs(c - block), -c))
            fixes.append(Fix(f"--block-size {near}", f"the accepted size nearest {block} (vLLM accepts "
                             f"{', '.join(map(str, choices))})", "free", (("block_size", near),)))
    elif check == "block_kernel":
        block = n["block"]
        near = max(16, round(block / 16) * 16)
        fixes.append(Fix(f"--block-size {near}", "a multiple of 16, which FlashAttention's kernels take (or leave "
                         "--block-size out: vLLM picks its backend's size)", "free", (("block_size", near),)))
    return ranked(fixes)
