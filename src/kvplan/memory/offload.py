"""Weights in CPU memory (``--cpu-offload-gb``) and V0's CPU swap space (``--swap-space``).

``--cpu-offload-gb X``: ``make_layers`` hands every decoder layer of the stage, in order, to the
offloader (``maybe_offload_to_cpu`` in ``model_executor/models/utils.py``, 0.6.4.post1-0.14.0;
``UVAOffloader._maybe_offload_to_cpu`` in ``model_executor/offloader/uva.py``, 0.19.0/0.33.0), which
moves whole parameters to pinned CPU memory while fewer than X GiB have moved: the parameter that
crosses the limit moves too, the embedding, the LM head and a vision tower stay. Those bytes leave the
GPU's weights and the KV budget gains them; the host holds them, pinned, per GPU. V1 (and 0.8+)
reads them in place through unified addressing (``get_cuda_view_from_cpu_tensor``); V0 copies an
offloaded layer's parameters to the GPU for every forward (``functional_call`` over
``v.to(device)``), so the profile's peak holds one such layer's copy on top of its activations.

``--swap-space X`` (GiB per GPU, default 4): V0 allocates ``X·GiB // bytes_per_block`` KV blocks in
CPU memory per worker (``CacheEngine``); V1 allocates none. Up to 0.17 every engine checks it against
the host's memory (``CacheConfig.verify_with_parallel_config``: X × TP over 70 % of the RAM raises
"Too large swap space", over 40 % warns); 0.18 removed the flag.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..models import params as mparams
from ..models.spec import ModelSpec, Quantization
from . import error_texts as et
from .semantics import VllmSemantics

GIB = 1 << 30
SWAP_SPACE_DEFAULT_GIB = 4.0


@dataclass(frozen=True)
class OffloadedWeights:
    """What ``--cpu-offload-gb`` moves off one GPU of a stage."""

    bytes: int  # parameters moved to pinned CPU memory (what vLLM 0.19 logs as "Total CPU offloaded parameters")
    layers_touched: int  # decoder layers with at least one parameter moved
    largest_layer_bytes: int  # the most one layer moved (V0 copies it back for every forward)


def _layer_parameters(spec: ModelSpec, layer_index: int, tp: int, dtype_bytes: int,
                      quant: Quantization | None) -> list[int]:
    """The parameters of one decoder layer on one rank, in creation order, with q/k/v fused as
    ``QKVParallelLinear`` holds them (their scales counted with them)."""
    out: list[int] = []
    qkv = 0.0
    for t in mparams.layer_tensors(spec, spec.layers[layer_index]):
        nbytes = t.numel_per_rank(tp) * mparams.bytes_per_param(t, quant, dtype_bytes)
        if t.name in ("q_proj", "k_proj", "v_proj"):
            qkv += nbytes
            if t.name == "v_proj":
                out.append(int(qkv))
                qkv = 0.0
            continue
        out.append(int(nbytes))
    return out


def offloaded_weights(spec: ModelSpec, cpu_offload_gb: float, layers: range, tp: int, dtype_bytes: int,
                      quant: Quantization | None) -> OffloadedWeights:
    """Parameters moved off one GPU of the stage holding ``layers`` (the module docstring's rule)."""
    limit = int(cpu_offload_gb * GIB)
    moved, touched, largest = 0, 0, 0
    for i in layers:
        if moved >= limit:
            break
        in_layer = 0
        for nbytes in _layer_parameters(spec, i, tp, dtype_bytes, quant):
            if moved >= limit:
                break
            moved += nbytes
            in_layer += nbytes
        if in_layer:
            touched += 1
            largest = max(largest, in_layer)
    return OffloadedWeights(moved, touched, largest)


def swap_space_bytes(swap_space_gib: float | None) -> int:
    return int((SWAP_SPACE_DEFAULT_GIB if swap_space_gib is None else swap_space_gib) * GIB)


def num_cpu_blocks(sem: VllmSemantics, swap_space_gib: float | None, bytes_per_block: int) -> int:
    """V0's CPU blocks: ``int(swap_space_bytes // cache_block_size)`` (worker.py
    ``determine_num_available_blocks``); 0 on V1, which never allocates them."""
    if sem.engine != "V0" or not bytes_per_block:
        return 0
    return swap_space_bytes(swap_space_gib) // bytes_per_block


def swap_space_check(sem: VllmSemantics, swap_space_gib: float | None, tp: int, host_memory_bytes: int | None,
                     ) -> tuple[str, str] | None:
    """("error"|"warning", text) of ``CacheConfig.verify_with_parallel_config`` (0.6-0.17), when the
    host's memory is known and the swap space of the node's TP workers passes 70 % / 40 % of it."""
    if host_memory_bytes is None or not sem.checks_swap_space:
        return None
    usage = swap_space_bytes(swap_space_gib) * tp
    text = et.SWAP_SPACE.format(usage=sem.gib(usage), total=sem.gib(host_memory_bytes)) + "."
    if usage > 0.7 * host_memory_bytes:
        return "error", text
    if usage > 0.4 * host_memory_bytes:
        return "warning", "Possibly too large swap space. " + text.removeprefix("Too large swap space. ")
    return None
