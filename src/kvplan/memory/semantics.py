"""Which of vLLM's rules apply to a given vLLM version.

Each rule kvplan follows is tied to the version range where vLLM's source has it; the ranges come
from reading the published wheels (docs/vllm-semantics.md; shared reference
``vllm-memory-model.md`` §1.3, §2.3, §3, §4, §5). kvplan defaults to the newest version it has
read (0.33). Ranges were not bisected further than the versions read: a rule that changed between
two read versions is attributed to the later one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ..errors import UsageError

LATEST = (0, 33)
#: the oldest version whose rules kvplan follows (docs/vllm-semantics.md: 0.6.4 is the oldest log replayed)
EARLIEST = (0, 6)
Version = tuple[int, ...]
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def _label(v: Version) -> str:
    return ".".join(str(p) for p in v)


SUPPORTED_RANGE = f"{_label(EARLIEST)} to {_label(LATEST)}"


def _read_version(text: str, what: str) -> Version:
    m = _VERSION.match(str(text).strip())
    if not m:
        raise UsageError(f"{what}: cannot read {text!r} (expected e.g. 0.33, 0.11.0, 0.6.4)")
    return tuple(int(p) for p in m.groups() if p is not None)


def parse_version(text: str | None, what: str = "--vllm-version") -> Version:
    """A version kvplan has the rules of; anything outside EARLIEST..LATEST is a usage error (a
    version kvplan has not read would be planned with rules it cannot vouch for)."""
    if text is None or str(text).strip() in ("", "latest"):
        return LATEST
    parts = _read_version(text, what)
    if parts[:2] < EARLIEST:
        raise UsageError(f"{what} {text}: kvplan follows vLLM {SUPPORTED_RANGE}; {text} is older than any "
                         "version whose rules it has read")
    if parts[:2] > LATEST:
        raise UsageError(f"{what} {text}: kvplan follows vLLM {SUPPORTED_RANGE}; {text} is newer than any "
                         f"version whose rules it has read (give --vllm-version {_label(LATEST)} to plan with "
                         "the newest rules, knowingly)")
    return parts


def nearest_supported_version(text: str | None) -> tuple[str | None, str | None]:
    """For a version read from a log or a server (not typed by the user): the nearest version
    kvplan follows, and a note saying so when it is not the version itself. Unreadable: (None, None)."""
    if text is None:
        return None, None
    try:
        parts = _read_version(text, "version")
    except UsageError:
        return None, None
    if parts[:2] < EARLIEST:
        return _label(EARLIEST), f"vLLM {text} is older than any version kvplan follows: planned with vLLM " \
                                 f"{_label(EARLIEST)} rules (the nearest)"
    if parts[:2] > LATEST:
        return _label(LATEST), f"vLLM {text} is newer than any version kvplan follows: planned with vLLM " \
                               f"{_label(LATEST)} rules (the nearest)"
    return str(text), None



# DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES by version (vllm/config/vllm.py): VllmSemantics.v2_model_runner
_V2_RUNNER_0_22 = frozenset({"Qwen3ForCausalLM"})
_V2_RUNNER_0_24 = frozenset({"Qwen3ForCausalLM", "DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM",
                             "GraniteMoeForCausalLM", "LlamaForCausalLM", "MistralForCausalLM"})
_V2_RUNNER_0_25 = frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"})
_V2_RUNNER_0_26 = _V2_RUNNER_0_25 | {"InklingForCausalLM", "InklingForConditionalGeneration",
                                    "LongcatFlashNgramForCausalLM"}
_V2_RUNNER_0_27 = _V2_RUNNER_0_26 | {"KimiK3ForConditionalGeneration"}
_V2_RUNNER_0_28 = _V2_RUNNER_0_27 | {"DeepseekV4ForCausalLM"}


@dataclass(frozen=True)
class VllmSemantics:
    """The rules of one vLLM version that change a number kvplan prints."""

    version: Version
    engine_override: str | None = None  # VLLM_USE_V1=0/1 on 0.7–0.10

    @property
    def label(self) -> str:
        return ".".join(str(p) for p in self.version)

    # --- engine ------------------------------------------------------------------------------
    @property
    def engine(self) -> str:
        """V1 became the default in 0.8; V0 was removed by 0.11 (VLLM_USE_V1 chose in between)."""
        if self.engine_override and (0, 7) <= self.version < (0, 11):
            return self.engine_override.upper()
        return "V1" if self.version >= (0, 8) else "V0"

    @property
    def mla_entry_alignment(self) -> int:
        """V0 (0.7.2+) pads each MLA cache entry to a multiple of 256 bytes
        (VLLM_CUDA_MEM_ALIGN_KV_CACHE, PR #12676): 576 bf16 values take 1,280 B."""
        return 256 if self.engine == "V0" and self.version >= (0, 7) else 1

    @property
    def mla_counts_k_and_v(self) -> bool:
        """V1 before 0.8 sized MLA pages with the K/V factor 2 (fixed by PR #14462)."""
        return self.engine == "V1" and self.version < (0, 8)

    # --- model dtype -------------------------------------------------------------------------
    def float32_auto_dtype(self, device: str, sm: int | None, model_type: str) -> str:
        """What ``--dtype auto`` serves a float32 checkpoint in (``_get_and_verify_dtype``).
        From 0.10.1 (``_resolve_auto_dtype``) the platform's first supported dtype, on every
        platform: bf16 on CUDA sm 8.0+ and on x86/aarch64 CPUs, fp16 on sm 6.0-7.5. Before, the
        rule was "the common practice": float16 (bfloat16 for Gemma 2), and the CPU backend then
        cast float16 to bfloat16. Always 2 bytes: a float32 checkpoint is never served in float32
        unless --dtype float32 asks for it."""
        if self.version >= (0, 10, 1):
            if device == "cpu":
                return "bfloat16"
            return "bfloat16" if (sm or 80) >= 80 else "float16"
        if device == "cpu" or model_type == "gemma2":
            return "bfloat16"
        return "float16"

    def fp8_kv_cache(self, sm: int | None, device: str, engine_forced: bool) -> str:
        """What ``--kv-cache-dtype fp8`` does on a CUDA GPU of compute capability ``sm`` — one rule
        for plan and tune:

        * ``native``: sm 8.9+ stores and computes fp8.
        * ``converted``: vLLM starts, stores fp8 (1 byte) and converts in the attention kernel: V0's
          paged attention (XFormers), and V1 from 0.11 (Triton, or FlashInfer where installed,
          when FlashAttention 3 is not there: ``(has_sink or use_fp8_kv_cache) and not sm90``).
        * ``v0_fallback``: 0.7-0.10 V1 took fp8 KV only with FlashAttention 3 on Hopper (and
          Blackwell from 0.10): ``_is_v1_supported_oracle`` fell back to the V0 engine.
        * ``refused``: the same, with V1 forced (VLLM_USE_V1=1 / --engine v1): vLLM raises
          "VLLM_USE_V1=1 is not supported with --kv-cache-dtype."
        """
        if device != "cuda" or sm is None:
            return "native"
        if self.engine == "V1" and (0, 7) <= self.version < (0, 11):
            hopper_or_blackwell = sm == 90 or (sm >= 100 and self.version >= (0, 10))
            if not hopper_or_blackwell:
                return "refused" if engine_forced else "v0_fallback"
        return "native" if sm >= 89 else "converted"

    def compute_capability_engine(self, sm: int | None, device: str, engine_forced: bool) -> str:
        """What 0.8.0-0.10.1 do on a CUDA GPU older than Ampere (compute capability < 8.0: T4, V100,
        RTX 20xx): ``_is_v1_supported_oracle`` (``vllm/engine/arg_utils.py``, read in 0.8.0, 0.8.2,
        0.8.5, 0.9.2 and 0.10.1.1) calls ``_raise_or_fallback(feature_name="Compute Capability < 8.0")``:

        * ``v0_fallback``: "Compute Capability < 8.0 is not supported by the V1 Engine. Falling back
          to V0." and the V0 engine runs, with V0's defaults and profile;
        * ``refused``: with V1 forced (VLLM_USE_V1=1, ``--engine v1``) it raises "VLLM_USE_V1=1 is
          not supported with Compute Capability < 8.0.";
        * ``v1``: the GPU is new enough, or the version has no such check (0.10.2 removed it; V1
          before 0.8 was opt-in only).
        """
        if device != "cuda" or sm is None or sm >= 80 or self.engine != "V1":
            return "v1"
        if not (0, 8) <= self.version < (0, 10, 2):
            return "v1"
        return "refused" if engine_forced else "v0_fallback"

    # --- budget --------------------------------------------------------------------------------
    @property
    def default_gpu_memory_utilization(self) -> float:
        """0.90 up to 0.19; 0.92 from 0.20.0 (vllm/config/cache.py)."""
        return 0.92 if self.version >= (0, 20) else 0.90

    @property
    def requested_memory_ceil(self) -> bool:
        """``requested = ceil(total × util)`` from 0.14.0 (v1/worker/utils.py::request_memory)."""
        return self.version >= (0, 14)

    def charged_preexisting(self, context_bytes: int, nccl_bytes: int) -> int:
        """Memory in use before vLLM's snapshot that older versions charged to the budget.

        * Everything on the GPU (the CUDA context included): V0 0.6.0-0.6.4 and V1 0.7-0.9.0, whose
          peak is the torch peak plus every non-torch byte on the GPU (0.6.4.post1
          ``worker.determine_num_available_blocks``; V1 0.7.1, 0.8.0, 0.8.5 and 0.9.0.1
          ``gpu_worker.determine_available_memory``: ``peak_memory += non_torch_allocations``).
        * NCCL only: V0 0.6.5+ subtracts what was in use when ``init_device`` measured, before
          ``init_worker_distributed_environment`` (0.6.5 and 0.6.6.post1:
          ``baseline_memory_in_bytes = total - init_gpu_memory``; 0.7.0-0.8.5: the
          ``MemorySnapshot`` baseline), and V1 0.9.1-0.10 snapshot before NCCL too (``memory_profiling``
          from ``init_snapshot``, read in 0.9.1 and 0.9.2; they alone print "Available KV cache memory").
        * Nothing: 0.11+ snapshot after NCCL initialisation."""
        v = self.version
        if self.engine == "V0":
            return context_bytes + nccl_bytes if (0, 6) <= v < (0, 6, 5) else nccl_bytes
        if (0, 6) <= v < (0, 9, 1):
            return context_bytes + nccl_bytes
        if v < (0, 11):
            return nccl_bytes
        return 0

    @property
    def moe_workspace_persists(self) -> bool:
        """0.14-0.21 run unquantized MoE through the modular kernel on CUDA (``self.kernel`` /
        ``moe_kernel.apply``, the Triton experts by default), whose workspace comes from the global
        ``WorkspaceManager`` (``v1/worker/workspace.py``: grown, never freed) and so is still
        allocated when the dummy sampler runs (budget.moe_workspace_bytes; read in 0.14.0, 0.15.1,
        0.16.0, 0.17.0, 0.18.0, 0.19.0, 0.20.0 and 0.21.0). Earlier versions allocate the
        intermediate caches per call."""
        return self.engine == "V1" and (0, 14) <= self.version < (0, 22)

    @property
    def moe_chunk_tokens(self) -> Optional[int]:
        """The modular kernel's token chunk: ``VLLM_FUSED_MOE_CHUNK_SIZE`` = 16,384 in 0.14-0.17;
        0.18+ do not chunk (``M_chunk = M_full``)."""
        return 16 * 1024 if self.version < (0, 18) else None

    @property
    def allreduce_rms_fusion_by_default(self) -> bool:
        """0.17-0.21 turn FlashInfer's all-reduce + RMSNorm fusion on at -O2/-O3 (the default) for
        TP > 1 on SM90 and SM100 (``config/vllm.py::enable_allreduce_rms_fusion``, read in 0.17.0,
        0.18.0, 0.19.0, 0.20.0 and 0.21.0; 0.14-0.16 default it off); later versions are not read
        and keep it out (budget.allreduce_fusion_workspace_bytes)."""
        return self.engine == "V1" and (0, 17) <= self.version < (0, 22)

    @property
    def allreduce_rms_fusion_needs_single_stage(self) -> bool:
        """0.17-0.20 also require pipeline and data parallel size 1 (vLLM issues #34458, #35426); 0.21
        drops the condition."""
        return self.version < (0, 21)

    @property
    def allreduce_rms_fusion_sm100_family(self) -> bool:
        """0.19+ accept the SM100 family (``is_device_capability_family(100)``: B200, B300); 0.17
        and 0.18 only capability 10.0."""
        return self.version >= (0, 19)

    @property
    def subtracts_cudagraph_estimate(self) -> bool:
        """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 from 0.20.0."""
        return self.version >= (0, 20)

    @property
    def cudagraph_profile_in_memory_window(self) -> bool:
        """0.18-0.21 run ``profile_cudagraph_memory()`` inside ``memory_profiling`` (unless
        --enforce-eager), so the driver-side memory of the graphs it captures there counts as
        non-torch growth (``Worker.determine_available_memory``, the same window in the 0.18.0,
        0.19.0 and 0.21.0 wheels; 0.17.0 profiles no graphs; 0.22+ not read)."""
        return self.engine == "V1" and (0, 18) <= self.version < (0, 22)

    # --- KV cache sizing ---------------------------------------------------------------------
    @property
    def check_reserves_null_block(self) -> bool:
        """From 0.29.0 the admission check compares against ``available − one block``."""
        return self.version >= (0, 29)

    @property
    def needed_memory_rule(self) -> str:
        """How the admission check totals one request's KV need:
        ``layers`` (≤0.13: Σ over layers), ``first_group`` (0.14–0.18: a bug sizes every group
        like group 0), ``groups`` (0.19+: bytes per block × Σ over groups of blocks)."""
        if self.version < (0, 14):
            return "layers"
        if self.version < (0, 19):
            return "first_group"
        return "groups"

    @property
    def sliding_window_uses_in_flight_tokens(self) -> bool:
        """From 0.26.0 sliding-window and chunked layers reserve ``window − 1 +
        max_in_flight_tokens``; before, ``window − 1 + max_num_batched_tokens``."""
        return self.version >= (0, 26)

    @property
    def async_scheduling_default(self) -> bool:
        """Async scheduling is on by default from 0.14.0 (off on CPU)."""
        return self.version >= (0, 14)

    @property
    def yarn_multiplies_max_len(self) -> bool:
        """Up to 0.29 YaRN set max_model_len = original_max_position_embeddings × factor; from
        0.30.0 max_position_embeddings is trusted as already scaled."""
        return self.version < (0, 30)

    @property
    def hybrid_kv_cache_manager(self) -> bool:
        """Sliding-window layers get window-sized KV (hybrid allocator) from 0.9; 0.8 allocated
        every layer of a mixed model for the full context."""
        return self.version >= (0, 9)

    @property
    def chunked_local_keeps_hma(self) -> bool:
        """Chunked-local models (Llama-4) keep the hybrid allocator when
        ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` is on: default "0" in 0.10.1 and
        0.11 (VllmConfig.__post_init__ disables HMA with a latency warning), "1" in 0.15.1, 0.21
        and 0.33 (vllm/envs.py). The flip is attributed to 0.15."""
        return self.version >= (0, 15)

    @property
    def group_size_threshold(self) -> float:
        """group_size = max layer count when max < threshold × min, else min: never (≤0.11),
        1.25 (0.12–0.17), 1.5 (0.18+)."""
        if self.version < (0, 12):
            return 1.0
        return 1.25 if self.version < (0, 18) else 1.5

    @property
    def batch_cap_by_max_len(self) -> bool:
        """From 0.12, default max_num_batched_tokens = min(max_num_seqs × max_model_len, default)."""
        return self.version >= (0, 12)

    # --- log line ------------------------------------------------------------------------------
    @property
    def capacity_log_style(self) -> str:
        if self.engine == "V0":
            return "v0-concurrency" if self.version >= (0, 6) else "v0-blocks"
        v = self.version
        if v < (0, 9):
            return "v1-085"  # "GPU KV cache size: blocks×bs tokens" + concurrency
        if v < (0, 20, 1):
            return "v1-011"  # tokens = num_blocks // groups × bs
        if v < (0, 28):
            return "v1-021"  # two lines, tokens = int(conc × L)
        return "v1-033"  # one combined line

    def pool_name(self, device: str) -> str:
        """'GPU' was hard-coded in the capacity line up to 0.29; the device prefix came in 0.30."""
        if device == "cuda" or self.version < (0, 30):
            return "GPU"
        return device.upper()

    @property
    def v0_device_name(self) -> str:
        return "cuda" if self.version >= (0, 7) else "GPU"

    @property
    def per_group_blocks_per_request(self) -> bool:
        """0.27+: blocks per request = Σ over groups of cdiv(max_mem, page); before, the sum of
        all groups' bytes was rounded once."""
        return self.version >= (0, 27)

    @property
    def format_gib_style(self) -> str:
        """``format_gib`` (Python round, repr: '20.0', '19.87') from 0.14.0; '%.2f' before."""
        return "round" if self.version >= (0, 14) else "fixed"

    # -- start-up error texts (memory/admission.py) ----------------------------------------------
    @property
    def long_max_model_len_error_style(self) -> str:
        """The tail of the max_model_len > derived error: "caution" (0.10.2+, the position-encoding
        warning), "env" (0.6+, names VLLM_ALLOW_LONG_MAX_MODEL_LEN), "" before."""
        if self.version >= (0, 10, 2):
            return "caution"
        return "env" if self.version >= (0, 6) else ""

    @property
    def free_memory_error_names_device(self) -> bool:
        """0.14+: "Free memory on device cuda:0 (x/y GiB) on startup is less than desired ..."."""
        return self.version >= (0, 14)

    @property
    def derived_max_len_printed_as_float(self) -> bool:
        """0.12+: a RoPE model's derived length is scaled by a float factor before it is printed."""
        return self.version >= (0, 12)

    # -- the planner's own version rules (memory/_resolve.py, _sizing.py, budget.py) -------------
    @property
    def startup_checks_free_memory(self) -> bool:
        """0.11+ (as planned here): start-up refuses a GPU whose free memory is below
        gpu_memory_utilization × total (admission.free_memory_below_requested's text)."""
        return self.version >= (0, 11)

    @property
    def default_max_num_seqs_capped_by_batch(self) -> bool:
        """0.9+: a defaulted max_num_seqs is capped at max_num_batched_tokens
        (``self.max_num_seqs = min(self.max_num_seqs, self.max_num_batched_tokens)``)."""
        return self.version >= (0, 9)

    @property
    def v0_chunks_long_context(self) -> bool:
        """V0 0.6+: above 32K tokens of context chunked prefill turns on by itself, with a
        2,048-token batch (before, a batch holds a whole max-length prompt)."""
        return self.version >= (0, 6)

    @property
    def accepted_block_sizes(self) -> Optional[tuple[int, ...]]:
        """The ``--block-size`` values vLLM's argument parser accepts (argparse choices: an other
        value is refused before anything starts), or None when any positive size passes the parser
        and the attention backend decides. Read in the wheels: 0.6.4-0.7.3 ``choices=[8, 16, 32,
        64, 128]`` (arg_utils.py); 0.8.5-0.11.0 ``BlockSize = Literal[1, 8, 16, 32, 64, 128]``;
        0.12.0-0.17.0 the same with 256 (config/cache.py); 0.18.0+ ``SkipValidation[int]``."""
        if self.version < (0, 8):
            return (8, 16, 32, 64, 128)
        if self.version < (0, 12):
            return (1, 8, 16, 32, 64, 128)
        if self.version < (0, 18):
            return (1, 8, 16, 32, 64, 128, 256)
        return None

    @property
    def block_size_error_names_backends(self) -> bool:
        """``No common block size for N (FLASH_ATTN: [MultipleOf(16)]).`` names each backend's
        sizes (read in 0.33.0 and on the 0.32 CPU build); 0.18.0-0.19.0 print ``No common block
        size for N. `` (v1/worker/utils.py). 0.20-0.31 were not read: the newer text is assumed."""
        return self.version >= (0, 20)

    @property
    def v2_runner_keeps_async_under_pp(self) -> bool:
        """0.32+: the V2 model runner (the default) keeps async scheduling under pipeline
        parallelism, so max_concurrent_batches = pp + 1 (the V1 runner turns async off)."""
        return self.version >= (0, 32)

    @property
    def flashinfer_sampler_default(self) -> bool:
        """Whether the dummy sampler runs FlashInfer by default on CUDA (VLLM_USE_FLASHINFER_SAMPLER,
        budget.sampler_bytes_per_logit): opt-in from 0.11.1 (read in 0.11.1, 0.11.2 and 0.15.1)
        until 0.21, on otherwise, where FlashInfer is installed. 0.8.0-0.8.5 also turn it off when
        the installed FlashInfer is 0.2.3 or newer ("FlashInfer>=v0.2.3 is not backward
        compatible"); their release images shipped 0.2.1.post2, so the default stays on. A start-up
        log says which ran (StartupLog.flashinfer_sampler)."""
        return not (0, 11, 1) <= self.version < (0, 21)

    @property
    def flashinfer_sampler_depends_on_install(self) -> bool:
        """0.8.0-0.11.0 V1 sample with FlashInfer by default wherever it is importable, and their
        wheels do not require it (0.10.1 and 0.11.0 list ``flashinfer-python`` only under the
        ``flashinfer`` extra, 0.8/0.9/0.10.0 not at all; 0.11.1+ require it but leave its sampler
        off): ``pip install vllm`` samples natively, the release image with FlashInfer. The plan
        shows the other case as a what-if (memory/_assemble.py)."""
        return self.engine == "V1" and (0, 8) <= self.version < (0, 11, 1)

    @property
    def vision_rotary(self) -> Optional[str]:
        """How a Qwen-VL vision block's attention applies RoPE on CUDA (memory/encoder_profile.py):
        ``apply_rotary_pos_emb_vision`` casts to float32 (``t_ = t.float()``) and flash-attn's rotary
        writes a new float32 output before ``.type_as(t)``, on q and k one after the other
        (``"fp32_per_tensor"``: read in the 0.7.1, 0.7.3, 0.8.0, 0.8.5, 0.9.0.1, 0.9.2 and 0.10.1.1
        wheels) or on ``torch.cat([q, k])`` (``"fp32_qk_concat"``: 0.11.0). None: not re-read
        (0.19 rotates with ``ApplyRotaryEmb``); the earlier estimate stands."""
        if (0, 7) <= self.version < (0, 11):
            return "fp32_per_tensor"
        if (0, 11) <= self.version < (0, 11, 1):
            return "fp32_qk_concat"
        return None

    @property
    def encoder_items_round_up(self) -> bool:
        """How many dummy items the encoder profile runs (memory/encoder_profile.py):
        ``cdiv(encoder_budget, max_tokens_per_mm_item)`` in ``profile_run`` through 0.9.2 (read in
        0.9.0.1 and 0.9.2); ``encoder_budget // max_tokens_per_item`` bounded by the decoder side
        and at least 1 from 0.10.1.1 (``MultiModalBudget._get_max_items``, read there and in 0.11.0,
        0.14.0-0.19.0; 0.10.0 attributed to the later version)."""
        return self.version < (0, 10)

    @property
    def native_sampler_sorts_logits(self) -> bool:
        """0.8-0.16: the PyTorch-native top-k/top-p sampler peaks in ``torch.sort`` over the
        logits (budget.native_sort_bytes_per_logit). ``apply_top_k_top_p`` calls
        ``logits.sort(dim=-1, descending=False)`` whenever top-p is set, and ``_dummy_sampler_run``
        sets top_p=0.9 and top_k=vocab-1 in every version read: 0.8.0, 0.8.1, 0.8.2, 0.8.5,
        0.9.0.1, 0.9.2, 0.10.0, 0.10.1, 0.11.0-0.11.2, 0.12.0, 0.15.1 and 0.16.0. From 0.17 it
        sorts only below 8 rows (:attr:`native_sampler_triton_topk_topp`). Before 0.8 V1's profile
        ran no sampler (:attr:`v1_profile_logits`)."""
        return (0, 8) <= self.version < (0, 17)

    @property
    def native_sampler_triton_topk_topp(self) -> bool:
        """0.17+: the native top-k/top-p on CUDA is one in-place Triton kernel from 8 rows
        (``apply_top_k_top_p_triton``, read in the 0.17.0, 0.18 and 0.19.0 wheels), torch's sort
        below (budget.SAMPLER_NATIVE_TRITON_BYTES_PER_LOGIT)."""
        return self.version >= (0, 17)

    @property
    def v1_profile_logits(self) -> str:
        """What V1's ``profile_run`` does with the logits after the dummy forward (last PP rank):

        * ``"sampler"`` (0.8+): ``_dummy_sampler_run``, the sampler over
          ``min(max_num_seqs, max_num_tokens)`` rows (budget.sampler_bytes_per_logit);
        * ``"per_request"`` (0.7.3): ``compute_logits(hidden_states[logit_indices])``, one row per
          dummy request, and no sampler ("TODO(woosuk): Consider the memory usage of the sampler");
        * ``"all_tokens"`` (0.7.0-0.7.2): ``compute_logits(hidden_states)`` over every scheduled
          token, no sampler (read in 0.7.1 and 0.7.2 ``gpu_model_runner.profile_run``)."""
        if self.version >= (0, 8):
            return "sampler"
        return "per_request" if self.version >= (0, 7, 3) else "all_tokens"

    # -- scheduler and block-size defaults (memory/defaults.py) ---------------------------------
    @property
    def cpu_scheduler_defaults(self) -> bool:
        """0.9+: the CPU platform has its own max_num_batched_tokens / max_num_seqs defaults."""
        return self.version >= (0, 9)

    @property
    def batch_defaults_by_device_name(self) -> bool:
        """Before 0.8.5 the V1 batch defaults follow the device name ("h100"/"h200"), not its memory
        (0.7.3, 0.8.2, 0.8.3, 0.8.4 `_set_default_args_v1`)."""
        return self.version < (0, 8, 5)

    @property
    def max_num_seqs_1024_on_every_gpu(self) -> bool:
        """Before 0.8.4 V1 defaults max_num_seqs to 1024 whatever the GPU (0.7.3 __post_init__, 0.8.2
        and 0.8.3 `_set_default_args_v1`); 0.8.4 gives 256 to names without h100/h200."""
        return self.version < (0, 8, 4)

    @property
    def large_gpu_scheduler_defaults(self) -> bool:
        """0.28+: GPUs of 160 GiB and more default to 16,384 batched tokens and 1,024 sequences."""
        return self.version >= (0, 28)

    @property
    def a100_takes_small_gpu_defaults(self) -> bool:
        """0.9+: an A100 (even 80 GB) gets the smaller GPUs' scheduler defaults."""
        return self.version >= (0, 9)

    @property
    def sm121_takes_small_gpu_defaults(self) -> bool:
        """0.33+: compute capability 12.1 (GB10) gets the smaller GPUs' scheduler defaults."""
        return self.version >= (0, 33)

    @property
    def cpu_block_size(self) -> int:
        """The CPU backend's default block size for non-MLA models: 128 from 0.12, 16 before."""
        return 128 if self.version >= (0, 12) else 16

    def mla_block_size(self, sm: int, kv_cache_dtype: str, qk_nope_head_dim: int) -> int:
        """The KV block size of the MLA backend vLLM picks on CUDA compute capability ``sm`` (no
        ``--block-size``, dense MLA), read in the wheels' ``platforms/cuda.py`` and backends:

        * before 0.8: 16 (no FlashMLA; 0.7.3 has no block-size rule for MLA);
        * 0.8-0.17: ``check_and_update_config`` forces FlashMLA's 64 on Hopper (``is_flashmla_supported``:
          major 9), for V0 and V1 alike (0.8.5, 0.9.2, 0.10.1.1, 0.11.0, 0.12.0-0.17.0). Blackwell:
          CUTLASS MLA's 128 from 0.10.1 (0.9.2: none; 0.10.1.1-0.12.0 ``is_device_capability(100)``, 10.0
          only; 0.13+ the SM100 family), and from 0.15 (read in 0.15.1-0.17.0) FlashInfer MLA, forced to
          64 from the default 16, when ``qk_nope_head_dim == 128`` (its kernel's constraint);
        * 0.18+: the block size follows the backend's preferred size (``Platform.
          update_block_size_for_backend``: 16 if supported, else its smallest) and the backend the
          priority list of ``_get_backend_priorities`` (read in 0.18.0, 0.19.0, 0.33.0): on Hopper
          FLASH_ATTN_MLA (``MultipleOf(16)`` -> 16; bf16/fp16 KV only, so an fp8 KV cache takes FlashMLA,
          64), on Blackwell FLASHINFER_MLA ([32, 64] -> 32; ``qk_nope_head_dim`` 64 or 128) else
          CUTLASS_MLA (128), elsewhere TRITON_MLA (16). The DeepSeek-V2-Lite and Kimi-VL runs of
          llm-d-planner's 0.19.0 H100 sweep print token counts that only 16-token blocks give.
        Elsewhere (Ampere, Ada, Blackwell before 0.10.1) Triton MLA: 16."""
        v, major = self.version, sm // 10
        if v < (0, 8):
            return 16
        if v >= (0, 18):
            if major == 9:
                return 64 if kv_cache_dtype.startswith("fp8") else 16
            if major == 10:
                return 32 if qk_nope_head_dim in (64, 128) else 128
            return 16
        if major == 9:
            return 64
        blackwell = sm == 100 if v < (0, 13) else major == 10
        if blackwell and v >= (0, 10, 1):
            return 64 if v >= (0, 15) and qk_nope_head_dim == 128 else 128
        return 16

    # -- LoRA, speculative decoding, CPU offload, swap space, chunked prefill (memory/lora.py,
    #    spec_decode.py, offload.py) -------------------------------------------------------------
    @property
    def lora_extra_vocab(self) -> bool:
        """Up to 0.11 LoRA reserves ``lora_extra_vocab_size`` (default 256) added tokens: bigger
        embedding/LM-head LoRA buffers, ``(max_loras, extra, hidden)`` embeddings, and the base vocab
        grown by the extra rows (read in 0.6.4.post1, 0.8.5, 0.10.1.1, 0.11.0; 0.11.0 deprecates it,
        0.12.0 has none)."""
        return self.version < (0, 12)

    @property
    def lora_wraps_moe_experts(self) -> bool:
        """0.12+: ``FusedMoEWithLoRA`` stacks LoRA for every expert (``lora/layers/fused_moe.py``, read
        in 0.12.0 and 0.19.0); up to 0.11 the experts are not wrapped."""
        return self.version >= (0, 12)

    @property
    def lora_in_logged_weights(self) -> bool:
        """Whether "Model loading took" includes the LoRA buffers: V1 builds them inside the loading
        measurement (0.7.3+), V0 from 0.8 (0.7.3 and 0.6.4.post1 V0 build them after it)."""
        return self.engine == "V1" or self.version >= (0, 8)

    @property
    def v0_profile_skips_late_allocations(self) -> bool:
        """V0 from 0.6.5 (``memory_profiling``: 0.6.6.post1, 0.7.3, 0.8.5) charges the weights the
        model-loading measurement saw plus the profile's torch peak *above what was allocated when it
        began*: anything allocated between the two (LoRA buffers in 0.6.5-0.7, vLLM issue #14450; a V0
        draft model's weights, vLLM PR #14067) takes GPU memory the budget never charges."""
        return self.engine == "V0" and self.version >= (0, 6, 5)

    @property
    def lora_cudagraph_cases(self) -> int:
        """CUDA graphs captured per size with LoRA on: 0.12+ capture with and without LoRA
        (``cudagraph_specialize_lora`` defaults True; ``CudagraphDispatcher``, read in 0.12.0, 0.14.0,
        0.19.0 and 0.33.0: ``[0] + [max_loras + 1]``); earlier versions one."""
        return 2 if self.version >= (0, 12) else 1

    @property
    def lora_max_ranks(self) -> tuple[int, ...]:
        """``max_lora_rank`` values vLLM accepts: 8-256 (0.6.4.post1, 0.7.3), adds 320 and 512 in 0.8.5,
        and 1 by 0.19.0 (``MaxLoRARanks``)."""
        if self.version < (0, 8):
            return (8, 16, 32, 64, 128, 256)
        if self.version < (0, 19):
            return (8, 16, 32, 64, 128, 256, 320, 512)
        return (1, 8, 16, 32, 64, 128, 256, 320, 512)

    @property
    def lora_max_vocab(self) -> int:
        """The largest vocabulary LoRA takes (``LogitsProcessorWithLoRA.create_lora_weights``): 257,024
        up to 0.11 (0.8.5: ``32000 < vocab_size > 257024`` raises), 258,048 from 0.12 (0.19.0)."""
        return 257024 if self.version < (0, 12) else 258048

    @property
    def lora_refuses_cpu_offload(self) -> Optional[str]:
        """vLLM's refusal of ``--enable-lora`` with ``--cpu-offload-gb``: every engine in 0.7 (0.7.3
        ``LoRAConfig.verify_with_cache_config``), V0 only in 0.8-0.10 (0.8.5, 0.10.1.1); None otherwise."""
        if (0, 7) <= self.version < (0, 8):
            return "CPU offload is not supported with LoRA yet."
        if self.engine == "V0" and (0, 8) <= self.version < (0, 11):
            return "V0 LoRA does not support CPU offload, please use V1."
        return None

    @property
    def mtp_shares_lm_head(self) -> bool:
        """0.19+: the MTP layer's ``shared_head.head`` is replaced by the target's LM head
        (``EagleProposer._maybe_share_lm_head``); 0.9.2-0.14.0 keep the layer's own copy."""
        return self.version >= (0, 19)

    @property
    def draft_model_speculation(self) -> str:
        """What V1 does with ``method: draft_model``: ``v0_fallback`` (0.8-0.9: the oracle picks V0),
        ``refused`` (0.10-0.18: "Speculative decoding with draft model is not supported yet", read in
        0.10.1.1, 0.11.0, 0.12.0, 0.14.0), ``supported`` (0.19+: ``v1/spec_decode/draft_model.py``).
        V0 always runs it."""
        if self.engine == "V0":
            return "supported"
        if self.version < (0, 10):
            return "v0_fallback"
        return "refused" if self.version < (0, 19) else "supported"

    @property
    def cudagraph_sizes_scale_with_spec_tokens(self) -> bool:
        """0.14+: the largest captured size is ``min(max_num_seqs × (1 + k) × 2, 512)``
        (``VllmConfig._set_cudagraph_sizes``, read in 0.14.0 and 0.19.0; 0.12.0 has ``max_num_seqs × 2``)."""
        return self.version >= (0, 14)

    @property
    def rejection_sampler_profile(self) -> str:
        """The dummy rejection sampler of the profile (spec_decode.rejection_sampler_bytes_per_logit):
        ``target_only`` up to 0.11, ``bonus_and_target`` from 0.12."""
        return "target_only" if self.version < (0, 12) else "bonus_and_target"

    def v2_model_runner(self, architectures: tuple[str, ...], *, moe: bool, quantized: bool, hybrid: bool,
                        spec_method: Optional[str]) -> bool:
        """Whether the engine runs vLLM's V2 model runner ("Using V2 Model Runner"), as
        ``VllmConfig.use_v2_model_runner`` decides without VLLM_USE_V2_MODEL_RUNNER: from 0.22 for the
        architectures in DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES (read in 0.22.0, 0.24.0-0.28.0; 0.22 also
        only dense unquantized models without recurrent layers; 0.23 is taken as 0.22, its wheel not read),
        from 0.29 for every model (0.29.0, 0.33.0); a speculative method the runner lacks keeps the V1
        runner (n-gram and draft models up to 0.32, suffix decoding in 0.33)."""
        if self.engine != "V1" or self.version < (0, 22):
            return False
        if spec_method is not None:
            supported = {"eagle", "eagle3", "mtp"}
            if self.version >= (0, 24):
                supported |= {"dflash", "dspark", "extract_hidden_states"}
            if self.version >= (0, 33):
                supported = None  # every method but suffix / custom_class
            if (spec_method in ("suffix", "custom_class")) if supported is None else spec_method not in supported:
                return False
        if self.version >= (0, 29):
            return True
        lists = ((0, 28), _V2_RUNNER_0_28), ((0, 27), _V2_RUNNER_0_27), ((0, 26), _V2_RUNNER_0_26), \
            ((0, 25), _V2_RUNNER_0_25), ((0, 24), _V2_RUNNER_0_24), ((0, 22), _V2_RUNNER_0_22)
        archs = next(names for since, names in lists if self.version >= since)
        if not any(a in archs for a in architectures):
            return False
        return self.version >= (0, 24) or not (moe or quantized or hybrid)

    @property
    def v2_runner_profiles_rejection_sampler(self) -> bool:
        """The V2 model runner's profile_run samples the dummy batch with the plain sampler only
        (``_dummy_sampler_run``, read in 0.22.0-0.29.0): no dummy rejection sampler, whatever the
        speculative method; the drafter's dummy propose runs within the dummy forward."""
        return False

    @property
    def v2_runner_estimates_cudagraphs(self) -> bool:
        """The V2 model runner's ``profile_cudagraph_memory`` returns 0 up to 0.28 (read in 0.22.0-0.28.0):
        its CUDA graphs are captured after the KV cache is sized, from the memory left outside
        gpu_memory_utilization; 0.29 estimates them as the V1 runner does (``_profile_cudagraph_memory``)."""
        return self.version >= (0, 29)

    @property
    def cpu_offload_uva(self) -> bool:
        """V1 reads offloaded weights in place through unified addressing (0.8.5+); V0 copies an
        offloaded layer back for every forward (offload.py)."""
        return self.engine == "V1"

    @property
    def checks_swap_space(self) -> bool:
        """``--swap-space`` is checked against the host's memory up to 0.17 (0.18 removed it)."""
        return self.version < (0, 18)

    @property
    def v0_chunked_batch_tokens(self) -> int:
        """V0's default token budget with chunked prefill on: 512 up to 0.6.4 (0.6.4.post1
        ``SchedulerConfig``), 2,048 from 0.6.6 (0.6.6.post1, 0.7.3, 0.8.5)."""
        return 512 if self.version < (0, 6, 5) else 2048

    @property
    def v0_long_context_chunking_skips_mla_and_multimodal(self) -> bool:
        """0.8+ V0 never turns chunked prefill on by itself for MLA or multimodal models
        (``_set_default_args_v0``; 0.6.4.post1 skips multimodal only)."""
        return self.version >= (0, 8)

    @property
    def v1_chunked_prefill_switch(self) -> bool:
        """0.12+: V1 honours ``--no-enable-chunked-prefill`` (``max_num_batched_tokens = max(max_model_len,
        default)``); 0.8.5-0.11.0 force chunked prefill on for generative models."""
        return self.version >= (0, 12)

    # --- the engine loop the simulator replays ---------------------------------------------------
    def async_scheduling_by_default(self, *, device: str, pipeline_parallel_size: int, multi_node: bool) -> bool:
        """Whether async scheduling runs without ``--async-scheduling`` / ``--no-async-scheduling``
        (``async_scheduling_default`` with the layout's exceptions). 0.14.0 made it the default (``SchedulerConfig.async_scheduling = None``, resolved in
        ``VllmConfig.__post_init__``: on unless pipeline parallel > 1, non-EAGLE speculative decoding,
        or an executor other than mp / uni / external_launcher: TP across nodes or containers runs
        the Ray executor), read in the 0.13.0 (``async_scheduling: bool = False``), 0.14.0 and 0.33.0
        wheels; 0.10-0.13 default it off. The CPU platform turns it off (``platforms/cpu.py``)."""
        if device == "cpu" or self.engine != "V1" or not self.async_scheduling_default:
            return False
        return pipeline_parallel_size <= 1 and not multi_node

    def api_server_count_default(self, data_parallel_size: int) -> int:
        """API server processes without ``--api-server-count``: one up to 0.14; from 0.15 the DP size
        with vLLM's internal load balancer (``entrypoints/cli/serve.py``: ``args.api_server_count =
        data_parallel_size`` when None; read in the 0.14.0 and 0.15.1 wheels)."""
        return max(1, data_parallel_size) if self.version >= (0, 15) else 1

    @property
    def chat_template_parsed_per_request(self) -> bool:
        """0.11.x parses the whole chat template again for every chat request
        (``resolve_chat_template_kwargs``: a new Jinja sandbox, ``env.parse``,
        ``find_undeclared_variables``; read in the 0.11.0 wheel's ``entrypoints/chat_utils.py``);
        0.10.2 has no such step and 0.12.0 caches it (``_cached_resolve_chat_template_kwargs``)."""
        return (0, 11) <= self.version < (0, 12)

    @property
    def mxfp4_moe_triton_bundled(self) -> bool:
        """0.12.0+ wheels carry ``triton_kernels`` (``vllm/third_party/triton_kernels``), so MXFP4
        experts on SM 9.0/10.0 run its ``matmul_ogs`` (the TRITON backend) without FlashInfer; the
        0.10.1.1-0.11.0 wheels do not carry it and ``get_mxfp4_backend`` (``_should_use_marlin`` in
        0.10.1.1) falls back to MARLIN on a plain ``pip install vllm`` (read in the 0.10.1.1, 0.11.0
        and 0.12.0 wheels: FlashInfer is an extra, and its SM 9.0 path needs
        ``VLLM_USE_FLASHINFER_MOE_MXFP4_BF16``)."""
        return self.version >= (0, 12)

    @property
    def reserve_full_prompt_at_admission(self) -> bool:
        """0.19.0+ admit a waiting request only if its whole prompt fits the free blocks
        (``scheduler_reserve_full_isl``, default on, ``can_fit_full_sequence`` before
        ``allocate_slots``); 0.18 and earlier allocate each step's chunk and preempt by recompute
        when a later chunk does not fit (read in the 0.18.0, 0.19.0 and 0.33.0 wheels'
        ``v1/core/sched/scheduler.py``)."""
        return self.version >= (0, 19)

    @property
    def mrope_cache_positions_factor(self) -> int:
        """Rows of the multimodal RoPE's cos/sin cache per ``max_position_embeddings`` position
        (``MRotaryEmbedding.__init__``, for configs whose rope scaling names an ``mrope_section``:
        Qwen2-VL, Qwen2.5-VL, Qwen3-VL): ``cache_max_position_num = max_position_embeddings * 4``
        ("the maximum index value is related to the duration of the input video"), read in the 0.7.2,
        0.7.3, 0.8.x, 0.9.0.1, 0.9.2, 0.10.1.1-0.19.0, 0.21.0-0.29.0 wheels and 0.33.0 (the default
        ``positions_factor=4``); 0.6.4.post1-0.7.0 build ``max_position_embeddings`` rows (0.7.1 not
        read: 0.7.0's rule)."""
        return 4 if self.version >= (0, 7, 2) else 1

    def gib(self, nbytes: float) -> str:
        value = nbytes / (1 << 30)
        if self.format_gib_style == "round":
            return str(round(value, 2))
        return f"{value:.2f}"


def semantics(version: str | None = None, engine: str | None = None) -> VllmSemantics:
    if engine is not None and engine.upper() not in ("V0", "V1"):
        raise UsageError(f"--engine must be v0 or v1, got {engine!r}")
    v = parse_version(version)
    if engine is not None:
        if engine.upper() == "V0" and v >= (0, 11):
            raise UsageError(f"--engine v0: vLLM {_label(v)} has no V0 engine (it was removed in 0.11; the last "
                             "version with V0 is 0.10.2)")
        if engine.upper() == "V1" and v < (0, 7):
            raise UsageError(f"--engine v1: vLLM {_label(v)} has no V1 engine (it came in 0.7)")
    return VllmSemantics(v, engine.upper() if engine else None)
