"""Rebuild src/kvplan/traffic/sharegpt_lengths.json: kvplan's model of the (prompt, output) token
lengths of ShareGPT_V3_unfiltered_cleaned_split (first human turn, first model turn), the pairs
`vllm bench serve --dataset-name sharegpt` samples. No dataset text is used or shipped.

Published figures it is fitted to (means AFTER vllm bench's filters: prompt and output >= 4
tokens, prompt <= 1024, prompt + output <= 2048):

- prompt mean 229.7 tokens: `vllm bench serve --dataset-name hf --dataset-path
  Aeala/ShareGPT_Vicuna_unfiltered` with the Llama-3.1-8B-Instruct tokenizer, 1000 prompts, seed 0:
  "Total input tokens: 229711" (vllm-project/vllm pull request #18566, description, 2025-05-22;
  that repository is Apache-2.0).
- output mean 281.35 tokens with the Llama-2 tokenizer, whose prompts there averaged 270.64: a
  ShareGPT_V3 run with --ignore-eos, so the outputs are the dataset's completion lengths
  (AI-Hypercomputer/inference-benchmark pull request #24, 2025-03-28; Apache-2.0). Scaled to the
  Llama-3 tokenizer by the prompts' ratio (229.7 / 270.64): 238.8 tokens.

The shape is an assumption: log-normal marginals (sigma 1.4 for prompts - many one-line questions
and some pasted documents -, 1.0 for outputs), prompt and output independent, the location of each
solved so that the filtered means match the figures above. That is an APPROXIMATION: it reproduces
the published means and vLLM bench's filters, not the dataset's joint distribution; other
tokenizers shift lengths by their own ratio (not modelled). The histogram is stored before the
filters (the sampler applies them, kvplan.traffic.sharegpt), on log-spaced bins.

Run: python benchmarks/build_sharegpt_lengths.py
"""
from __future__ import annotations

import json
import math
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "kvplan" / "traffic" / "sharegpt_lengths.json"
TARGET_IN, SIGMA_IN = 229.711, 1.4
TARGET_OUT, SIGMA_OUT = 281.35 * 229.711 / 270.64, 1.0


def edges(lo: int, hi: int, n: int) -> list[int]:
    out = sorted({int(round(lo * (hi / lo) ** (k / n))) for k in range(n + 1)})
    return out


def cdf(x: float, mu: float, s: float) -> float:
    if x <= 0:
        return 0.0
    return 0.5 * (1 + math.erf((math.log(x) - mu) / (s * math.sqrt(2))))


def masses(e: list[int], mu: float, s: float) -> list[float]:
    return [cdf(e[i + 1] - 0.5, mu, s) - cdf(e[i] - 0.5, mu, s) for i in range(len(e) - 1)]


def filtered_means(pe, oe, mu_in, mu_out) -> tuple[float, float]:
    """Mean prompt and output of the pairs vllm bench keeps (cell midpoints, the filters)."""
    pm, om = masses(pe, mu_in, SIGMA_IN), masses(oe, mu_out, SIGMA_OUT)
    w = sp = so = 0.0
    for i, a in enumerate(pm):
        p = (pe[i] + pe[i + 1] - 1) / 2
        if pe[i + 1] - 1 < 4 or pe[i] > 1024:
            continue
        for j, b in enumerate(om):
            o = (oe[j] + oe[j + 1] - 1) / 2
            if oe[j + 1] - 1 < 4 or p + o > 2048:
                continue
            w += a * b
            sp += a * b * p
            so += a * b * o
    return sp / w, so / w


def solve(pe, oe) -> tuple[float, float]:
    """Locations whose filtered means hit the targets (alternating bisections)."""
    mu_in, mu_out = math.log(TARGET_IN), math.log(TARGET_OUT)
    for _ in range(6):
        for which in (0, 1):
            lo, hi = 0.0, 10.0
            for _ in range(60):
                mid = (lo + hi) / 2
                args = (mid, mu_out) if which == 0 else (mu_in, mid)
                m = filtered_means(pe, oe, *args)[which]
                if m < (TARGET_IN if which == 0 else TARGET_OUT):
                    lo = mid
                else:
                    hi = mid
            if which == 0:
                mu_in = (lo + hi) / 2
            else:
                mu_out = (lo + hi) / 2
    return mu_in, mu_out


def main() -> None:
    pe = edges(1, 4096, 40)
    oe = edges(1, 4096, 40)
    mu_in, mu_out = solve(pe, oe)
    pm, om = masses(pe, mu_in, SIGMA_IN), masses(oe, mu_out, SIGMA_OUT)
    fin, fout = filtered_means(pe, oe, mu_in, mu_out)
    counts = [[round(a * b * 1e6, 3) for b in om] for a in pm]
    doc = {
        "description": "ShareGPT_V3 (prompt, output) token lengths before vllm bench's filters: an approximation "
                       "(log-normal marginals fitted to published post-filter means: prompts 229.7, outputs 238.8 "
                       "tokens, Llama-3 tokenizer); built by benchmarks/build_sharegpt_lengths.py",
        "sources": ["vllm-project/vllm pull request #18566 (2025-05-22): vllm bench serve on ShareGPT, Llama-3.1-8B "
                    "tokenizer, 1000 prompts: Total input tokens 229711 (Apache-2.0)",
                    "AI-Hypercomputer/inference-benchmark pull request #24 (2025-03-28): ShareGPT_V3 with --ignore-eos, "
                    "Llama-2 tokenizer: average input 270.64, average output 281.35 (Apache-2.0)"],
        "approximation": True,
        "fitted": {"prompt_mean_after_filters": round(fin, 2), "output_mean_after_filters": round(fout, 2),
                   "lognormal": {"prompt": [round(mu_in, 4), SIGMA_IN], "output": [round(mu_out, 4), SIGMA_OUT]}},
        "prompt_edges": pe, "output_edges": oe, "counts": counts,
    }
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
