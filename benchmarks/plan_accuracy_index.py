"""Benchmark cases built from tests/fixtures/vllm_logs/index.json, so a new public log needs no code.

Every index entry numbered 101 or above becomes one plan_accuracy case, read from its own fields:

- model: ``model`` when it is in kvplan's catalog; otherwise ``config_fields`` holds the config.json
  values (every key except ``source`` / ``unsure`` / ``base_model``); ``config_fields.base_model``
  names a catalog model whose config the fields override (for example a quantized variant that only
  adds ``quantization_config``);
- GPU: the total memory the log prints (``expected.total_gpu_memory_gib``, the V0 profile line, or
  ``expected.gpu_total_capacity_gib`` from a CUDA OOM message) when there is one; else ``gpu_memory_gib``
  for a GPU kvplan's catalog lacks (inferred as ``gpu_note`` says); else ``gpu`` looked up in kvplan's
  GPU catalog (``NVIDIA H100 80GB HBM3`` -> ``H100-SXM5-80GB``);
- version / engine / flags: ``vllm_version`` as the log states it (first three parts: what a user types),
  ``engine``, and ``flags`` restricted to what PlanRequest takes. Where the log's own file:line tags show
  that a vendor build runs another upstream version's code, ``planned_as_version`` (with
  ``planned_as_version_note`` saying how) is a what-if plan_accuracy prints apart, not scored;
- family: from ``case_types`` (multimodal / MLA / MoE / quantized / dense).

Entries marked ``estimate_excluded`` (with the reason) are shown but not scored, like log 05 in
plan_accuracy.UNPREDICTABLE. None of these logs is a development-set log: nothing is fitted to them.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from kvplan.hardware import GIB, custom_gpu, find_gpu
from kvplan.memory import PlanRequest
from kvplan.models import load_model

LOGS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "vllm_logs"
FIRST_INDEX_CASE = 101
_PLAN_FIELDS = {f.name for f in dataclasses.fields(PlanRequest)} - {"model", "gpu", "vllm_version", "engine"}
_NOT_CONFIG = {"source", "unsure", "base_model"}


def _model(entry: dict):
    fields = {k: v for k, v in (entry.get("config_fields") or {}).items() if k not in _NOT_CONFIG}
    base = (entry.get("config_fields") or {}).get("base_model")
    if base:
        return {**load_model(base).raw, **fields}
    if entry.get("model") and not fields.get("architectures"):
        load_model(entry["model"])  # a catalog id; otherwise config_fields must carry the config (clear error here)
        return entry["model"]
    return fields


def _gpu(entry: dict):
    exp = entry.get("expected", {})
    for key in ("total_gpu_memory_gib", "gpu_total_capacity_gib"):
        if exp.get(key):
            return float(exp[key])
    if entry.get("gpu_memory_gib"):  # a GPU kvplan's catalog lacks; gpu_note says how it was inferred
        return float(entry["gpu_memory_gib"])
    name = re.sub(r"\b(NVIDIA|GeForce|Tesla)\b", "", entry["gpu"]).strip()
    return name


def vendor_builds() -> dict[str, tuple[str, str]]:
    """{prefix: (the upstream version the build's code matches, how the log shows it)}: the what-if
    of a vendor build planned with the rules its code runs (inferred from file:line tags, not stated)."""
    out = {}
    for entry in json.loads((LOGS / "index.json").read_text()):
        if entry.get("planned_as_version"):
            out[entry["file"].split("-", 1)[0]] = (_version({"vllm_version": entry["planned_as_version"]}),
                                                   entry.get("planned_as_version_note", ""))
    return out


def _version(entry: dict) -> str | None:
    v = entry.get("vllm_version")
    if not v:
        return None
    return ".".join(re.match(r"[0-9.]+", v).group(0).strip(".").split(".")[:3])


def family(entry: dict) -> str:
    types = " ".join(entry.get("case_types", [])).lower()
    parts = [label for word, label in (("multimodal", "multimodal"), ("mla", "MLA"), ("moe", "MoE")) if word in types]
    if any(q in types for q in ("awq", "gptq", "fp8", "int4", "int8", "w8a8", "w4a16", "quantized", "mxfp4",
                                "compressed-tensors", "bitsandbytes")):
        parts.append("quantized")
    return " ".join(parts) or "dense"


def resolve_gpu(gpu):
    return custom_gpu(int(gpu * GIB), f"{gpu} GiB") if isinstance(gpu, float) else find_gpu(gpu)


# Measured KV memory printed only inside an error message the startup-log parser does not read
# (0.8.x wrote "GB"): taken from index.json's expected figures instead.
MEASURED_KEYS = ("available_kv_cache_gib_error_line",)


def index_cases() -> tuple[list[tuple], dict[str, str], dict[str, float]]:
    """(cases in plan_accuracy.CASES' shape, {prefix: reason} for entries shown but not scored,
    {prefix: measured GiB} for logs whose measurement the parser cannot read)."""
    cases, excluded, measured = [], {}, {}
    for entry in json.loads((LOGS / "index.json").read_text()):
        prefix = entry["file"].split("-", 1)[0]
        if not prefix.isdigit() or int(prefix) < FIRST_INDEX_CASE:
            continue
        flags = {k: v for k, v in entry.get("flags", {}).items() if k in _PLAN_FIELDS}
        cases.append((prefix, _model(entry), _gpu(entry), _version(entry), entry.get("engine"), flags, family(entry)))
        if entry.get("estimate_excluded"):
            excluded[prefix] = entry["estimate_excluded"]
        for key in MEASURED_KEYS:
            if key in entry.get("expected", {}):
                measured[prefix] = float(entry["expected"][key])
    return cases, excluded, measured
