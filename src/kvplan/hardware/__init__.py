"""GPU catalog: memory as CUDA reports it, bandwidth, peak TFLOP/s and interconnect."""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from ..errors import UnknownGpuError, UsageError

GIB = 1 << 30


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: int  # total as cudaMemGetInfo reports it
    marketing_gb: Optional[float] = None
    bandwidth_gbs: Optional[float] = None
    bf16_tflops: Optional[float] = None
    fp8_tflops: Optional[float] = None
    interconnect: Optional[str] = None
    interconnect_gbs: Optional[float] = None
    arch: Optional[str] = None
    sm: Optional[int] = None  # compute capability x 10 (90 = Hopper)
    aliases: tuple[str, ...] = ()
    #: streaming multiprocessors (CUs on AMD): kernels that size a buffer per SM need it
    multiprocessors: Optional[int] = None

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def supports_fp8(self) -> bool:
        return (self.sm or 0) >= 89 or self.arch in ("cdna3", "cdna4")

    @property
    def nvswitch_multicast(self) -> bool:
        """Whether the GPU sits on an NVSwitch (HGX / SXM boards: NVLink 4 and 5), where the CUDA
        driver offers multicast objects; PCIe cards and NVLink-bridge pairs do not."""
        return bool(self.interconnect) and self.interconnect.startswith(("NVLink 4", "NVLink 5"))


def _norm(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower()).removeprefix("nvidia-")


@lru_cache(maxsize=1)
def catalog() -> tuple[Gpu, ...]:
    data = json.loads(Path(__file__).with_name("gpus.json").read_text(encoding="utf-8"))
    out = []
    for g in data["gpus"]:
        out.append(Gpu(
            name=g["name"], memory_bytes=int(round(g["memory_gib"] * GIB)),
            marketing_gb=g.get("marketing_gb"), bandwidth_gbs=g.get("bandwidth_gbs"),
            bf16_tflops=g.get("bf16_tflops") or g.get("fp16_tflops"), fp8_tflops=g.get("fp8_tflops"),
            interconnect=g.get("interconnect"), interconnect_gbs=g.get("interconnect_gbs"),
            arch=g.get("arch"), sm=g.get("sm"), aliases=tuple(g.get("aliases", ())),
            multiprocessors=g.get("multiprocessors"),
        ))
    return tuple(out)


def find_gpu(name: str) -> Gpu:
    key = _norm(name)
    keys: dict[str, Gpu] = {}
    for gpu in catalog():
        for k in (gpu.name, *gpu.aliases):
            keys.setdefault(_norm(k), gpu)
    if key in keys:
        return keys[key]
    raise UnknownGpuError(name, [keys[k].name for k in difflib.get_close_matches(key, list(keys), n=4, cutoff=0.5)])


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": GIB, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "ki": 1 << 10, "m": 10**6, "mb": 10**6,
          "mib": 1 << 20, "mi": 1 << 20, "g": 10**9, "gb": 10**9, "gib": GIB, "gi": GIB, "t": 10**12,
          "tb": 10**12, "tib": 1 << 40, "ti": 1 << 40}


def parse_size(text: str, what: str = "size") -> int:
    """'24GiB', '80GB', '79.19' (GiB when unitless) -> bytes."""
    m = _SIZE.match(str(text))
    if not m:
        raise UsageError(f"{what}: cannot read {text!r} as a memory size (e.g. 24GiB, 80GB, 79.19)")
    value, unit = float(m.group(1)), (m.group(2) or "").lower()
    return int(round(value * _UNITS[unit]))


_LABEL = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(g|gb|t|tb)\s*$", re.IGNORECASE)


def read_gpu_memory(text: str, what: str = "--gpu-memory") -> tuple[int, Optional[str]]:
    """A GPU's total memory as users write it, in bytes as CUDA would report it, and how the text
    was read (None when it was exact). ``GiB``, ``MiB``, bytes and a bare number (GiB) are exact.
    ``GB`` (or ``G``, ``TB``) is read as the size a card is *sold* as: a "24 GB" card has 24 GiB of
    memory, of which CUDA reports less (23.64 GiB on an RTX 4090, 22.03 on an L4). The catalog's
    cards of that size give the figure: the least of them, so that a start/fail verdict errs on the
    safe side; for a size no catalog card has, the marketed GiB times the median share CUDA reports
    on the catalog's cards."""
    m = _LABEL.match(str(text))
    if not m:
        return parse_size(text, what), None
    sold = float(m.group(1)) * (1000 if m.group(2).lower().startswith("t") else 1)
    cards = sorted((g for g in catalog() if g.marketing_gb == sold), key=lambda g: g.memory_bytes)
    if cards:
        least = cards[0]
        listed = ", ".join(f"{g.name} {g.memory_gib:.2f}" for g in cards)
        return least.memory_bytes, (
            f"{what} {text} read as a card sold as {sold:g} GB: {least.memory_gib:.2f} GiB, what CUDA reports on "
            f"the {least.name}, the least of the catalog's {sold:g} GB cards ({listed} GiB); name the card with "
            "--gpu, or give the size CUDA reports in GiB, for exact blocks.")
    shares = sorted(g.memory_gib / g.marketing_gb for g in catalog() if g.marketing_gb)
    share = shares[len(shares) // 2]
    nbytes = int(sold * share * GIB)
    return nbytes, (f"{what} {text} read as a card sold as {sold:g} GB ({sold:g} GiB of memory): "
                    f"{nbytes / GIB:.2f} GiB as CUDA would report it ({share:.1%} of it, the median of the catalog's "
                    "cards); give the size CUDA reports in GiB for exact blocks.")


def custom_gpu(memory_bytes: int, name: str = "custom") -> Gpu:
    return Gpu(name=name, memory_bytes=memory_bytes)


__all__ = ["Gpu", "GIB", "catalog", "find_gpu", "parse_size", "read_gpu_memory", "custom_gpu"]
