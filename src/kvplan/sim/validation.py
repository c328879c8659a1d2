"""Median |error| of the GPU step-time model per GPU, as measured by ``benchmarks/gpu_fidelity.py``
on the development set (/work/shared/perf/dev_cases.json). Written from the benchmark's output;
every simulate/tune result quotes the row of its GPU ("how far to trust this clock")."""

#: kernel-table GPU -> {cases, output_throughput, ttft, tpot: median |relative error|, held_out: ...}
VALIDATION: dict = {
    "A100-SXM4-80GB": {
        "cases": 59,
        "output_throughput": 0.0487,
        "ttft": 0.2039,
        "tpot": 0.0375,
        "held_out": {
            "cases": 18,
            "output_throughput": 0.0786,
            "ttft": 0.2295,
            "tpot": 0.0596
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-02"
    },
    "H100-SXM5-80GB": {
        "cases": 7,
        "output_throughput": 0.2048,
        "ttft": 0.1232,
        "tpot": 0.2488,
        "held_out": {
            "cases": 4,
            "output_throughput": 0.2186,
            "ttft": 0.0456,
            "tpot": 0.4596
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-02",
        "validation": {
            "AIC silicon": {
                "tpot": 0.0328,
                "cases": 24,
                "ttft": 0.2424
            },
            "BLIS GuideLLM sync": {
                "tpot": 0.0424,
                "cases": 7
            }
        }
    },
    "MI300X": {
        "cases": 3,
        "output_throughput": 0.6206,
        "ttft": 0.6562,
        "tpot": 0.3222,
        "held_out": {
            "cases": 3,
            "output_throughput": 0.6206,
            "ttft": 0.6562,
            "tpot": 0.3222
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-02"
    },
    "H200-141GB": {
        "cases": 1,
        "output_throughput": 0.2417,
        "ttft": 0.2271,
        "tpot": 0.1912,
        "held_out": {
            "cases": 1,
            "output_throughput": 0.2417,
            "ttft": 0.2271,
            "tpot": 0.1912
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-02",
        "validation": {
            "AIC silicon": {
                "tpot": 0.2725,
                "cases": 30,
                "ttft": 0.1708
            }
        }
    },
    "GB10": {
        "cases": 2,
        "output_throughput": None,
        "ttft": 0.3494,
        "tpot": 0.3063,
        "held_out": {
            "cases": 2,
            "output_throughput": None,
            "ttft": 0.3494,
            "tpot": 0.3063
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-02"
    }
}
