"""Median |error| of the GPU step-time model, as measured by ``benchmarks/gpu_fidelity.py`` on the
development set (dev_cases.json): leave-one-source-out, each case typed as a user
would type it (the user view), per GPU, per traffic regime and per source group, with the fit's
error beside it. Written by ``gpu_fidelity.py --write-validation``; every simulate/tune result
quotes the rows of its GPU and its regime ("how far to trust this clock")."""

#: GPU -> {cases, output_throughput, ttft, tpot: LOSO median |relative error|, fit: {...}}
VALIDATION: dict = {
    "A100-SXM4-80GB": {
        "cases": 59,
        "output_throughput": 0.038,
        "ttft": 0.1438,
        "tpot": 0.0321,
        "held_out": {
            "cases": 18,
            "output_throughput": 0.0543,
            "ttft": 0.1362,
            "tpot": 0.0395
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-03"
    },
    "H100-SXM5-80GB": {
        "cases": 7,
        "output_throughput": 0.046,
        "ttft": 0.1032,
        "tpot": 0.1689,
        "held_out": {
            "cases": 4,
            "output_throughput": 0.0408,
            "ttft": 0.1006,
            "tpot": 0.184
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-03",
        "validation": {
            "AIC silicon": {
                "tpot": 0.0318,
                "cases": 24,
                "ttft": 0.2317
            },
            "BLIS GuideLLM sync": {
                "tpot": 0.0426,
                "cases": 7
            }
        }
    },
    "MI300X": {
        "cases": 3,
        "output_throughput": 0.6155,
        "ttft": 0.66,
        "tpot": 0.3192,
        "held_out": {
            "cases": 3,
            "output_throughput": 0.6155,
            "ttft": 0.66,
            "tpot": 0.3192
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-03"
    },
    "H200-141GB": {
        "cases": 1,
        "output_throughput": 0.2272,
        "ttft": 0.223,
        "tpot": 0.1816,
        "held_out": {
            "cases": 1,
            "output_throughput": 0.2272,
            "ttft": 0.223,
            "tpot": 0.1816
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-03",
        "validation": {
            "AIC silicon": {
                "tpot": 0.2709,
                "cases": 30,
                "ttft": 0.1679
            }
        }
    },
    "GB10": {
        "cases": 2,
        "output_throughput": None,
        "ttft": 0.3501,
        "tpot": 0.3049,
        "held_out": {
            "cases": 2,
            "output_throughput": None,
            "ttft": 0.3501,
            "tpot": 0.3049
        },
        "benchmark": "benchmarks/gpu_fidelity.py",
        "date": "2026-12-03"
    }
}
