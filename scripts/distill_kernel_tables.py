#!/usr/bin/env python3
"""Distil NVIDIA AIConfigurator's vLLM-measured kernel database into kvplan's compact per-GPU
kernel tables (``src/kvplan/hardware/kernels/<gpu>.json``), read by :mod:`kvplan.sim.kernels`.

Source: github.com/ai-dynamo/aiconfigurator (Apache-2.0, (c) NVIDIA),
``aic-core/src/aiconfigurator_core/systems/data/<system>/{gemm,attention,comm,moe}/vllm/<version>/*.parquet``:
kernel latencies measured inside a real vLLM install (GEMM per (m, n, k, dtype), FlashAttention
decode per (batch, KV length, heads), prefill per (batch, prompt length, heads), vLLM's custom
all-reduce per (TP, message size, CUDA graph or eager), fused MoE per (tokens, shape, dtype)).

What is kept (a few tens of KB per GPU):
- ``gemm``: efficiency (roofline time / measured time; roofline = max(bytes / peak bandwidth,
  FLOPs / dense peak), peaks from kvplan's GPU catalog) on a grid m x n x k per weight dtype;
  kvplan interpolates it in log space, so any (m, n, k) has a time.
- ``weight_only``: measured time ratio of 4-bit weight-only MoE kernels (Marlin int4, MXFP4) to the
  bf16 fused MoE on the same shapes, per token count: the speed of AWQ/GPTQ/MXFP4 weights.
- ``moe``: grouped-GEMM factor = fused-MoE time / (the GEMM table's time for the same expert GEMMs
  at the expected number of distinct experts), per token count and dtype.
- ``attention``: linear fits (least squares on relative error) of the decode kernel
  ``t = c0 + c_seq*batch + bytes/(eff*BW) + c_head*batch*heads`` and of the prefill kernel
  ``t = c0 + FLOPs/(eff*F) + c_head*tokens*heads`` per KV dtype, with their fit errors.
- ``allreduce``: vLLM custom all-reduce latency per TP and message size, graph and eager.

Run (needs pyarrow and numpy, which kvplan itself never imports at run time):

    python scripts/distill_kernel_tables.py --aic /path/to/aiconfigurator-git-dir [--commit SHA]

``--aic`` is a git directory (a bare mirror is fine): the parquet blobs are read with
``git show <commit>:<path>``. Re-running on the same commit rewrites identical files (with the same
numpy: another numpy's least squares can move an attention fit's last digit, as H200's fp8/64
prefill ``flops_eff`` 408.7526 -> 408.7527 with numpy 2.x in session 8; the shipped file was kept).
"""
from __future__ import annotations

import argparse
import io
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "kvplan" / "hardware" / "kernels"
DATA = "aic-core/src/aiconfigurator_core/systems/data"

#: (AIC system, vLLM version of its kernels, kvplan catalog GPU). One version per GPU: the newest
#: with every table measured (not a reuse alias) closest to the vLLM versions users run today.
SYSTEMS = [
    ("a100_sxm", "0.14.0", "A100-SXM4-80GB"),
    ("h100_sxm", "0.19.0", "H100-SXM5-80GB"),
    ("h200_sxm", "0.19.0", "H200-141GB"),
    ("l40s", "0.14.0", "L40S"),
    ("b200_sxm", "0.19.0", "B200-180GB"),
]
#: Fused-MoE dtypes a GPU's chosen version did not measure, taken from another version of the same
#: GPU's table: (AIC system, version, moe_dtype, substring of kernel_source). H100 at 0.19.0 has no
#: MXFP4 MoE; 0.24.0 measured gpt-oss's shapes on the kernel vLLM 0.19 runs there (0.19 vendors
#: triton_kernels, so select_mxfp4_moe_backend picks TRITON, OAITritonExperts, on SM 9.0).
MOE_SUPPLEMENTS = [("h100_sxm", "0.24.0", "w4a16_mxfp4", "gptossmxfp4moe_triton")]
M_GRID = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
NK_GRID = [64, 128, 256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 65536]
WEIGHT_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5625}
MOE_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def git_blob(gitdir: str, commit: str, path: str) -> bytes | None:
    try:
        return subprocess.run(["git", "--git-dir", gitdir, "show", f"{commit}:{path}"], check=True,
                              capture_output=True).stdout
    except subprocess.CalledProcessError:
        return None


def rows(gitdir: str, commit: str, system: str, family: str, version: str, table: str) -> list[dict]:
    import pyarrow.parquet as pq

    blob = git_blob(gitdir, commit, f"{DATA}/{system}/{family}/vllm/{version}/{table}.parquet")
    if blob is None:
        return []
    return pq.read_table(io.BytesIO(blob)).to_pylist()


def roofline_gemm(m: int, n: int, k: int, dtype: str, bw: float, flops: float) -> float:
    wb = WEIGHT_BYTES[dtype]
    mem = (n * k * wb + (m * k + m * n) * 2.0) / bw
    return max(mem, 2.0 * m * n * k / flops)


def peaks(gpu: dict, dtype: str) -> tuple[float, float]:
    bw = gpu["bandwidth_gbs"] * 1e9
    f = gpu["bf16_tflops"] * 1e12
    if dtype != "bfloat16" and gpu.get("fp8_tflops"):
        f = gpu["fp8_tflops"] * 1e12
    return bw, f


def distil_gemm(rs: list[dict], gpu: dict) -> dict:
    by: dict = {}
    for r in rs:
        by[(r["gemm_dtype"], r["m"], r["n"], r["k"])] = min(r["latency"], by.get((r["gemm_dtype"], r["m"], r["n"], r["k"]), math.inf))
    dtypes = sorted({k[0] for k in by if k[0] in WEIGHT_BYTES})
    ms = [m for m in M_GRID if ("bfloat16", m, 4096, 4096) in by]
    out = {"m": ms, "n": NK_GRID, "k": NK_GRID, "neg_ln_eff_x200": {}}
    for dt in dtypes:
        bw, f = peaks(gpu, dt)
        grid = []
        for m in ms:
            for n in NK_GRID:
                for k in NK_GRID:
                    lat = by.get((dt, m, n, k))
                    if lat is None:  # fp8_block has no tiny shapes: filled from the nearest cell below
                        grid.append(None)
                        continue
                    eff = roofline_gemm(m, n, k, dt, bw, f) / (lat * 1e-3)
                    grid.append(int(round(-math.log(min(max(eff, 1e-6), 1.5)) * 200)))  # -ln(eff)·200: 0.5 % steps
        # fill holes (None / -1) with the nearest filled cell along k, then n
        _fill(grid, len(ms), len(NK_GRID))
        out["neg_ln_eff_x200"][dt] = grid
    return out


def _fill(grid: list, nm: int, nk: int) -> None:
    def idx(i, j, l):
        return (i * nk + j) * nk + l
    for i in range(nm):
        for j in range(nk):
            for l in range(nk):
                if grid[idx(i, j, l)] is None:
                    best = None
                    for d in range(1, nk):
                        for jj, ll in ((j, l + d), (j, l - d), (j + d, l), (j - d, l), (j + d, l + d), (j - d, l - d)):
                            if 0 <= jj < nk and 0 <= ll < nk:
                                v = grid[idx(i, jj, ll)]
                                if v is not None:
                                    best = v
                                    break
                        if best is not None:
                            break
                    grid[idx(i, j, l)] = best if best is not None else 139


def gemm_time_from(table: dict, gpu: dict, dt: str, m: float, n: int, k: int) -> float:
    """The runtime's interpolation (kept identical to kvplan.sim.kernels, for the MoE factor)."""
    sys.path.insert(0, str(ROOT / "src"))
    from kvplan.sim.kernels import GemmTable

    g = GemmTable(table, gpu["bandwidth_gbs"] * 1e9, gpu["bf16_tflops"] * 1e12,
                  (gpu.get("fp8_tflops") or gpu["bf16_tflops"]) * 1e12)
    return g.time(m, n, k, dt)


def distil_moe(rs: list[dict], gemm: dict, gpu: dict) -> tuple[dict, dict]:
    """Grouped-GEMM factor per token count and dtype, and the weight-only 4-bit speed ratios."""
    import numpy as np

    # balanced routing where measured; A100/L40S only have power-law routing (1.01 is the nearest)
    dists = {r["distribution"] for r in rs}
    dist = "balanced" if "balanced" in dists else "power_law_1.01"
    sel = [r for r in rs if r["moe_tp_size"] == 1 and r["moe_ep_size"] == 1 and r["distribution"] == dist]
    lat = {(r["moe_dtype"], r["num_tokens"], r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"]): r["latency"]
           for r in sel}
    factors: dict = {}
    for dt in ("bfloat16", "fp8", "fp8_block"):
        if dt not in gemm["neg_ln_eff_x200"]:
            continue
        per_m = []
        for m in MOE_TOKENS:
            ratios = []
            for (d, t, h, i, k, e), v in lat.items():
                if d != dt or t != m:
                    continue
                touched = e * (1 - (1 - k / e) ** m)
                me = m * k / touched
                # one fused kernel streams every touched expert: the gate/up and down GEMMs with
                # the touched experts stacked along n (what kvplan.sim.opmodel computes)
                est = (gemm_time_from(gemm, gpu, dt, me, touched * 2 * i, h)
                       + gemm_time_from(gemm, gpu, dt, me, touched * h, i))
                ratios.append(v * 1e-3 / est)
            per_m.append(round(float(np.median(ratios)), 3) if ratios else None)
        factors[dt] = per_m
    ratios_out: dict = {}
    for q, name in (("int4_wo", "int4"), ("w4a16_mxfp4", "mxfp4")):
        per_m = []
        for m in MOE_TOKENS:
            rr = [v / lat[("bfloat16", *key[1:])] for key, v in lat.items()
                  if key[0] == q and key[1] == m and ("bfloat16", *key[1:]) in lat]
            per_m.append(round(float(np.median(rr)), 3) if rr else None)
        if any(x is not None for x in per_m):
            ratios_out[name] = per_m
    # the measured shapes themselves (gpt-oss, Mixtral, DeepSeek, Qwen3 MoE...): an exact-shape
    # lookup beats any transfer when a model matches one
    direct = []
    for key in sorted({k[:1] + k[2:] for k in lat}):
        dt, h, i, k, e = key
        pts = sorted((t, v) for (d2, t, h2, i2, k2, e2), v in lat.items() if (d2, h2, i2, k2, e2) == key)
        if len(pts) >= 5:
            direct.append({"dtype": dt, "hidden": h, "inter": i, "topk": k, "experts": e,
                           "tokens": [t for t, _ in pts], "latency_s": [float(f"{v * 1e-3:.4g}") for _, v in pts]})
    return ({"tokens": MOE_TOKENS, "routing": dist, "grouped_factor": factors, "direct": direct},
            {"tokens": MOE_TOKENS, "ratio_to_bf16": ratios_out})


def _fit(X, y):
    import numpy as np

    X, y = np.asarray(X, float), np.asarray(y, float)
    w = 1.0 / y
    c, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    c = np.maximum(c, 0.0)  # a cost is never negative
    e = np.abs(X @ c / y - 1.0)
    return c, float(np.median(e)), float(np.percentile(e, 90)), len(y)


def distil_attention(gen: list[dict], ctx: list[dict], gpu: dict) -> dict:
    out: dict = {}
    bw = gpu["bandwidth_gbs"] * 1e9
    f = gpu["bf16_tflops"] * 1e12
    for kvd in sorted({r["kv_cache_dtype"] for r in gen}):
        kvb = 1.0 if kvd == "fp8" else 2.0
        for hd in sorted({r["head_dim"] for r in gen}):
            g = [r for r in gen if r["kv_cache_dtype"] == kvd and r["head_dim"] == hd and not r.get("window_size")
                 and r["batch_size"] <= 1024 and 31 <= r["step"] <= 131071]
            c = [r for r in ctx if r["kv_cache_dtype"] == kvd and r["head_dim"] == hd and not r.get("window_size")
                 and r["isl"] >= 16 and r["batch_size"] * r["isl"] <= 65536]
            if len(g) < 50 or len(c) < 50:
                continue
            X = [[1.0, r["batch_size"], r["batch_size"] * (r["step"] + 1) * r["num_key_value_heads"] * hd * 2 * kvb / bw,
                  r["batch_size"] * r["num_heads"]] for r in g]
            dc, dmed, dp90, dn = _fit(X, [r["latency"] * 1e-3 for r in g])
            X = [[1.0, 4.0 * r["num_heads"] * hd * r["batch_size"] * r["isl"] * r["isl"] / 2.0 / f,
                  r["batch_size"] * r["isl"] * r["num_heads"]] for r in c]
            pc, pmed, pp90, pn = _fit(X, [r["latency"] * 1e-3 for r in c])
            out[f"{kvd}/{hd}"] = {
                "decode": {"c0_s": float(f"{dc[0]:.4g}"), "per_seq_s": float(f"{dc[1]:.4g}"),
                           "bandwidth_eff": round(1.0 / dc[2], 4) if dc[2] > 0 else None,
                           "per_seq_head_s": float(f"{dc[3]:.4g}"),
                           "fit_median_rel_err": round(dmed, 4), "fit_p90_rel_err": round(dp90, 4), "rows": dn,
                           "kernel": g[0]["kernel_source"]},
                "prefill": {"c0_s": float(f"{pc[0]:.4g}"), "flops_eff": round(1.0 / pc[1], 4) if pc[1] > 0 else None,
                            "per_token_head_s": float(f"{pc[2]:.4g}"),
                            "fit_median_rel_err": round(pmed, 4), "fit_p90_rel_err": round(pp90, 4), "rows": pn,
                            "kernel": c[0]["kernel_source"]},
            }
    return out


#: Bytes per element of AIConfigurator's all-reduce rows: its collector (collector/vllm/
#: collect_all_reduce.py) reduces ``message_size`` *elements* of a half-precision tensor (shape
#: [message_size / 4096, 4096], float16 by default), and its SDK queries the table with tokens ×
#: hidden elements (``query_custom_allreduce(..., size)``, "size: number of elements"; its speed of
#: light charges size × 2 bytes). Read as bytes, every message looked twice its size: at TP 4 on
#: H200 the table's 32 MiB row (16 Mi elements) takes 170 us, nccl-tests' 32 MiB all-reduce on the
#: same GPUs 173 us (microsoft/apex_plus profile/comm/H200-SXM-141GB/all_reduce.csv).
AIC_ALLREDUCE_ELEMENT_BYTES = 2


def distil_allreduce(rs: list[dict]) -> dict:
    sizes = sorted({r["message_size"] for r in rs})
    out: dict = {"message_bytes": [s * AIC_ALLREDUCE_ELEMENT_BYTES for s in sizes]}
    for be in ("vllm_graph", "vllm_eager"):
        per = {}
        for tp in sorted({r["num_gpus"] for r in rs}):
            lat = {r["message_size"]: r["latency"] for r in rs if r["backend"] == be and r["num_gpus"] == tp}
            if len(lat) == len(sizes):
                per[str(tp)] = [float(f"{lat[s] * 1e-3:.4g}") for s in sizes]
        out[be.removeprefix("vllm_")] = per
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic", required=True, help="git dir of ai-dynamo/aiconfigurator (a bare mirror works)")
    ap.add_argument("--commit", default="HEAD")
    args = ap.parse_args(argv)
    commit = subprocess.run(["git", "--git-dir", args.aic, "rev-parse", args.commit], check=True,
                            capture_output=True, text=True).stdout.strip()
    catalog = {g["name"]: g for g in json.loads((ROOT / "src/kvplan/hardware/gpus.json").read_text())["gpus"]}
    OUT.mkdir(parents=True, exist_ok=True)
    for system, version, name in SYSTEMS:
        gpu = catalog[name]
        gemm = distil_gemm(rows(args.aic, commit, system, "gemm", version, "gemm_perf"), gpu)
        # write the GEMM part first: the MoE factor is computed with the runtime's own interpolation
        moe_rows = rows(args.aic, commit, system, "moe", version, "moe_perf")
        supplements = []
        for s_system, s_version, s_dtype, s_kernel in MOE_SUPPLEMENTS:
            if s_system != system or any(r["moe_dtype"] == s_dtype for r in moe_rows):
                continue
            extra = [r for r in rows(args.aic, commit, system, "moe", s_version, "moe_perf")
                     if r["moe_dtype"] == s_dtype and s_kernel in r["kernel_source"]]
            moe_rows += extra
            supplements.append({"moe_dtype": s_dtype, "vllm_version": s_version,
                                "kernel_source": sorted({r["kernel_source"] for r in extra}),
                                "path": f"{DATA}/{system}/moe/vllm/{s_version}/moe_perf.parquet"})
        moe, wo = distil_moe(moe_rows, gemm, gpu)
        att = distil_attention(rows(args.aic, commit, system, "attention", version, "generation_attention_perf"),
                               rows(args.aic, commit, system, "attention", version, "context_attention_perf"), gpu)
        ar = distil_allreduce(rows(args.aic, commit, system, "comm", version, "custom_allreduce_perf"))
        doc = {
            "format": "kvplan-kernel-table/1",
            "gpu": name, "aic_system": system, "vllm_version": version,
            "source": {"repo": "github.com/ai-dynamo/aiconfigurator", "commit": commit, "licence": "Apache-2.0",
                       "copyright": "NVIDIA CORPORATION & AFFILIATES",
                       "paths": f"{DATA}/{system}/{{gemm,attention,moe,comm}}/vllm/{version}/*.parquet",
                       "distilled_by": "scripts/distill_kernel_tables.py",
                       **({"moe_supplements": supplements} if supplements else {})},
            "peaks": {"bandwidth_gbs": gpu["bandwidth_gbs"], "bf16_tflops": gpu["bf16_tflops"],
                      "fp8_tflops": gpu.get("fp8_tflops")},
            "gemm": gemm, "weight_only": wo, "moe": moe, "attention": att, "allreduce": ar,
        }
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size / 1024:.1f} KiB; attention fits "
              + ", ".join(f"{k}: decode {v['decode']['fit_median_rel_err']:.1%} / prefill {v['prefill']['fit_median_rel_err']:.1%}"
                          for k, v in att.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
