"""0.8.0-0.11.0: whether the sampler runs FlashInfer depends on how vLLM was installed (the wheel
does not require FlashInfer, the release image ships it), so the plan shows the other case and a
verdict that flips on it is borderline (memory/_assemble.py NO_FLASHINFER)."""
from __future__ import annotations

from kvplan.hardware import find_gpu
from kvplan.memory import PlanRequest, plan
from kvplan.memory._assemble import NO_FLASHINFER, SETTLE_INSTALL
from kvplan.memory.semantics import semantics
from kvplan.models import load_model
from kvplan.report._common import borderline_text


def _rows(result):
    return {w.change: w for w in result.what_if}


def test_the_install_dependent_versions_are_0_8_to_0_11_0_v1():
    assert [v for v in ("0.7.3", "0.8.0", "0.9.2", "0.10.1", "0.11.0", "0.11.1", "0.19", "0.21")
            if semantics(v, "V1").flashinfer_sampler_depends_on_install] == ["0.8.0", "0.9.2", "0.10.1", "0.11.0"]
    assert not semantics("0.9.2", "V0").flashinfer_sampler_depends_on_install


def test_the_plan_shows_the_pip_install_case_only_where_it_differs_and_is_not_stated():
    spec, gpu = load_model("meta-llama/Llama-3.1-8B-Instruct"), find_gpu("H100")
    image = plan(PlanRequest(spec, gpu, vllm_version="0.10.1"))
    pip = _rows(image)[NO_FLASHINFER]
    assert pip.flags == {"flashinfer_sampler": False}
    # the native torch.sort (38 B per logit) against FlashInfer's 14 B, over 1,024 rows of 128,256 logits
    assert abs((image.memory.available_kv_cache_gib - pip.available_kv_cache_gib) - 1024 * 128256 * 24 / 2**30) < 0.01
    stated = plan(PlanRequest(spec, gpu, vllm_version="0.10.1", flashinfer_sampler=True))
    assert NO_FLASHINFER not in _rows(stated)
    assert NO_FLASHINFER not in _rows(plan(PlanRequest(spec, gpu, vllm_version="0.11.1")))
    assert not image.startup.borderline  # 1.1 GiB less changes nothing for an 8B model on an H100


def test_a_verdict_that_fails_without_flashinfer_is_borderline_and_says_how_to_settle_it():
    """Log 19's configuration (gpt-oss-120b, one H100, 0.11.0, 131,072 tokens): vLLM refused it from a
    conda env's pip install; with FlashInfer the plan starts, without it the plan fails."""
    r = plan(PlanRequest(load_model("openai/gpt-oss-120b"), find_gpu("H100"), vllm_version="0.11.0",
                         gpu_memory_utilization=0.95, max_num_batched_tokens=1024, max_model_len=131072))
    assert r.startup.ok and r.startup.borderline and r.startup.settle_with == SETTLE_INSTALL
    assert not _rows(r)[NO_FLASHINFER].ok
    assert any("depends on how vLLM was installed" in n for n in r.notes)
    text = borderline_text(r)
    assert "pip install" in text and "--vllm-install pip" in text
    settled = plan(PlanRequest(load_model("openai/gpt-oss-120b"), find_gpu("H100"), vllm_version="0.11.0",
                               gpu_memory_utilization=0.95, max_num_batched_tokens=1024, max_model_len=131072,
                               flashinfer_sampler=False))
    assert not settled.startup.ok and not any("depends on how vLLM" in n for n in settled.notes)


def test_the_install_the_user_knows_settles_the_sampler_as_the_wheel_or_the_image_runs_it():
    """--vllm-install: log 19 ran 0.11.0 from a conda env's site-packages (a pip install) and vLLM
    refused its 131,072 tokens; planned as that install the plan fails too, as the image it starts,
    and neither shows the other install's what-if. A stated sampler (or a log's sampler line) wins."""
    spec, gpu = load_model("openai/gpt-oss-120b"), find_gpu("H100")
    common = dict(vllm_version="0.11.0", gpu_memory_utilization=0.95, max_num_batched_tokens=1024,
                  max_model_len=131072)
    pip = plan(PlanRequest(spec, gpu, vllm_install="pip", **common))
    docker = plan(PlanRequest(spec, gpu, vllm_install="docker", **common))
    unsaid = plan(PlanRequest(spec, gpu, **common))
    assert not pip.startup.ok and docker.startup.ok and not docker.startup.borderline
    assert abs(pip.memory.available_kv_cache_gib - _rows(unsaid)[NO_FLASHINFER].available_kv_cache_gib) < 1e-9
    assert abs(docker.memory.available_kv_cache_gib - unsaid.memory.available_kv_cache_gib) < 1e-9
    assert NO_FLASHINFER not in _rows(pip) and NO_FLASHINFER not in _rows(docker)
    assert any("--vllm-install pip" in n and "0.11.0 wheel" in n for n in pip.notes)
    stated = plan(PlanRequest(spec, gpu, vllm_install="pip", flashinfer_sampler=True, **common))
    assert abs(stated.memory.available_kv_cache_gib - docker.memory.available_kv_cache_gib) < 1e-9
    # 0.11.1+ require flashinfer-python and 0.21 samples with it: the install changes nothing there
    for version in ("0.11.1", "0.21"):
        a, b = (plan(PlanRequest(spec, gpu, vllm_version=version, vllm_install=i)) for i in ("pip", "docker"))
        assert a.memory.available_kv_cache_gib == b.memory.available_kv_cache_gib


def test_the_command_line_reads_the_install_and_refuses_an_unknown_one():
    from kvplan.errors import UsageError
    from kvplan.serve_flags import parse_argv, request_from_values

    values, _log = parse_argv(["--model", "openai/gpt-oss-120b", "--gpu", "H100", "--vllm-install", "pip"])
    assert request_from_values(values, set(values)).vllm_install == "pip"
    try:
        parse_argv(["--model", "x", "--vllm-install", "conda"])
    except UsageError as e:
        assert "--vllm-install" in str(e) and "pip, docker" in str(e)
    else:
        raise AssertionError("an unknown install was accepted")
