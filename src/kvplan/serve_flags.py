"""``SERVE_FLAGS``: vLLM's serve flags (and kvplan's words for the deployment: GPU, vLLM version),
declared once. Every front end that plans derives its vocabulary from this table: the options of
``kvplan plan | simulate | tune | calibrate | preflight`` (``kvplan.cli.options.serve_options``),
``profile``'s pass-through flags and the page's argv (:func:`parse_argv`), the keys of a
``preflight --config`` file (:func:`config_types`), the page's allow-list, a pasted ``vllm serve``
line (:func:`parse_serve_argv`) and its reverse (:func:`serve_argv`). The rules that turn the
values into a :class:`~kvplan.memory.PlanRequest`, merged with a start-up log and a custom GPU,
are :func:`request_from_values`.

Adding a vLLM serve flag (``--foo-bar``), in three places and nothing else:

1. **The table**: a :class:`ServeFlag` row in :data:`SERVE_FLAGS` below: its field (vLLM's
   name, ``foo_bar``), its names (vLLM's, first the long one), its type (``int``, ``float``,
   ``str`` or ``bool``; a bool is ``--foo-bar/--no-foo-bar``, vLLM's BooleanOptionalAction),
   its default (``None``: vLLM's own, resolved by whoever reads it), a help line (as vLLM's, with
   what kvplan does with it), ``from_log=True`` if a start-up log's ``non-default args`` should
   fill it, ``vllm=False`` for kvplan's own words. Every command, the config file, the page and
   ``--from-serve-cmd`` then take it; ``tests/test_serve_flags.py`` checks they do.
2. **The request**: a field of the same name in :class:`kvplan.memory.request.PlanRequest`
   (default ``None``, so that a request without the flag is the request it was).
3. **Its consumer**: the code that reads ``request.foo_bar`` (the planner's stages in ``memory/``,
   the simulator in ``sim/``, ...), and its tests. If vLLM's own rule for the default depends on
   the version, the rule goes to ``memory/semantics.py``, as the others do.

A value passes to the request as given (or as a log's, with ``from_log``); a flag that needs a
rule of its own (a unit, a JSON text, a file) gets it in :func:`request_from_values` (and its field
in ``_RULED``). The simulator reads its flags from the request too (``simulate()``'s keyword
arguments default to the request's values). If the flag was listed in ``traffic/bench_cmd.py``'s
``_SERVE_IGNORED`` or ``_SERVE_UNSUPPORTED`` (a pasted ``vllm serve`` line named it before kvplan
modelled it), take it out there; if its value names a file or a model on the server, add it to the
page's ``NOT_FROM_THE_PAGE`` (``ui/api.py``).

Only the standard library at module level: ``kvplan plan`` must start fast (the CLI imports this
table to declare its options; the library is imported inside the functions).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Collection, Iterable, Mapping, Optional

from . import flags
from .errors import UsageError
from .flags import Flag, kinds, values_from_split

if TYPE_CHECKING:  # the data the functions below build; imported when they run
    from .memory import PlanRequest, PlanResult


class ServeFlag(Flag):
    """One serve flag: a :class:`~kvplan.flags.Flag` whose field is the PlanRequest's, with the rules
    that merge it with a start-up log (``from_log``) and vLLM's command line (``vllm``, ``sizes``).
    Every on/off flag is --x/--no-x, as vLLM's BooleanOptionalAction."""

    __slots__ = ()

    def __new__(cls, field: str, names: tuple, type: type, default: Any, help: str, *, from_log: bool = False,
                vllm: bool = True, sizes: bool = False, choices: tuple = ()) -> "ServeFlag":
        return super().__new__(cls, field, names, type, default, help, True, choices, from_log, vllm, sizes)


_MODEL_HELP = "HF id or alias from the catalog, config.json, or model folder."

#: vLLM's serve flags and kvplan's words for the deployment, in ``--help`` order
SERVE_FLAGS: tuple[ServeFlag, ...] = (
    ServeFlag("model", ("--model", "-m"), str, None, _MODEL_HELP),
    ServeFlag("gpu", ("--gpu",), str, None, "GPU name from the catalog (see `kvplan gpus`).", vllm=False),
    ServeFlag("gpu_memory", ("--gpu-memory",), str, None,
              "Total memory of one GPU: as CUDA reports it (79.19GiB), or the size it is sold as (24GB: read from "
              "the catalog's cards of that size, and the plan says how).", vllm=False),
    ServeFlag("device", ("--device",), str, "cuda", "cuda, or cpu for vLLM's CPU backend."),
    ServeFlag("tensor_parallel_size", ("--tensor-parallel-size", "-tp"), int, 1,
              "GPUs each layer is split over (must divide the attention heads).", from_log=True),
    ServeFlag("pipeline_parallel_size", ("--pipeline-parallel-size", "-pp"), int, 1,
              "Pipeline stages (the layers split into consecutive groups).", from_log=True),
    ServeFlag("data_parallel_size", ("--data-parallel-size", "-dp"), int, 1, "Replicas of the model.",
              from_log=True),
    ServeFlag("dtype", ("--dtype",), str, "auto",
              "Weights and activations: auto (config.json's torch_dtype; float32 checkpoints served in bf16/fp16 "
              "as vLLM does), float16, bfloat16 or float32.", from_log=True),
    ServeFlag("quantization", ("--quantization", "-q"), str, None,
              "vLLM's --quantization: the checkpoint's own method (read from config.json when omitted), or "
              "online fp8 / bitsandbytes.", from_log=True),
    ServeFlag("kv_cache_dtype", ("--kv-cache-dtype",), str, "auto",
              "auto (the model dtype), fp8, fp8_e4m3, fp8_e5m2, fp8_ds_mla, … as vLLM names them.", from_log=True),
    ServeFlag("gpu_memory_utilization", ("--gpu-memory-utilization",), float, None,
              "Share of each GPU's memory vLLM may use, in (0, 1] (default: the vLLM version's, 0.92 from 0.20, "
              "0.90 before).", from_log=True),
    ServeFlag("max_model_len", ("--max-model-len",), str, None, "Tokens; 32k = 32000, 32K = 32768, auto = fit "
              "the cache.", sizes=True),
    ServeFlag("max_num_seqs", ("--max-num-seqs",), int, None,
              "Most requests in one batch (default: vLLM's for the GPU and version).", from_log=True),
    ServeFlag("max_num_batched_tokens", ("--max-num-batched-tokens",), str, None,
              "Token budget of one scheduler step (default: vLLM's).", sizes=True),
    ServeFlag("block_size", ("--block-size",), int, None,
              "Tokens per KV block (default: the attention backend's, 16 on CUDA, 128 on CPU).", from_log=True),
    ServeFlag("enforce_eager", ("--enforce-eager",), bool, False, "No CUDA graphs (no graph memory).",
              from_log=True),
    ServeFlag("vllm_version", ("--vllm-version",), str, None,
              "Follow this vLLM version's rules: 0.6 to 0.33 (default 0.33).", vllm=False),
    ServeFlag("engine", ("--engine",), str, None, "v0 or v1 where VLLM_USE_V1 chose (vLLM 0.7-0.10).", vllm=False),
    ServeFlag("kv_cache_memory", ("--kv-cache-memory",), str, None,
              "KV memory per GPU (GiB unless a unit is given), as vLLM's 'Available KV cache memory'.",
              sizes=True, vllm=False),
    ServeFlag("kv_cache_memory_bytes", ("--kv-cache-memory-bytes",), str, None,
              "vLLM's flag: exact KV bytes per GPU.", sizes=True),
    ServeFlag("num_gpu_blocks_override", ("--num-gpu-blocks-override",), int, None,
              "vLLM's flag: this many KV blocks, whatever the memory.", from_log=True),
    ServeFlag("gpus_per_node", ("--gpus-per-node",), int, 8, "GPUs in one node (multi-node layouts).", vllm=False),
    ServeFlag("disable_hybrid_kv_cache_manager", ("--disable-hybrid-kv-cache-manager",), bool, False,
              "vLLM's flag: every layer gets full-context KV (no sliding-window savings)."),
    ServeFlag("entrypoint", ("--entrypoint",), str, "serve",
              "serve (`vllm serve`) or offline (the LLM(...) class, also llm): vLLM gives them different batch "
              "defaults (8,192 batched tokens, not 2,048, offline on GPUs under 70 GiB); simulate runs offline "
              "without an API server (no HTTP, nothing streamed).", vllm=False),
    ServeFlag("flashinfer_sampler", ("--flashinfer-sampler",), bool, None,
              "Whether vLLM's sampler runs FlashInfer (default: the version's, with FlashInfer installed as in the "
              "release images). --no-flashinfer-sampler: PyTorch-native top-k/top-p, e.g. a plain `pip install "
              "vllm` of 0.10-0.11, whose wheels do not require flashinfer-python.", vllm=False),
    ServeFlag("vllm_install", ("--vllm-install",), str, None,
              "How vLLM was installed: pip (pip, uv or conda install of the wheel, or a build from source) or "
              "docker (the vllm/vllm-openai release image). Decides the sampler of 0.8-0.11.0, whose wheels do not "
              "require FlashInfer and whose images ship it (default: planned as the image, the pip case shown).",
              vllm=False, choices=("pip", "docker")),
    # serve flags that move memory beyond the KV cache (memory/lora.py, spec_decode.py, offload.py)
    ServeFlag("enable_lora", ("--enable-lora",), bool, False, "vLLM's flag: LoRA adapters (stacked A/B buffers for "
              "--max-loras adapters at --max-lora-rank on every module).", from_log=True),
    ServeFlag("max_loras", ("--max-loras",), int, 1, "With --enable-lora: adapters in one batch (GPU slots).",
              from_log=True),
    ServeFlag("max_lora_rank", ("--max-lora-rank",), int, 16, "With --enable-lora: the largest adapter rank.",
              from_log=True),
    ServeFlag("max_cpu_loras", ("--max-cpu-loras",), int, None,
              "With --enable-lora: adapters cached in host memory (default: --max-loras).", from_log=True),
    ServeFlag("lora_dtype", ("--lora-dtype",), str, "auto", "auto (the model dtype), float16 or bfloat16.",
              from_log=True),
    ServeFlag("speculative_config", ("--speculative-config",), str, None,
              "vLLM's JSON, e.g. '{\"method\": \"eagle3\", \"model\": \"...\", \"num_speculative_tokens\": 3}': the "
              "drafter's weights, KV layers and profile.", from_log=True),
    ServeFlag("cpu_offload_gb", ("--cpu-offload-gb",), float, 0.0,
              "GiB of weights per GPU kept in pinned host memory (read over PCIe each step).", from_log=True),
    ServeFlag("swap_space", ("--swap-space",), float, None,
              "V0: GiB of CPU swap per GPU (default 4); checked against host memory up to vLLM 0.17.", from_log=True),
    ServeFlag("enable_chunked_prefill", ("--enable-chunked-prefill",), bool, None,
              "vLLM's switch (default: the version's): without it a step holds a whole max-length prompt (V1 "
              "honours it from 0.12; V0 turns it on by itself above 32K).", from_log=True),
    ServeFlag("host_memory", ("--host-memory",), str, None, "The host's RAM (e.g. 512GiB): vLLM's swap-space check, "
              "and the host memory the serve flags ask for against it.", vllm=False, sizes=True),
    # the scheduler's flags (sim/simulate.py reads them)
    ServeFlag("enable_prefix_caching", ("--enable-prefix-caching",), bool, None,
              "vLLM's automatic prefix caching (default: on; --no-enable-prefix-caching turns it off)."),
    ServeFlag("long_prefill_token_threshold", ("--long-prefill-token-threshold",), int, None,
              "vLLM's flag: a prompt longer than this is a long prefill, limited per step (default 0: none)."),
    ServeFlag("async_scheduling", ("--async-scheduling",), bool, None,
              "vLLM's asynchronous scheduling (default: on, off on the CPU backend; --no-async-scheduling turns "
              "it off)."),
    ServeFlag("enable_expert_parallel", ("--enable-expert-parallel",), bool, None,
              "vLLM's --enable-expert-parallel: MoE experts split whole over the ranks.", from_log=True),
    ServeFlag("api_server_count", ("--api-server-count",), int, None,
              "vLLM's API server processes (default: 1 up to 0.14, the DP size from 0.15): each renders, "
              "tokenizes and streams its share of the requests (sim/frontend.py).", from_log=True),
    # the traffic the serve flags meet (sim/serve_flag_costs.py reads them; the plan does not)
    ServeFlag("spec_acceptance", ("--spec-acceptance",), float, None,
              "With --speculative-config, for simulate: vLLM's draft acceptance rate in [0, 1] "
              "(vllm:spec_decode_num_accepted_tokens_total / vllm:spec_decode_num_draft_tokens_total; `kvplan "
              "watch` shows a server's): a step emits 1 + k x this tokens per request [0].", vllm=False),
    ServeFlag("active_loras", ("--active-loras",), int, None,
              "With --enable-lora, for simulate: adapters active in a step, whose kernels it times [--max-loras].",
              vllm=False),
    # the deployment around vLLM (sim/balancer.py)
    ServeFlag("load_balancer", ("--load-balancer",), str, None,
              "With -dp: how requests reach the replicas: vllm (vLLM's own, per version), round_robin, random, "
              "least_outstanding [vllm].", vllm=False),
)

BY_FIELD: dict[str, ServeFlag] = {f.field: f for f in SERVE_FLAGS}
#: every spelling (negative forms included) -> its flag
BY_NAME: dict[str, ServeFlag] = {n: f for f in SERVE_FLAGS for n in f.all_names()}
#: the fields, in table order (the keys a values mapping may hold)
FIELDS: tuple[str, ...] = tuple(BY_FIELD)

#: the option ``kvplan plan`` adds to the table: a start-up log whose values fill the flags not given
FROM_LOG_HELP = "A vLLM start-up log: use its measured KV memory and flags."
FROM_LOG = Flag("from_log", ("--from-log",), str, None, FROM_LOG_HELP)


def defaults() -> dict[str, Any]:
    """Every flag's default, by field."""
    return {f.field: f.default for f in SERVE_FLAGS}


def values_of(params: Mapping[str, Any], *, skip_none: bool = True) -> dict[str, Any]:
    """The serve flags among a command's parameters or a config file's settings, in table order;
    ``skip_none`` leaves the unset ones out (their defaults come from :func:`request_from_values`)."""
    return {k: params[k] for k in FIELDS if k in params and not (skip_none and params[k] is None)}


def config_types(flag: ServeFlag) -> tuple[type, ...]:
    """The YAML/TOML types a ``preflight --config`` file may give for the flag."""
    if flag.sizes:
        return (int, float, str)
    if flag.type is float:
        return (int, float)
    return (flag.type,)


def help_lines() -> str:
    """One paragraph per flag (names and help): the help of commands that take the plan flags
    through :func:`parse_argv` (``kvplan profile``)."""
    lines = []
    for f in SERVE_FLAGS:
        names = ", ".join(f.names if f.type is not bool else (f"{f.flag}/{f.negative}", *f.names[1:]))
        lines.append(f"{names}: {f.help}")
    lines.append(f"--from-log: {FROM_LOG_HELP}")
    return "\n\n".join(lines)


# ---------------------------------------------------------------------------------------------- argv
def serve_flag_kinds() -> dict[str, str]:
    """Every spelling of every flag -> "flag" (takes no value) or "value": what
    :func:`kvplan.flags.split_argv` needs to split a command line."""
    return kinds(SERVE_FLAGS)


def parse_serve_argv(split: Mapping[str, Any]) -> dict[str, Any]:
    """Split flags (``{"--max-num-seqs": "64", "--no-enforce-eager": True}``, any spelling of
    :data:`SERVE_FLAGS`) -> values by field, each read as its type."""
    return values_from_split(split, SERVE_FLAGS)


def parse_argv(argv: Iterable[Any], *, what: str = "plan flags") -> tuple[dict[str, Any], Optional[str]]:
    """kvplan's spelling of the flags (``["--model", "x", "-tp", "2", "--enforce-eager"]``, also
    ``--flag=value``) -> (values by field, the ``--from-log`` path or None). An unknown flag, a
    missing or malformed value is a UsageError naming it."""
    values, _ = flags.parse_argv(argv, (*SERVE_FLAGS, FROM_LOG), what=what)
    return values, values.pop("from_log", None)


def serve_argv(values: Mapping[str, Any], model: Optional[str] = None) -> list[str]:
    """The ``vllm serve`` argv of these values (the vLLM flags among them; None and kvplan's own
    words left out): the reverse of :func:`parse_serve_argv`."""
    values = dict(values)
    model = model if model is not None else values.pop("model", None)
    argv = ["vllm", "serve"] + ([str(model)] if model is not None else [])
    for f in SERVE_FLAGS:
        value = values.get(f.field)
        if f.field == "model" or value is None or not f.vllm:
            continue
        if f.type is bool:
            argv.append(f.flag if value else f.negative)
        else:
            argv += [f.flag, str(value)]
    return argv


# ---------------------------------------------------------------------------------- the plan request
def human_int(text: str, what: str, allow_auto: bool = False) -> int:
    """vLLM's human_readable_int: '32k' = 32,000, '32K' = 32,768; 'auto'/-1 where allowed."""
    raw = text.strip()
    if allow_auto and raw.lower() in ("auto", "-1"):
        return -1
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if raw and raw[-1] in units:
            return int(float(raw[:-1]) * units[raw[-1]])
        return int(raw)
    except ValueError:
        raise UsageError(f"{what}: cannot read {text!r} as a number (e.g. 8192, 32k, 32K"
                         f"{', auto' if allow_auto else ''})") from None


def request_from_values(values: Mapping[str, Any], given: Collection[str] = frozenset(),
                        log=None) -> "PlanRequest":
    """A :class:`PlanRequest` from the serve flags' values (by field; a missing or None value is
    the flag's default; strings where the flag takes text: ``32k`` lengths, ``79GiB`` sizes),
    with each flag's rule.

    ``log`` is a parsed vLLM start-up log (``--from-log``): its model, GPU memory, measured KV
    memory and the serve flags marked ``from_log`` fill in every flag not named in ``given`` (the
    flags the user gave); a given flag wins over the log even when it equals the default."""
    from .hardware import custom_gpu, find_gpu, parse_size
    from .memory import PlanRequest
    from .memory.defaults import entrypoint_kind

    unknown = set(values) - set(FIELDS)
    if unknown:
        raise TypeError(f"not serve flags: {', '.join(sorted(unknown))}")
    v = {f.field: values[f.field] if values.get(f.field) is not None else f.default for f in SERVE_FLAGS}
    model, gpu, gpu_memory, device = v["model"], v["gpu"], v["gpu_memory"], v["device"]
    vllm_version = v["vllm_version"]
    flags_from_log: dict = log.args if log is not None else {}
    version_notes: tuple[str, ...] = ()  # notes for the plan: a log's version fallback, a custom GPU memory
    if log is not None:
        model = model or log.model
        if log.device == "cpu" and device == "cuda":
            device = "cpu"  # the log is the CPU backend's (its block size, its KV line): plan that
        if not vllm_version and log.vllm_version:
            from .memory.semantics import nearest_supported_version

            vllm_version, note = nearest_supported_version(log.vllm_version)
            version_notes = (f"{note} (read from {log.path or 'the log'})",) if note else ()
    if not model:
        raise UsageError("--model is required" + (" (or a --from-log whose args name the model)"
                                                  if log is not None else ""))
    from .models import load_model

    spec = load_model(model)
    kv_cache_memory, kv_cache_memory_bytes = v["kv_cache_memory"], v["kv_cache_memory_bytes"]
    if gpu_memory:
        from .hardware import read_gpu_memory

        size, read_as = read_gpu_memory(gpu_memory, "--gpu-memory")
        version_notes += (read_as,) if read_as else ()
        label = f"{size / (1 << 30):.2f} GiB"
        if gpu:
            from dataclasses import replace as _replace

            base_gpu = find_gpu(gpu)
            g = _replace(base_gpu, name=f"{base_gpu.name} with {label} (custom memory)", memory_bytes=size,
                         aliases=())
            version_notes += (f"--gpu {gpu} --gpu-memory {gpu_memory}: a {base_gpu.name} (its compute capability, "
                              f"bandwidth and FLOP/s) with {label} of memory instead of its "
                              f"{base_gpu.memory_gib:.2f} GiB (a MIG slice, a partition, or memory other processes "
                              "hold); every memory figure uses the given size.",)
        else:
            g = custom_gpu(size, name=f"{label} GPU")
    elif gpu:
        g = find_gpu(gpu)
    elif log is not None and log.total_gpu_memory_gib:
        g = custom_gpu(int(log.total_gpu_memory_gib * (1 << 30)), "CPU from log" if device == "cpu" else "GPU from log")
    elif device == "cpu":
        g = custom_gpu(parse_size("16GiB"), "CPU")
    elif kv_cache_memory or kv_cache_memory_bytes or (log is not None and log.available_kv_bytes is not None):
        # The KV memory is given or measured, so the GPU's size no longer sets the blocks; it still
        # picks vLLM's batch defaults (the 70-160 GiB tier), which the name says.
        g = custom_gpu(80 * (1 << 30), "unspecified GPU (80 GiB assumed for the batch defaults)")
    else:
        raise UsageError("give --gpu NAME (see `kvplan gpus`) or --gpu-memory SIZE")

    def pick(name):
        return v[name] if name in given or not BY_FIELD[name].from_log else flags_from_log.get(name, v[name])

    gmu = v["gpu_memory_utilization"]
    if log is not None and gmu is None:
        gmu = log.gpu_memory_utilization  # a log that prints it outside its args (0.6-0.8's Namespace)
    gmu = v["gpu_memory_utilization"] if "gpu_memory_utilization" in given else \
        flags_from_log.get("gpu_memory_utilization", gmu)

    kv_bytes = None
    source = "kv_cache_memory"
    if kv_cache_memory_bytes:
        kv_bytes = human_int(str(kv_cache_memory_bytes), "--kv-cache-memory-bytes")
    elif kv_cache_memory:
        # kvplan's flag: what vLLM measured ("Available KV cache memory"), to plan with; the launch
        # line keeps vLLM's own budget (only --kv-cache-memory-bytes, vLLM's flag, goes into it)
        kv_bytes, source = parse_size(kv_cache_memory, "--kv-cache-memory"), "measured"
    elif log is not None and log.available_kv_bytes is not None:
        kv_bytes, source = log.available_kv_bytes, "log"
    max_model_len, mnbt = v["max_model_len"], v["max_num_batched_tokens"]
    mml = human_int(str(max_model_len), "--max-model-len", allow_auto=True) if max_model_len else None
    if mml is None and log is not None:
        mml = log.max_model_len or flags_from_log.get("max_model_len")
    mnbt = human_int(str(mnbt), "--max-num-batched-tokens") if mnbt else flags_from_log.get("max_num_batched_tokens")
    # the flags without a rule of their own: the value, or the log's where the flag says so
    plain = {f.field: _typed(f, pick(f.field)) for f in SERVE_FLAGS if f.field not in _RULED}
    req = PlanRequest(
        model=spec, gpu=g, device=device, max_model_len=mml, max_num_batched_tokens=mnbt,
        vllm_version=vllm_version,
        engine=v["engine"] or (log.engine if log is not None else None),
        kv_cache_memory_bytes=kv_bytes,
        # a given --[no-]flashinfer-sampler, else the sampler the log's engine said it runs
        flashinfer_sampler=log.flashinfer_sampler if v["flashinfer_sampler"] is None and log is not None
        else v["flashinfer_sampler"],
        kv_memory_source=source,
        notes=version_notes,
        speculative_config=_speculative(pick("speculative_config"), spec),
        gpu_memory_utilization=gmu,
        host_memory_bytes=parse_size(v["host_memory"], "--host-memory") if v["host_memory"] else None,
        entrypoint=entrypoint_kind(v["entrypoint"] or "serve"),
        **plain,
    )
    if log is not None and source == "log":
        per_stage = log.available_kv_per_stage(req.tensor_parallel_size, req.pipeline_parallel_size)
        if per_stage is not None:
            from dataclasses import replace

            req = replace(req, kv_cache_memory_per_stage=per_stage)
    return req


#: the fields :func:`request_from_values` reads by a rule of their own (the others go to the request as given)
_RULED = frozenset({"model", "gpu", "gpu_memory", "device", "max_model_len", "max_num_batched_tokens",
                    "vllm_version", "engine", "kv_cache_memory", "kv_cache_memory_bytes", "flashinfer_sampler",
                    "speculative_config", "gpu_memory_utilization", "host_memory", "entrypoint"})


def _typed(flag: ServeFlag, value: Any) -> Any:
    """A flag with a default is read as its type (a log's dtype is a string, its enforce_eager a
    bool, its cpu_offload_gb a float; a None from the log is the default)."""
    if flag.default is None or flag.type not in (str, bool, float):
        return value
    return flag.type(value if value is not None else flag.default)


def _speculative(value: Any, target: Any) -> Any:
    """``--speculative-config`` parsed, with the drafter's config.json where kvplan can load it (a path,
    a catalog id, or the hub when online); otherwise the planner derives the head from the target."""
    if value is None:
        return None
    from dataclasses import replace

    from .errors import UnknownModelError
    from .memory.spec_decode import parse_speculative_config
    from .models import load_model

    config = parse_speculative_config(value)
    if config.model and config.draft is None:
        try:
            config = replace(config, draft=load_model(config.model))
        except (UsageError, UnknownModelError):
            pass  # no config to read: an EAGLE head is derived from the target, a draft model is refused
    return config


def plan_from_values(values: Mapping[str, Any], given: Optional[Collection[str]] = None,
                     from_log: Optional[str] = None) -> tuple["PlanResult", Any]:
    """``kvplan plan``'s result for these flags: (PlanResult, the parsed start-up log or None).
    With ``from_log`` the plan takes the log's measured values and is compared with what vLLM
    logged; ``given`` names the flags that win over the log (default: every flag in ``values``)."""
    from .memory import plan
    from .memory.compare import compare_with_log

    log = None
    if from_log is not None:
        from .memory.startup_log import read_startup_log

        log = read_startup_log(from_log)
    req = request_from_values(values, frozenset(values) if given is None else given, log)
    result = plan(req)
    if log is not None:
        if req.kv_cache_memory_bytes is None:
            from dataclasses import replace

            from .memory.compare import kv_bytes_from_blocks

            measured = kv_bytes_from_blocks(log, result, req)  # the blocks vLLM counted, not an estimate
            if measured:
                req = replace(req, kv_cache_memory_bytes=measured, kv_memory_source="log")
                result = plan(req)
        result = compare_with_log(result, req, log)
    return result, log


def plan_from_args(argv: Iterable[Any]) -> "PlanResult":
    """The PlanResult ``kvplan plan ARGV`` computes, in this process (the flags of this table and
    ``--from-log``). An unknown or malformed flag is a UsageError naming it."""
    values, from_log = parse_argv(argv)
    return plan_from_values(values, frozenset(values), from_log)[0]
