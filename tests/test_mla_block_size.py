"""The KV block size of vLLM's MLA backends per version and GPU (VllmSemantics.mla_block_size, read
in the wheels' platforms/cuda.py), checked against the logs that show it: with a log's measured KV
memory as input, kvplan's block count must be the log's own."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import plan_accuracy_sweep as sweep

from kvplan.hardware import GIB
from kvplan.memory import plan
from kvplan.memory.semantics import semantics


@pytest.mark.parametrize("version, sm, kv_dtype, qk_nope, expected", [
    ("0.7.3", 90, "auto", 128, 16),     # no FlashMLA yet
    ("0.9.2", 90, "auto", 128, 64),     # FlashMLA forced on Hopper
    ("0.9.2", 100, "auto", 128, 16),    # no CUTLASS MLA before 0.10.1
    ("0.11.0", 100, "auto", 128, 128),  # CUTLASS MLA on 10.0
    ("0.12.0", 103, "auto", 128, 16),   # is_device_capability(100): 10.0 only
    ("0.13.0", 103, "auto", 128, 128),  # the SM100 family
    ("0.16.0", 100, "auto", 128, 64),   # FlashInfer MLA, forced from 16 to 64
    ("0.16.0", 100, "auto", 64, 128),   # its kernel needs qk_nope_head_dim 128: CUTLASS
    ("0.17.0", 90, "auto", 128, 64),
    ("0.18.0", 90, "auto", 128, 16),    # FLASH_ATTN_MLA's preferred size
    ("0.19.0", 90, "fp8", 128, 64),     # FA-MLA takes no fp8 KV: FlashMLA
    ("0.19.0", 100, "auto", 128, 32),   # FLASHINFER_MLA [32, 64]
    ("0.19.0", 89, "auto", 128, 16),    # Triton MLA
])
def test_the_mla_backend_block_size_per_version_and_gpu(version, sm, kv_dtype, qk_nope, expected):
    assert semantics(version).mla_block_size(sm, kv_dtype, qk_nope) == expected


def test_deepseek_v2_lite_on_0_19_hopper_takes_16_token_blocks_as_its_log_shows():
    """llm-d-planner's DeepSeek-V2-Lite-Chat run (0.19.0, one H100): 43.61 GiB of KV memory and
    1,505,552 tokens. 1,505,552 / 64 is not an integer; with 16-token blocks the printed memory
    allows 94,080-94,102 blocks and the token line says 94,097."""
    row = next(r for r in sweep.sweep_rows() if r["model"] == "deepseek-ai/DeepSeek-V2-Lite-Chat")
    req = sweep.plan_request(row, sweep.spec_for(row))
    kv = int(row["kv_cache_memory_min_gib"] * GIB)
    r = plan(replace(req, kv_cache_memory_bytes=kv, kv_memory_source="log"), what_ifs=False)
    assert r.kv.block_size == 16
    half = int(0.005 * GIB)
    assert (kv - half) // r.kv.bytes_per_block <= int(row["kv_cache_tokens"]) // 16 <= (kv + half) // r.kv.bytes_per_block
