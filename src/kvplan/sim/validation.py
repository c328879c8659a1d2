"""Median |error| of the GPU step-time model per GPU, as measured by ``benchmarks/gpu_fidelity.py``
on the development set (/work/shared/perf/dev_cases.json). Written from the benchmark's output;
every simulate/tune result quotes the row of its GPU ("how far to trust this clock")."""

#: kernel-table GPU -> {cases, output_throughput, ttft, tpot: median |relative error|, held_out: ...}
VALIDATION: dict = {
    "A100-SXM4-80GB": {
        "cases": 59,
        "output_throughput": 0.0489,
        "ttft": 0.2456,
        "tpot": 0.0375,
        "held_out": {
            "cases": 18,
            "output_throughput": 0.082,
            "ttft": 0.2539,
            "tpot": 0.0672
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-01"
    },
    "H100-SXM5-80GB": {
        "cases": 7,
        "output_throughput": 0.2045,
        "ttft": 0.1381,
        "tpot": 0.2488,
        "held_out": {
            "cases": 4,
            "output_throughput": 0.2183,
            "ttft": 0.0678,
            "tpot": 0.46
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-01",
        "validation": {
            "AIC silicon": {
                "tpot": 0.0417,
                "cases": 24,
                "ttft": 1.831
            },
            "BLIS GuideLLM sync": {
                "tpot": 0.0424,
                "cases": 7
            }
        }
    },
    "H200-141GB": {
        "cases": 1,
        "output_throughput": 0.2418,
        "ttft": 0.2271,
        "tpot": 0.1912,
        "held_out": {
            "cases": 1,
            "output_throughput": 0.2418,
            "ttft": 0.2271,
            "tpot": 0.1912
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-01",
        "validation": {
            "AIC silicon": {
                "tpot": 0.2522,
                "cases": 30,
                "ttft": 2.79
            }
        }
    }
}
