"""GPU memory from NVIDIA's DCGM exporter, judged against vLLM's memory budget.

Metric names are dcgm-exporter's default counters (``etc/default-counters.csv``, checked at
NVIDIA/dcgm-exporter d5e5f51, 2026-05-12, and release 4.5.3-4.8.2): ``DCGM_FI_DEV_FB_USED``,
``DCGM_FI_DEV_FB_FREE``, ``DCGM_FI_DEV_FB_RESERVED`` (default since 4.3.1-4.4.0; older exporters
lack it) in MiB, and ``DCGM_FI_DEV_GPU_UTIL`` in %. Every series carries ``gpu``, ``UUID``,
``device``, ``modelName``, ``pci_bus_id`` and the host as ``Hostname`` (releases up to 4.5.x) or
``hostname`` (renamed on the main branch, d5e5f51); under Kubernetes the pod that holds the GPU
as ``pod``/``namespace``/``container`` -- renamed ``exported_pod``/``exported_namespace`` by
Prometheus when the ServiceMonitor keeps ``honorLabels: false`` (the exporter's Helm default).

The budget: vLLM (V1, vllm/v1/worker/gpu_worker.py) requests ``gpu_memory_utilization × total``
at start-up, where ``total`` is ``torch.cuda.mem_get_info()``'s total -- the memory the driver
does not reserve, i.e. DCGM's ``FB_USED + FB_FREE`` (``FB_RESERVED`` is outside both) -- and
sizes its KV cache to fill that budget. So a healthy server at 0.92 shows about 92 % used from
start-up on, for ever; the memory to watch is what lies *above* the budget (another process, a
leak, fragmentation, CUDA graphs an older vLLM did not count), and the free memory left.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import UsageError

FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
NAMES = (FB_USED, FB_FREE, FB_RESERVED, GPU_UTIL)
#: labels that name one GPU, in the order a summary shows them (Hostname: releases; hostname: main)
GPU_LABELS = ("Hostname", "hostname", "instance", "gpu", "UUID")
#: how the GPU rules find "the GPUs of the vLLM deployment"
JOINS = ("auto", "none", "kubernetes", "host")
MODES = ("budget", "plain", "both", "none")


@dataclass(frozen=True)
class GpuRuleOptions:
    """What the GPU-memory rules need besides the thresholds."""

    utilization: float  # vLLM's gpu_memory_utilization, the budget per GPU
    utilization_source: str  # where it came from (flag, plan file, the version's default)
    mode: str = "budget"  # budget | plain | both | none
    join: str = "auto"  # auto | none | kubernetes | host
    selector: str = ""  # extra DCGM label matchers, e.g. 'Hostname=~"gpu-.*"'

    def __post_init__(self) -> None:
        if not 0.0 < self.utilization <= 1.0:
            raise UsageError(f"gpu_memory_utilization must be in (0, 1], got {self.utilization}")
        if self.mode not in MODES:
            raise UsageError(f"--gpu-memory-rule: expected one of {', '.join(MODES)}, got {self.mode!r}")
        if self.join not in JOINS:
            raise UsageError(f"--gpu-join: expected one of {', '.join(JOINS)}, got {self.join!r}")

    def to_dict(self) -> dict:
        return {"gpu_memory_utilization": self.utilization, "source": self.utilization_source, "mode": self.mode,
                "join": self.join, "selector": self.selector}


def selector_body(text: Optional[str]) -> str:
    """``'{a="b"}'`` or ``'a="b"'`` -> ``'a="b"'`` (the braces are optional on the command line)."""
    s = (text or "").strip()
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1].strip()
    if "{" in s or "}" in s:
        raise UsageError(f"label matcher {text!r}: expected label matchers like 'namespace=\"prod\"'")
    return s


def _sel(extra: str) -> str:
    return "{" + extra + "}" if extra else ""


def used(extra: str = "") -> str:
    return f"{FB_USED}{_sel(extra)}"


def free(extra: str = "") -> str:
    return f"{FB_FREE}{_sel(extra)}"


def gpu_util(extra: str = "") -> str:
    return f"{GPU_UTIL}{_sel(extra)}"


def total(extra: str = "") -> str:
    """The total vLLM's budget multiplies: used + free (MiB), the memory the driver gives CUDA."""
    return f"({FB_USED}{_sel(extra)} + {FB_FREE}{_sel(extra)})"


def used_fraction(extra: str = "") -> str:
    return f"({used(extra)} / {total(extra)})"


def free_fraction(extra: str = "") -> str:
    return f"({FB_FREE}{_sel(extra)} / {total(extra)})"


def join(expr: str, how: str, vllm_series: str) -> str:
    """Restrict a per-GPU expression to the GPUs of the selected vLLM deployment.

    ``kubernetes``: dcgm-exporter labels each GPU with the pod that holds it; vLLM's scrape carries
    its own pod/namespace target labels. ``exported_pod``/``exported_namespace`` (honorLabels: false)
    are copied onto ``pod``/``namespace`` first, so both ServiceMonitor settings join, and the model
    name is attached (one model per pod). ``host``: the host part of ``instance`` (both exporters
    scraped on the same machine), as a filter only: one host may serve several models.
    ``auto`` (the default): the Kubernetes join for the vLLM series that carry a pod label, or the
    host join: whichever the labels allow, so a training box's GPUs never alert by default.
    """
    if how == "none":
        return expr
    if how == "auto":
        pod_series = _with_matcher(vllm_series, 'pod!=""')  # without pods, empty labels would match every GPU
        return f"({join(expr, 'kubernetes', pod_series)} or {join(expr, 'host', vllm_series)})"
    if how == "kubernetes":
        left = (f'label_replace(label_replace({expr}, "pod", "$1", "exported_pod", "(.+)"), '
                f'"namespace", "$1", "exported_namespace", "(.+)")')
        return f"({left} * on (namespace, pod) group_left (model_name) group by (namespace, pod, model_name) ({vllm_series}))"
    host = '"host", "$1", "instance", "(.+):[0-9]+"'
    return (f"(label_replace({expr}, {host}) and on (host) "
            f"group by (host) (label_replace({vllm_series}, {host})))")


def _with_matcher(series: str, matcher: str) -> str:
    """``name{a="b"}`` + ``c!=""`` -> ``name{a="b",c!=""}``."""
    if series.endswith("}"):
        return series[:-1] + ("," if not series.endswith("{}") else "") + matcher + "}"
    return f"{series}{{{matcher}}}"


#: summary text naming the GPU whichever host label the exporter version uses
GPU_NAME = "GPU {{ $labels.gpu }} on {{ $labels.Hostname }}{{ $labels.hostname }} ({{ $labels.instance }})"


# --------------------------------------------------------------------------- the budget's source
def utilization_from_file(path: str) -> tuple[float, str]:
    """gpu_memory_utilization from ``kvplan plan --format json`` output (``flags``) or a vLLM serve
    config (``vllm serve --config``: YAML keys ``gpu-memory-utilization`` / ``gpu_memory_utilization``)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--plan {p}: {exc.strerror or exc}") from None
    data = None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--plan {p}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        flags = data.get("flags") if isinstance(data, dict) else None
        value = flags.get("gpu_memory_utilization") if isinstance(flags, dict) else None
        if value is None and isinstance(data, dict):
            value = data.get("gpu_memory_utilization", data.get("gpu-memory-utilization"))
        where = "flags.gpu_memory_utilization"
    else:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.MarkedYAMLError as exc:
            line = exc.problem_mark.line + 1 if exc.problem_mark is not None else "?"
            raise UsageError(f"--plan {p}:{line}: not valid YAML ({exc.problem})") from None
        except yaml.YAMLError as exc:
            raise UsageError(f"--plan {p}: not valid YAML ({exc})") from None
        value = None
        if isinstance(data, dict):
            value = data.get("gpu-memory-utilization", data.get("gpu_memory_utilization"))
        where = "gpu-memory-utilization"
    if value is None:
        raise UsageError(f"--plan {p}: no {where} (expected kvplan plan --format json output or a vllm serve "
                         "config); pass --gpu-memory-utilization")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < float(value) <= 1:
        raise UsageError(f"--plan {p}: {where} is {value!r}, expected a number in (0, 1]")
    return float(value), f"{where} in {p}"


def resolve_utilization(flag: Optional[float], plan_path: Optional[str], vllm_version: Optional[str]) -> tuple[float, str]:
    """The budget: --gpu-memory-utilization, else the plan / serve config, else the version's default."""
    if flag is not None:
        if not 0 < flag <= 1:
            raise UsageError(f"--gpu-memory-utilization must be in (0, 1], got {flag}")
        if plan_path:
            utilization_from_file(plan_path)  # still validated: a broken file is an error
        return float(flag), "--gpu-memory-utilization"
    if plan_path:
        return utilization_from_file(plan_path)
    from ..memory.semantics import semantics

    sem = semantics(vllm_version)
    return sem.default_gpu_memory_utilization, f"vLLM {sem.label}'s default"
