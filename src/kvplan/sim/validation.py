"""Median |error| of the GPU step-time model per GPU, as measured by ``benchmarks/gpu_fidelity.py``
on the development set (/work/shared/perf/dev_cases.json). Written from the benchmark's output;
every simulate/tune result quotes the row of its GPU ("how far to trust this clock")."""

#: kernel-table GPU -> {cases, output_throughput, ttft, tpot: median |relative error|, held_out: ...}
VALIDATION: dict = {}
