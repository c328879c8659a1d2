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

from ..errors import UsageError

LATEST = (0, 33)
Version = tuple[int, ...]


def parse_version(text: str | None) -> Version:
    if text is None or str(text).strip() in ("", "latest"):
        return LATEST
    m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(text).strip())
    if not m:
        raise UsageError(f"--vllm-version: cannot read {text!r} (expected e.g. 0.33, 0.11.0, 0.6.4)")
    parts = tuple(int(p) for p in m.groups() if p is not None)
    if parts < (0, 4):
        raise UsageError(f"--vllm-version {text}: kvplan follows vLLM 0.4 and newer")
    return parts


@dataclass(frozen=True)
class VllmSemantics:
    """The rules of one vLLM version that change a number kvplan prints."""

    version: Version

    @property
    def label(self) -> str:
        return ".".join(str(p) for p in self.version)

    # --- engine ------------------------------------------------------------------------------
    @property
    def engine(self) -> str:
        """V1 became the default in 0.8; V0 was removed by 0.11."""
        return "V1" if self.version >= (0, 8) else "V0"

    # --- budget --------------------------------------------------------------------------------
    @property
    def default_gpu_memory_utilization(self) -> float:
        return 0.92 if self.version >= (0, 21) else 0.90

    @property
    def requested_memory_ceil(self) -> bool:
        """``requested = ceil(total × util)`` (0.15+); before, ``total × util`` as a float."""
        return self.version >= (0, 15)

    @property
    def charges_preexisting_memory(self) -> bool:
        """0.6–0.10 charged everything already on the GPU (CUDA context, other processes)
        against the utilization budget; 0.11+ snapshot it first and leave it outside."""
        return (0, 6) <= self.version < (0, 11)

    @property
    def subtracts_cudagraph_estimate(self) -> bool:
        """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 since 0.21."""
        return self.version >= (0, 21)

    # --- KV cache sizing ---------------------------------------------------------------------
    @property
    def check_reserves_null_block(self) -> bool:
        """The admission check compares against ``available − one block`` (the null block)."""
        return self.version >= (0, 27)

    @property
    def sliding_window_uses_in_flight_tokens(self) -> bool:
        """Sliding-window layers reserve ``window − 1 + max_in_flight_tokens`` (0.27+) instead of
        ``window − 1 + max_num_batched_tokens``."""
        return self.version >= (0, 27)

    @property
    def async_scheduling_default(self) -> bool:
        return self.version >= (0, 27)

    @property
    def yarn_multiplies_max_len(self) -> bool:
        """Up to 0.27 YaRN set max_model_len = original_max_position_embeddings × factor; 0.33
        trusts max_position_embeddings (PR #56446)."""
        return self.version < (0, 33)

    @property
    def hybrid_kv_cache_manager(self) -> bool:
        """Sliding-window layers get window-sized KV (hybrid allocator) from 0.10 on; before, every
        layer was allocated for the full context."""
        return self.version >= (0, 10)

    # --- log line ------------------------------------------------------------------------------
    @property
    def capacity_log_style(self) -> str:
        v = self.version
        if v < (0, 6):
            return "v0-blocks"  # "# GPU blocks: N, # CPU blocks: M"
        if v < (0, 8):
            return "v0-concurrency"  # + "Maximum concurrency for L tokens per request: X"
        if v < (0, 11):
            return "v1-085"  # "GPU KV cache size: blocks×bs tokens" + concurrency = tokens / L
        if v < (0, 21):
            return "v1-011"  # tokens = num_blocks // groups × bs
        if v < (0, 33):
            return "v1-021"  # two lines, tokens = int(conc × L)
        return "v1-033"  # one combined line

    @property
    def per_group_blocks_per_request(self) -> bool:
        """0.27+: blocks per request = Σ over groups of cdiv(max_mem, page); 0.11–0.21 rounded the
        sum of all groups once."""
        return self.version >= (0, 27)

    @property
    def format_gib_style(self) -> str:
        """``format_gib`` (Python round, repr: '20.0', '19.87') since 0.15; '%.2f' before."""
        return "round" if self.version >= (0, 15) else "fixed"

    def gib(self, nbytes: float) -> str:
        value = nbytes / (1 << 30)
        if self.format_gib_style == "round":
            return str(round(value, 2))
        return f"{value:.2f}"


def semantics(version: str | None = None) -> VllmSemantics:
    return VllmSemantics(parse_version(version))
