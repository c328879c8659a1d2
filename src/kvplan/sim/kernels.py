"""Measured vLLM kernel speeds per GPU (``kvplan/hardware/kernels/<gpu>.json``, distilled from
NVIDIA AIConfigurator's vLLM database by ``scripts/distill_kernel_tables.py``, Apache-2.0), and
their lookups: GEMM efficiency interpolated in log (m, n, k), attention kernel fits, vLLM's
custom all-reduce latency, the fused-MoE grouped-GEMM factor and 4-bit weight-only speed ratios.

Plain JSON and the standard library only (no numpy or parquet at run time); loaded lazily, once
per GPU, only when a step-time model for a GPU is built.
"""
from __future__ import annotations

import bisect
import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Optional

KERNEL_DIR = Path(__file__).resolve().parents[1] / "hardware" / "kernels"
KERNEL_FORMAT = "kvplan-kernel-table/1"

#: Weight bytes per parameter of the GEMM dtypes the tables measure.
WEIGHT_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5625}


@lru_cache(maxsize=None)
def available() -> tuple[str, ...]:
    """Catalog names of the GPUs with measured kernel tables."""
    return tuple(sorted(p.stem for p in KERNEL_DIR.glob("*.json")))


@lru_cache(maxsize=None)
def load_table(gpu_name: str) -> dict:
    path = KERNEL_DIR / f"{gpu_name}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != KERNEL_FORMAT:  # pragma: no cover - shipped files are checked by tests
        raise ValueError(f"{path}: not a {KERNEL_FORMAT} file")
    return data


def nearest_measured(gpu) -> tuple[str, bool]:
    """(table name, exact): the GPU's own table, else the measured GPU of the same architecture
    with the closest bandwidth (efficiencies transfer within an architecture far better than
    absolute times), else the closest bandwidth overall."""
    names = available()
    if gpu.name in names:
        return gpu.name, True
    from .kernel_transfer import transfer_for

    transfer = transfer_for(gpu.name)
    if transfer is not None and transfer.reference in names:
        return transfer.reference, False  # the table its kernel measurements were compared with
    arch_of = {"A100-SXM4-80GB": "ampere", "H100-SXM5-80GB": "hopper", "H200-141GB": "hopper", "L40S": "ada",
               "B200-180GB": "blackwell"}
    bw = gpu.bandwidth_gbs or 1000.0
    same = [n for n in names if arch_of.get(n) == (gpu.arch or "")]
    pool = same or list(names)

    def dist(n: str) -> float:
        return abs(math.log(load_table(n)["peaks"]["bandwidth_gbs"] / bw))

    return min(pool, key=dist), False


def _interp(xs: list, x: float) -> tuple[int, float]:
    """Index i and weight w such that x ≈ xs[i]·(1-w) + xs[i+1]·w (xs ascending, log values); clamped."""
    if x <= xs[0]:
        return 0, 0.0
    if x >= xs[-1]:
        return len(xs) - 2, 1.0
    i = bisect.bisect_right(xs, x) - 1
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


class GemmTable:
    """GEMM time from the measured efficiency grid: roofline(m, n, k) / efficiency(m, n, k)."""

    def __init__(self, gemm: dict, bw: float, bf16_flops: float, fp8_flops: float):
        self.lm = [math.log(m) for m in gemm["m"]]
        self.ln = [math.log(n) for n in gemm["n"]]
        self.lk = [math.log(k) for k in gemm["k"]]
        self.eff = {dt: [math.exp(-v / 200.0) for v in grid] for dt, grid in gemm["neg_ln_eff_x200"].items()}
        self.bw, self.f16, self.f8 = bw, bf16_flops, fp8_flops

    def dtype(self, want: str) -> str:
        if want in self.eff:
            return want
        if want == "fp8_block" and "fp8" in self.eff:
            return "fp8"
        return "bfloat16"

    def efficiency(self, m: float, n: float, k: float, dtype: str) -> float:
        grid = self.eff[dtype]
        nn, nk = len(self.ln), len(self.lk)
        i, wi = _interp(self.lm, math.log(max(m, 1.0)))
        j, wj = _interp(self.ln, math.log(n))
        l, wl = _interp(self.lk, math.log(k))
        acc = 0.0
        for di, a in ((0, 1 - wi), (1, wi)):
            if a == 0.0:
                continue
            for dj, b in ((0, 1 - wj), (1, wj)):
                if b == 0.0:
                    continue
                base = ((i + di) * nn + j + dj) * nk + l
                acc += a * b * ((1 - wl) * grid[base] + wl * grid[base + 1])
        return max(acc, 1e-5)

    def weight_only_time(self, m: float, n: float, k: float, weight_bytes: float, compute_share: float) -> float:
        """A mixed-input (weight-only) GEMM such as Marlin W8A16 / W4A16: the weights streamed at
        ``weight_bytes`` per element and dequantized to 16 bit on the fly, the product on the 16-bit
        tensor cores at ``compute_share`` of their rate (the dequantization takes issue slots), both
        at the efficiency this table measured for the bf16 GEMM of the same shape."""
        mem = (n * k * weight_bytes + (m * k + m * n) * 2.0) / self.bw
        compute = 2.0 * m * n * k / (self.f16 * compute_share)
        return max(mem, compute) / self.efficiency(m, n, k, "bfloat16")

    def time(self, m: float, n: float, k: float, dtype: str = "bfloat16") -> float:
        dt = self.dtype(dtype)
        wb = WEIGHT_BYTES.get(dtype, WEIGHT_BYTES[dt])
        flops = self.f16 if dt == "bfloat16" else self.f8
        roof = max((n * k * wb + (m * k + m * n) * 2.0) / self.bw, 2.0 * m * n * k / flops)
        return roof / self.efficiency(m, n, k, dt)


class PerTokens:
    """A measured factor per token count (log-interpolated; None entries skipped)."""

    def __init__(self, tokens: list, values: list, default: float = 1.0):
        pts = [(math.log(t), v) for t, v in zip(tokens, values) if v is not None]
        self.lx = [p[0] for p in pts]
        self.v = [p[1] for p in pts]
        self.default = default

    def __call__(self, m: float) -> float:
        if not self.v:
            return self.default
        if len(self.v) == 1:
            return self.v[0]
        i, w = _interp(self.lx, math.log(max(m, 1.0)))
        return self.v[i] * (1 - w) + self.v[i + 1] * w


class AllReduce:
    """vLLM's custom all-reduce latency (seconds) per message size, log-log interpolated."""

    def __init__(self, ar: dict, tp: int, graph: bool, transfer=None):
        #: a GPU borrowing the table: its measured share of the large messages' bandwidth (kernel_transfer)
        self.transfer = transfer
        per = ar.get("graph" if graph else "eager") or ar.get("graph") or {}
        key = str(tp) if str(tp) in per else (max(per, key=int) if per else None)
        self.lx = [math.log(b) for b in ar.get("message_bytes", [])]
        self.ly = [math.log(v) for v in per[key]] if key else []
        self.scale = 1.0 if key is None or int(key) == tp else (2 * (tp - 1) / tp) / (2 * (int(key) - 1) / int(key))

    def __call__(self, nbytes: float) -> float:
        if self.transfer is not None:
            return self._table(nbytes) * self.transfer.allreduce_factor(nbytes)
        return self._table(nbytes)

    def _table(self, nbytes: float) -> float:
        if not self.ly:
            return 0.0
        i, w = _interp(self.lx, math.log(max(nbytes, 1.0)))
        x = math.log(max(nbytes, 1.0))
        if x > self.lx[-1]:  # beyond the table: bandwidth-bound, linear in bytes
            return math.exp(self.ly[-1]) * nbytes / math.exp(self.lx[-1]) * self.scale
        return math.exp(self.ly[i] * (1 - w) + self.ly[i + 1] * w) * self.scale


def attention_fit(table: dict, kv_dtype: str, head_dim: int) -> tuple[dict, str]:
    """The decode/prefill attention fits nearest to (KV dtype, head dim), and which one was used."""
    att = table["attention"]
    want = "fp8" if kv_dtype.startswith("fp8") else "bfloat16"
    keys = list(att)
    exact = f"{want}/{head_dim}"
    if exact in att:
        return att[exact], exact
    same = [k for k in keys if k.startswith(want + "/")] or keys
    key = min(same, key=lambda k: abs(int(k.split("/")[1]) - head_dim))
    return att[key], key


def peak_rates(table: dict, gpu, transfer=None) -> tuple[float, float, float, float]:
    """(stream bytes/s, GEMM bytes/s, bf16 FLOP/s, fp8 FLOP/s) the clock times ``gpu`` at: its own
    catalog peaks (a fallback GPU's missing figure: the table's GPU's), times ``transfer``'s shares
    (:class:`kvplan.sim.kernel_transfer.Transfer`) for a GPU borrowing ``table`` with measured kernels."""
    bw = (gpu.bandwidth_gbs or table["peaks"]["bandwidth_gbs"]) * 1e9
    f16 = (gpu.bf16_tflops or table["peaks"]["bf16_tflops"]) * 1e12
    f8 = (gpu.fp8_tflops or table["peaks"].get("fp8_tflops") or gpu.bf16_tflops or table["peaks"]["bf16_tflops"]) * 1e12
    if transfer is None:
        return bw, bw, f16, f8
    return (bw * transfer.stream, bw * transfer.gemm_memory, f16 * transfer.compute_share("bfloat16"),
            f8 * transfer.compute_share("fp8"))


def gemm_table_for(table: dict, gpu, compute_scale: float = 1.0, transfer=None) -> GemmTable:
    """Efficiencies from ``table``, peaks of ``gpu`` (:func:`peak_rates`: a fallback GPU gets the
    nearest measured GPU's efficiencies at its own bandwidth and FLOP/s, scaled by ``transfer`` where
    its kernels are measured); ``compute_scale``: the share of the measured compute rate a GPU
    sustains while serving (1: the table's)."""
    _stream, bw, f16, f8 = peak_rates(table, gpu, transfer)
    return GemmTable(table["gemm"], bw, f16 * compute_scale, f8 * compute_scale)


def physical_prefill_fit(table_name: str, kv_dtype: str, head_dim: int) -> tuple[dict, str]:
    """The prefill attention fit nearest to (KV dtype, head dim) whose FLOP efficiency is physical
    (at most the peak): a fit above the peak (H200's rows of AIConfigurator's table, whose latencies
    do not grow with the FLOPs: 34 % median fit error) is a failed fit, so the same architecture's
    other GPU's fit stands in, else this GPU's other KV dtype, else the default (0.5 of peak).
    Returns (fit, where it came from)."""
    def ok(fit: dict) -> bool:
        return 0.0 < (fit.get("flops_eff") or 0.0) <= 1.0

    att, key = attention_fit(load_table(table_name), kv_dtype, head_dim)
    if ok(att["prefill"]):
        return att["prefill"], f"{table_name} {key}"
    for other in same_arch_tables(table_name):
        o_att, o_key = attention_fit(load_table(other), kv_dtype, head_dim)
        if ok(o_att["prefill"]):
            return o_att["prefill"], f"{other} {o_key}"
    for o_key, o_att in load_table(table_name)["attention"].items():
        if ok(o_att["prefill"]):
            return o_att["prefill"], f"{table_name} {o_key}"
    return {"c0_s": att["prefill"].get("c0_s") or 1e-5, "flops_eff": 0.5, "per_token_head_s": 0.0}, "default 0.5"


def weight_only_ratio(table: dict, kind: str) -> Optional[PerTokens]:
    r = table.get("weight_only", {}).get("ratio_to_bf16", {}).get(kind)
    if not r:
        return None
    return PerTokens(table["weight_only"]["tokens"], r)


def moe_factor(table: dict, dtype: str) -> PerTokens:
    f = table.get("moe", {}).get("grouped_factor", {})
    vals = f.get(dtype) or f.get("bfloat16") or []
    return PerTokens(table.get("moe", {}).get("tokens", []), vals, default=1.0)


AIC_MOE_DTYPE = {"bfloat16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block", "int4": "int4_wo",
                 "mxfp4": "w4a16_mxfp4", "nvfp4": "nvfp4"}


def moe_direct(table: dict, kind: str, hidden: int, inter: float, experts: int, topk: int) -> Optional[PerTokens]:
    """The fused-MoE latency measured on exactly this shape and dtype (seconds per layer against
    tokens), or None."""
    want = AIC_MOE_DTYPE.get(kind)
    for d in table.get("moe", {}).get("direct", ()):
        if (d["dtype"] == want and d["hidden"] == hidden and abs(d["inter"] - inter) < 1 and d["experts"] == experts
                and d["topk"] == topk):
            return PerTokens(d["tokens"], d["latency_s"], default=0.0)
    return None


def moe_direct_nearest_width(table: dict, kind: str, hidden: int, inter: float, experts: int,
                              topk: int) -> Optional[tuple[float, PerTokens]]:
    """The measured fused-MoE curve of this (dtype, hidden, experts, top-k) at the expert width
    nearest ``inter`` (log distance) and that width, or None: a per-rank width the table lacks
    (the same model at another TP) is scaled from its neighbour."""
    want = AIC_MOE_DTYPE.get(kind)
    rows = [d for d in table.get("moe", {}).get("direct", ())
            if d["dtype"] == want and d["hidden"] == hidden and d["experts"] == experts and d["topk"] == topk]
    if not rows:
        return None
    d = min(rows, key=lambda r: abs(math.log(r["inter"] / inter)))
    return float(d["inter"]), PerTokens(d["tokens"], d["latency_s"], default=0.0)


def same_arch_tables(name: str) -> list[str]:
    arch = {"A100-SXM4-80GB": "ampere", "H100-SXM5-80GB": "hopper", "H200-141GB": "hopper", "L40S": "ada",
            "B200-180GB": "blackwell"}
    return [n for n in available() if n != name and arch.get(n) == arch.get(name)]
