"""``kvplan profile``: thin CLI over kvplan.ops.profile (and kvplan.ops.launch for ``--launch``).

Any option ``kvplan profile`` does not know is a plan flag (``--model``, ``--device``,
``--kv-cache-memory``, …), read as the table of serve flags reads them (:func:`kvplan.serve_flags.plan_from_args`,
in this process), so a plan is spelled exactly as for ``kvplan plan``. Only typer and the
standard library at module level (main.py imports this for every command).

Exit codes: 0 the server matches the plan (every check passed or was skipped), 1 a check failed,
vLLM did not start, or the server could not be profiled; 2 usage errors.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
from ..report import registry as reports
from ._exit import fail as _fail
from .bench import API_KEY_FILE_HELP, API_KEY_HELP

FORMATS = reports.formats("profile")


def profile_cmd(
    ctx: typer.Context,
    url: Optional[str] = typer.Option(None, "--url", help="Base URL of a running vLLM server, e.g. http://127.0.0.1:8000."),
    launch: bool = typer.Option(False, "--launch", help="Start `vllm serve` with the plan's flags on 127.0.0.1, "
                                "profile it, stop it."),
    log: Optional[Path] = typer.Option(None, "--log", help="vLLM's log: read with --url (its start-up lines); "
                                       "with --launch, where the server's output is written."),
    vllm_bin: Optional[str] = typer.Option(None, "--vllm-bin", help="The vllm executable (default $KVPLAN_VLLM_BIN, "
                                           "else vllm on PATH); a Python interpreter runs vLLM's API server module."),
    startup_timeout: float = typer.Option(900.0, "--startup-timeout", help="Seconds --launch waits for the server."),
    model_name: Optional[str] = typer.Option(None, "--model-name", help="Served model to profile (default: the first "
                                             "of /v1/models)."),
    long_prompt_tokens: Optional[int] = typer.Option(None, "--long-prompt-tokens", help="Prompt tokens of the long "
                                                     "probe (default: near max_model_len - max_tokens)."),
    burst: Optional[int] = typer.Option(None, "--burst", help="Requests in the burst (default: the planned "
                                        "concurrency, at most 64)."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds for all probes together."),
    gpu_memory_limit: Optional[float] = typer.Option(None, "--gpu-memory-limit", help="Peak GPU memory allowed, as a "
                                                     "share of the GPU (default: what the plan pre-allocates plus the "
                                                     "estimate's error band; 0.90 without a plan)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help=API_KEY_HELP, show_default=False),
    api_key_file: Optional[str] = typer.Option(None, "--api-key-file", help=API_KEY_FILE_HELP, show_default=False),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or markdown."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report to this file (default: stdout)."),
) -> None:
    """Measure a vLLM server against its plan: KV blocks and tokens, concurrency, KV blocks per request.

    kvplan profile --url http://127.0.0.1:8000 --log vllm.log --model ./my-model --gpu H100 ...
    kvplan profile --launch --model ./my-model --device cpu --kv-cache-memory 4GiB ...

    Options not listed here are plan flags, as for kvplan plan.

    Exit codes: 0 matches the plan, 1 a check failed (or vLLM did not start), 2 usage errors."""
    from ..ops.launch import LaunchFailed, launch_vllm, resolve_vllm_bin
    from ..ops.profile import ProfileError, profile_server

    plan_args = list(ctx.args)
    try:
        if fmt not in FORMATS:
            raise UsageError(f"--format: expected {reports.choices_text('profile')}, got {fmt!r}")
        if launch == bool(url):
            raise UsageError("give either --url URL (a running server) or --launch (start one from the plan flags)")
        if launch and not plan_args:
            raise UsageError("--launch needs the plan flags (as for kvplan plan), e.g. --model ./my-model --gpu H100")
        if gpu_memory_limit is not None and not 0 < gpu_memory_limit <= 1:
            raise UsageError(f"--gpu-memory-limit {gpu_memory_limit}: a share of the GPU, in (0, 1]")
        plan_result = plan_for_server(plan_args, log if url else None)
        log_text = None
        if url and log is not None:
            from ..memory.startup_log import read_log_text

            log_text = read_log_text(log)
        binary = resolve_vllm_bin(vllm_bin) if launch else None
        from ..bench.config import resolve_api_key

        key = resolve_api_key(api_key, api_key_file)
        options = dict(plan_result=plan_result, model_name=model_name, long_prompt_tokens=long_prompt_tokens,
                       burst_concurrency=burst, timeout_s=timeout, api_key=key, gpu_memory_limit=gpu_memory_limit)
        if url:
            result = profile_server(url, log_text=log_text, **options)
        else:
            with _sigterm_as_interrupt():
                typer.echo(f"kvplan: starting vLLM ({binary}) on 127.0.0.1 ...", err=True)
                with launch_vllm(plan_result, vllm_bin=binary, log_path=log,
                                 startup_timeout_s=startup_timeout) as server:
                    typer.echo(f"kvplan: vLLM serving at {server.base_url} after {server.startup_seconds:.0f} s "
                               f"(pid {server.pid}, log {server.log_path}); profiling ...", err=True)
                    result = profile_server(server.base_url, log_text=server.log_text(), **options)
                    result = result.with_launch({"argv": list(server.argv), "pid": server.pid,
                                                 "log_path": str(server.log_path),
                                                 "startup_seconds": round(server.startup_seconds or 0.0, 1)})
    except UsageError as exc:
        _fail(exc)
    except LaunchFailed as exc:
        typer.echo(f"kvplan: error: vLLM did not start: {exc}", err=True)
        raise typer.Exit(1)
    except ProfileError as exc:
        _fail(exc, 1)
    except KeyboardInterrupt:
        typer.echo("kvplan: interrupted (any server kvplan started has been stopped)", err=True)
        raise typer.Exit(130)
    _write(result, fmt, output)
    raise typer.Exit(0 if result.ok else 1)


#: plan flags that already say how much KV memory the server has
_KV_MEMORY_FLAGS = ("--from-log", "--kv-cache-memory", "--kv-cache-memory-bytes")


def plan_for_server(plan_args: list[str], log: Optional[Path]):
    """The plan a server is measured against (None without plan flags). With the server's log
    (``--url URL --log FILE``) the plan takes the KV memory the log states ("Explicitly set ... GiB
    for KV cache", "Available KV cache memory") as ``plan --from-log`` does, unless the plan flags
    already give it: the log is a measurement of this very server, an estimate is not."""
    if not plan_args:
        return None
    from ..serve_flags import plan_from_args

    given = any(a == f or a.startswith(f + "=") for a in plan_args for f in _KV_MEMORY_FLAGS)
    if log is not None and not given:
        plan_args = [*plan_args, "--from-log", str(log)]
    return plan_from_args(plan_args)


def _write(result, fmt: str, output: Optional[Path]) -> None:
    try:
        reports.emit("profile", fmt, result, output=output)
    except OSError as exc:
        _fail(UsageError(f"--output {output}: cannot write: {exc.strerror or exc}"))


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """A SIGTERM to kvplan (a CI time-out, kill) becomes KeyboardInterrupt, so the launched
    server is stopped on the way out instead of being orphaned."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):  # pragma: no cover - signal path
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def register(app: typer.Typer) -> None:
    from ..serve_flags import help_lines

    app.command("profile", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
                epilog="Plan flags (as for kvplan plan; every other option is one of these):\n\n" + help_lines()
                )(profile_cmd)
