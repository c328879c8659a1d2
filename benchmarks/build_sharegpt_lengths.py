"""Rebuild src/kvplan/workload/sharegpt_lengths.json: kvplan's model of the (prompt, output) token
lengths of ShareGPT_V3_unfiltered_cleaned_split (first human turn, first model turn), the pairs
`vllm bench serve --dataset-name sharegpt` samples. No dataset text is used or shipped.

Source of the numbers: the vLLM paper (Kwon et al., "Efficient Memory Management for Large Language
Model Serving with PagedAttention", SOSP 2023, section 6.1 / Figure 11: ShareGPT mean input 161.31
tokens, mean output 337.99 tokens; paper under CC BY 4.0). The paper gives the means and a
histogram figure, not a table: the shape here is a log-normal per marginal with the spread chosen
to match that figure's long tails (sigma 1.25 for prompts, 1.0 for outputs), prompt and output
independent. That is an APPROXIMATION: the model reproduces the published means and the filters,
not the dataset's exact joint distribution. The histogram is stored before vLLM bench's filters
(the sampler applies them, kvplan.workload.sharegpt), on log-spaced bins.

Run: python benchmarks/build_sharegpt_lengths.py
"""
from __future__ import annotations

import json
import math
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "kvplan" / "workload" / "sharegpt_lengths.json"
MEAN_IN, SIGMA_IN = 161.31, 1.25
MEAN_OUT, SIGMA_OUT = 337.99, 1.0


def edges(lo: int, hi: int, n: int) -> list[int]:
    out = sorted({int(round(lo * (hi / lo) ** (k / n))) for k in range(n + 1)})
    return out


def cdf(x: float, mu: float, s: float) -> float:
    if x <= 0:
        return 0.0
    return 0.5 * (1 + math.erf((math.log(x) - mu) / (s * math.sqrt(2))))


def masses(e: list[int], mean: float, s: float) -> list[float]:
    mu = math.log(mean) - s * s / 2
    return [cdf(e[i + 1] - 0.5, mu, s) - cdf(e[i] - 0.5, mu, s) for i in range(len(e) - 1)]


def main() -> None:
    pe = edges(1, 4096, 40)
    oe = edges(1, 4096, 40)
    pm, om = masses(pe, MEAN_IN, SIGMA_IN), masses(oe, MEAN_OUT, SIGMA_OUT)
    counts = [[round(a * b * 1e6, 3) for b in om] for a in pm]
    doc = {
        "description": "ShareGPT_V3 (prompt, output) token lengths before vllm bench's filters: an approximation "
                       "(log-normal marginals matching the vLLM paper's published means, SOSP 2023 Fig. 11, "
                       "CC BY 4.0); built by benchmarks/build_sharegpt_lengths.py",
        "sources": ["Kwon et al., SOSP 2023 (arXiv:2309.06180), section 6.1 and Figure 11: ShareGPT mean input "
                    "161.31 tokens, mean output 337.99 tokens; CC BY 4.0"],
        "approximation": True,
        "prompt_edges": pe, "output_edges": oe, "counts": counts,
    }
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
