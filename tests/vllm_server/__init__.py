"""Real-vLLM test harness: tiny local models + a vLLM (CPU build) server subprocess.

Public API::

    from tests.vllm_server import (
        # environment
        vllm_python, check_vllm_env, VllmEnvMissing, skip_requested,
        # models
        ModelSpec, BuiltModel, build_model, build_tiny_llama, tiny_llama_spec,
        tiny_qwen2_sliding_spec, tiny_gemma3_spec, tiny_mistral_spec, expected_kv_line_tokens,
        # servers
        VllmServer, start_vllm, run_vllm_until_exit, VllmExit, VllmStartupError,
        free_port, alive_registered_processes, assert_no_stray,
        # clients
        scrape_metrics, Metrics, preemption_burst, BurstResult, stream_completion,
        stream_sse, post_json, parse_kv_lines, KvLine, random_prompt_ids, model_name,
    )

The vLLM interpreter is ``<repo>/.venv-vllm/bin/python`` (override: ``KVPLAN_VLLM_PYTHON``),
installed by ``scripts/vllm-test-env``. The pytest fixtures live in
``tests/vllm_server/fixtures.py`` (pulled into ``tests/vllm/conftest.py``).
"""

from .client import (
    BurstResult,
    KvLine,
    Metrics,
    StreamResult,
    model_name,
    parse_kv_lines,
    post_json,
    preemption_burst,
    random_prompt_ids,
    scrape_metrics,
    stream_completion,
    stream_sse,
)
from .env import (
    REPO_ROOT,
    VllmEnvMissing,
    check_vllm_env,
    log_dir,
    model_cache_dir,
    skip_requested,
    vllm_python,
)
from .models import (
    BuiltModel,
    ModelSpec,
    build_model,
    build_tiny_llama,
    expected_kv_line_tokens,
    tiny_gemma3_spec,
    tiny_llama_spec,
    tiny_mistral_spec,
    tiny_qwen2_sliding_spec,
)
from .server import (
    VllmExit,
    VllmServer,
    VllmStartupError,
    alive_registered_processes,
    assert_no_stray,
    free_port,
    reap_orphaned_servers,
    registered_servers,
    stop_servers,
    run_vllm_until_exit,
    start_vllm,
)

__all__ = [
    "BurstResult",
    "KvLine",
    "Metrics",
    "StreamResult",
    "model_name",
    "parse_kv_lines",
    "post_json",
    "preemption_burst",
    "random_prompt_ids",
    "scrape_metrics",
    "stream_completion",
    "stream_sse",
    "REPO_ROOT",
    "VllmEnvMissing",
    "check_vllm_env",
    "log_dir",
    "model_cache_dir",
    "skip_requested",
    "vllm_python",
    "BuiltModel",
    "ModelSpec",
    "build_model",
    "build_tiny_llama",
    "expected_kv_line_tokens",
    "tiny_gemma3_spec",
    "tiny_llama_spec",
    "tiny_mistral_spec",
    "tiny_qwen2_sliding_spec",
    "VllmExit",
    "VllmServer",
    "VllmStartupError",
    "alive_registered_processes",
    "assert_no_stray",
    "free_port",
    "reap_orphaned_servers",
    "registered_servers",
    "stop_servers",
    "run_vllm_until_exit",
    "start_vllm",
]
