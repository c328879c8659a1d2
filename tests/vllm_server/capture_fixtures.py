"""Record real vLLM outputs as test fixtures under tests/fixtures/vllm_cpu/.

    python -m tests.vllm_server.capture_fixtures [OUT_DIR]

(run from the repo root with any Python 3.11; vLLM itself runs from .venv-vllm).  Writes:

* healthy_startup.log + healthy_startup.json  full log of a healthy tiny-Llama server
  (and the sidecar: model shape, argv, flags, env, vLLM version, KV line values);
* metrics.txt                                  a /metrics scrape of that server after a
  known amount of traffic (recorded in healthy_startup.json);
* failed_startup_kv_too_small.log + .json      a start-up that fails because the KV cache
  cannot hold one max-length request.
* hybrid_gemma3_startup.log + .json            (with --hybrid) a healthy Gemma-3 style
  sliding-window/full-attention model.
"""

from __future__ import annotations

import json
import pathlib
import platform
import re
import sys
import time

from . import client, env, models, server

DEFAULT_OUT = env.REPO_ROOT / "tests" / "fixtures" / "vllm_cpu"


def _sidecar(srv: server.VllmServer, model: models.BuiltModel, extra: dict) -> dict:
    spec = model.spec
    kv = client.parse_kv_lines(srv.log_text())
    return {
        "vllm_version": env.check_vllm_env(),
        "python": platform.python_version(),
        "machine": {"cpus": __import__("os").cpu_count(), "arch": platform.machine()},
        "argv": [a.replace(str(env.REPO_ROOT), "<repo>") for a in srv.argv],
        "flags": srv.argv[srv.argv.index(server.API_SERVER_MODULE) + 1 :],
        "env": {
            **srv.env_overrides,
            **{k: srv.env[k] for k in ("HF_HUB_OFFLINE", "VLLM_HOST_IP", "VLLM_CPU_KVCACHE_SPACE") if k in srv.env},
        },
        "model": {
            "name": spec.name,
            "model_type": spec.model_type,
            "architectures": model.info["architectures"],
            "weights_dtype": spec.dtype,
            "vocab_size": model.vocab_size,
            "num_parameters": model.info["num_parameters"],
            "config": spec.config,
            "kv_bytes_per_token_float32": spec.kv_bytes_per_token("float32"),
            "folder": model.path.name,
        },
        "kv_lines": [dict(tokens=k.tokens, max_model_len=k.max_model_len, concurrency=k.concurrency, line=k.line) for k in kv],
        "startup_seconds": round(srv.startup_seconds or 0, 1),
        "captured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **extra,
    }


def _write(out: pathlib.Path, name: str, text: str) -> None:
    (out / name).write_text(text.replace(str(env.REPO_ROOT), "<repo>"))
    print(f"wrote {out / name} ({len(text)} chars)")


def capture_healthy(out: pathlib.Path) -> None:
    model = models.build_tiny_llama()
    args = ["--max-model-len", "2048"]
    envv = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    with server.VllmServer(model.path, args, envv) as srv:
        traffic = []
        r = client.post_json(
            srv.base_url,
            "/v1/completions",
            {"model": srv.served_model_name, "prompt": "Hello, world", "max_tokens": 32, "min_tokens": 32, "ignore_eos": True},
        )
        traffic.append({"endpoint": "/v1/completions", "usage": r["usage"]})
        r = client.post_json(
            srv.base_url,
            "/v1/chat/completions",
            {
                "model": srv.served_model_name,
                "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 16,
                "min_tokens": 16,
                "ignore_eos": True,
            },
        )
        traffic.append({"endpoint": "/v1/chat/completions", "usage": r["usage"]})
        metrics = srv.metrics_text()
        srv_ref = srv
    # stopped: the log now has the shutdown too
    _write(out, "healthy_startup.log", srv_ref.log_text())
    _write(out, "metrics.txt", metrics)
    side = _sidecar(
        srv_ref,
        model,
        {
            "traffic_before_metrics": traffic,
            "metrics_file": "metrics.txt",
            "notes": "The log runs from launch to exit: start-up, the traffic above, the /metrics scrape, "
            "then the SIGTERM shutdown (leak warnings after SIGTERM are benign). <repo> stands for the "
            "repository root. VLLM_CPU_KVCACHE_SPACE is in GiB; block size 128 (CPU default).",
        },
    )
    _write(out, "healthy_startup.json", json.dumps(side, indent=2, sort_keys=True) + "\n")


def capture_failed(out: pathlib.Path) -> None:
    model = models.build_tiny_llama()
    kv_bytes = 4 * 128 * model.spec.kv_bytes_per_token("float32")
    args = ["--max-model-len", "2048", "--kv-cache-memory-bytes", str(kv_bytes)]
    res = server.run_vllm_until_exit(model.path, args)
    _write(out, "failed_startup_kv_too_small.log", res.log_text)
    m = re.search(r"the estimated maximum model length is (\d+)", res.log_text)
    err = [ln.strip() for ln in res.log_text.splitlines() if ln.startswith(("ValueError:", "RuntimeError:"))]
    side = {
        "vllm_version": env.check_vllm_env(),
        "flags": ["--max-model-len", "2048", "--kv-cache-memory-bytes", str(kv_bytes), "--enforce-eager", "--dtype", "float32"],
        "env": {"HF_HUB_OFFLINE": "1", "VLLM_HOST_IP": "127.0.0.1"},
        "model": {"name": model.spec.name, "config": model.spec.config, "vocab_size": model.vocab_size},
        "returncode": res.returncode,
        "seconds": round(res.seconds, 1),
        "estimated_maximum_model_length": int(m.group(1)) if m else None,
        "error_lines": err,
        "captured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _write(out, "failed_startup_kv_too_small.json", json.dumps(side, indent=2, sort_keys=True) + "\n")


def capture_hybrid(out: pathlib.Path) -> None:
    model = models.build_model(models.tiny_gemma3_spec())
    with server.VllmServer(model.path, ["--max-model-len", "2048"], {"VLLM_CPU_KVCACHE_SPACE": "1"}) as srv:
        metrics = srv.metrics_text()
        srv_ref = srv
    _write(out, "hybrid_gemma3_startup.log", srv_ref.log_text())
    info = client.Metrics.parse(metrics).series("vllm:cache_config_info")
    side = _sidecar(
        srv_ref,
        model,
        {
            "cache_config_info": info[0][0] if info else None,
            "notes": "Two KV cache groups (1 sliding-window layer, 1 full layer) share one pool of 8,192 "
            "blocks of 128 tokens x 1 layer; one 2,048-token request needs 16 (full) + 17 (sliding: "
            "ceil(min(256-1+2048, 2048)/128)+1) = 33 blocks -> 8192/33 = 248.24x, 508,400 tokens. "
            "The EngineDeadError after SIGTERM at the end is benign.",
        },
    )
    _write(out, "hybrid_gemma3_startup.json", json.dumps(side, indent=2, sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if not a.startswith("--")]
    out = pathlib.Path(args[0]) if args else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    capture_healthy(out)
    capture_failed(out)
    if "--hybrid" in argv:
        capture_hybrid(out)
    server.assert_no_stray()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
