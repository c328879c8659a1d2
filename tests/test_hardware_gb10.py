"""NVIDIA GB10 (DGX Spark) in the GPU catalog: its published memory and bandwidth, derived dense
tensor peaks, and a step-time model that borrows the nearest measured Blackwell tables and says so."""
from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.models import load_model
from kvplan.sim import default_profile
from kvplan.sim import kernels as K


def test_gb10_is_found_by_the_names_benchmarks_use():
    for name in ("GB10", "NVIDIA GB10", "dgx-spark", "DGX Spark"):
        assert find_gpu(name).name == "GB10"
    g = find_gpu("GB10")
    assert g.bandwidth_gbs == 273 and g.marketing_gb == 128 and g.sm == 121 and g.arch == "blackwell"
    # NVIDIA's "1 PFLOP" is sparse FP4: dense FP4 500, FP8 250, BF16 125 TFLOP/s
    assert (g.fp8_tflops, g.bf16_tflops) == (250, 125) and g.supports_fp8
    assert abs(g.memory_gib - 121.69) < 0.01


def test_gb10_step_model_borrows_b200_efficiencies_and_quotes_its_own_error():
    gpu = find_gpu("GB10")
    assert K.nearest_measured(gpu) == ("B200-180GB", False)
    req = PlanRequest(model=load_model("Qwen/Qwen3-0.6B"), gpu=gpu, max_model_len=2048, gpu_memory_utilization=0.5)
    pr = plan(req, what_ifs=False)
    assert pr.startup.ok
    p = default_profile(req, pr)
    assert p.clock["kernel_tables"] == "B200-180GB" and p.clock["kernel_tables_exact"] is False
    assert any("GB10 has no measured kernel tables" in n for n in p.notes)
    # the error quoted is GB10's own (benchmarks/gpu_fidelity.py on its two held-out dev runs), not B200's
    from kvplan.sim import validation

    assert p.clock["validation"] == {"measured": True, **validation.by_gpu()["GB10"]}
    # decode of a 0.6B bf16 model is bandwidth-bound: at least the weights over 273 GB/s
    assert p.time(1, 1, 100, 0) >= 1.2e9 / 273e9


def test_a_gpu_without_runs_quotes_no_borrowed_error():
    from kvplan.sim.opmodel import validation_error

    v = validation_error("L4", "L40S")
    assert v["measured"] is False and "L40S" in v["note"] and "does not transfer" in v["note"]
