"""What ``--enable-lora`` costs on the GPU and in host memory, as vLLM allocates it.

vLLM never measures LoRA apart: ``LoRAModelManager._create_lora_modules`` wraps every supported
module of the model at start-up and each wrapper's ``create_lora_weights`` allocates stacked A and B
buffers for ``max_loras`` adapters at ``max_lora_rank`` (zeros, in ``lora_dtype``: the model dtype
under ``auto``), whether or not an adapter ever uses that module. These buffers are created inside
the model-loading measurement from 0.8 (``GPUModelRunner.load_model``: ``load_lora_model`` within
``DeviceMemoryProfiler``; V0 ``ModelRunner.load_model`` the same in 0.8.5/0.10.1.1), after it in
0.6.4.post1 (V0: ``create_lora_manager`` follows the "Loading model weights took" line); either way
they stay allocated through profiling and come off the KV budget.

Shapes per wrapped module on one TP rank (``lora/layers/base_linear.py``, ``column_parallel_linear.py``,
``row_parallel_linear.py``, ``replicated_linear.py``, ``fused_moe.py``, ``vocal_parallel_embedding.py``,
``logits_processor.py`` in 0.19.0 and 0.12.0; ``lora/layers.py`` in 0.6.4.post1, 0.8.5 and 0.10.1.1),
with M = max_loras and r = max_lora_rank:

* column-parallel (q/k/v, gate/up; one A and one B per output slice): A ``(M, 1, r, in)``, the
  whole input on every rank, B ``(M, 1, out/tp, r)``; fully sharded LoRA splits A's rank instead;
* row-parallel (o, down): A ``(M, 1, r, in/tp)``, B ``(M, 1, out, r)``, the whole output;
* replicated (MoE router, MLA's down-projections): A ``(M, 1, r, in)``, B ``(M, 1, out, r)``;
* fused MoE experts (0.12+; before, the experts were not wrapped): w13 A ``(M, E, r, H)`` and
  B ``(M, E, I/tp, r)`` per gate/up slice, w2 A ``(M, E, r, I/tp)`` and B ``(M, E, H, r)``;
* the input embedding: A ``(M, V + extra, r)`` over the *whole* vocabulary on every rank, B
  ``(M, 1, H, r)``; the LM head (the logits processor's wrapper): A ``(M, 1, r, H)``, B
  ``(M, 1, V', r)`` with V' the whole vocabulary (0.12+) or, up to 0.11, the vocabulary plus the
  extra LoRA vocabulary rounded up to 256 (``lora_vocab_padding_size``); up to 0.11 each of the two
  also keeps ``(M, extra, H)`` embeddings for the adapters' added tokens (``lora_extra_vocab_size``,
  default 256; removed in 0.12).

Up to 0.11 the models that reserve the extra LoRA vocabulary (Llama, Mistral, Mixtral, Granite, ...:
``unpadded_vocab_size += lora_config.lora_extra_vocab_size``) also grow their own embedding by the
extra rows and pad their LM head to 256 rows instead of 64 (``padding_size=lora_vocab_padding_size``).

Host memory: every worker keeps up to ``max_cpu_loras`` adapters in CPU memory (the LRU cache of
``LRUCacheWorkerLoRAManager``), whole (unsharded, as loaded from the checkpoint); kvplan states the
largest such adapter: every wrapped module at ``max_lora_rank``.

The dummy-LoRA profile run (``maybe_setup_dummy_loras``: M adapters of rank min(8, r), built on the
CPU and copied into the stacked buffers) allocates nothing new on the GPU; the punica kernels' float32
shrink buffer ``(slices, tokens, r)`` is the only LoRA activation (:func:`lora_activation_bytes`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..models import params as mparams
from ..models.spec import ModelSpec, MoEMLP
from .kv_specs import cdiv
from .semantics import VllmSemantics

#: ``LoRAConfig.lora_vocab_padding_size`` (0.6.4.post1-0.11.0): the LM head's rows under LoRA
LORA_VOCAB_PADDING = 256
#: model types whose vLLM class grows its embedding and LM head by the extra LoRA vocabulary up to
#: 0.11 (``lora_extra_vocab_size`` in the model file, read in 0.8.5: llama.py serves Llama and Mistral)
_EXTRA_VOCAB_MODEL_TYPES = frozenset({
    "llama", "mistral", "mixtral", "granite", "granitemoe", "granitemoeshared", "nemotron", "nemotron-nas",
    "phimoe", "exaone", "solar", "minicpm", "cohere", "commandr", "jamba", "bamba", "mamba", "mamba2", "zamba2",
    "grok-1", "gpt_bigcode"})
#: merged gate/up projections: MergedColumnParallelLinearWithLoRA keeps one A and B per slice
_GATE_UP = ("gate_up_proj", "shared_gate_up")


@dataclass(frozen=True)
class LoRAConfig:
    """vLLM's LoRA flags (``--enable-lora`` and the ``--max-lora*`` family), as vLLM names them."""

    max_loras: int = 1
    max_lora_rank: int = 16
    max_cpu_loras: Optional[int] = None  # None: max_loras (LoRAConfig.__post_init__)
    lora_dtype: str = "auto"  # auto (the model dtype), float16, bfloat16
    fully_sharded_loras: bool = False
    lora_extra_vocab_size: Optional[int] = None  # None: the version's default (256 up to 0.11; gone in 0.12)

    @property
    def cpu_loras(self) -> int:
        return self.max_cpu_loras if self.max_cpu_loras is not None else self.max_loras


@dataclass(frozen=True)
class LoRAMemory:
    """One GPU's LoRA memory, in bytes, and the host memory of one worker's adapter cache."""

    stacked_bytes: int  # the stacked A/B buffers of every wrapped module (and the extra-vocab embeddings)
    base_vocab_bytes: int  # the base embedding / LM head growth for the extra LoRA vocabulary (up to 0.11)
    adapter_bytes: int  # one adapter at max_lora_rank on every wrapped module, whole (host copy)
    host_bytes: int  # max_cpu_loras adapters in one worker's CPU cache
    modules: int  # wrapped modules on this GPU
    extra_vocab: int

    @property
    def gpu_bytes(self) -> int:
        return self.stacked_bytes + self.base_vocab_bytes


def lora_dtype_bytes(config: LoRAConfig, model_dtype_bytes: int) -> int:
    return model_dtype_bytes if config.lora_dtype in ("auto", None, "") else 2


def extra_vocab(config: LoRAConfig, sem: VllmSemantics) -> int:
    """The extra LoRA vocabulary: ``lora_extra_vocab_size`` (default 256) up to 0.11; 0.12 removed it."""
    if not sem.lora_extra_vocab:
        return 0
    return 256 if config.lora_extra_vocab_size is None else config.lora_extra_vocab_size


def _linear_ab(t: mparams.Tensor, tp: int, rank: int, fully_sharded: bool, slices: int = 1) -> tuple[int, int, int]:
    """(A elements, B elements, whole-adapter elements) of one linear tensor's LoRA on one rank, M = 1;
    ``slices``: the output slices a merged column-parallel layer keeps apart (gate and up: 2)."""
    inp = t.group_dim
    if not inp:
        return 0, 0, 0
    out_total = t.numel // inp
    whole = rank * (slices * inp + out_total)
    if t.shard == "col":
        out_rank = int(t.numel_per_rank(tp)) // inp
        rank_a = rank // tp if fully_sharded else rank
        return slices * rank_a * inp, out_rank * rank, whole
    if t.shard == "row":
        out_b = out_total // tp if fully_sharded else out_total
        return rank * (inp // tp), out_b * rank, whole
    return slices * rank * inp, out_total * rank, whole


def _expert_ab(spec: ModelSpec, mlp: MoEMLP, tp: int, rank: int) -> tuple[int, int, int]:
    """FusedMoEWithLoRA (0.12+): w13 and w2 stacked per expert, M = 1."""
    e, h, inter = mlp.num_experts, spec.hidden_size, mlp.expert_intermediate_size
    up = 2 if mlp.gated else 1
    a = e * (up * rank * h + rank * (inter // tp))
    b = e * (up * (inter // tp) * rank + h * rank)
    whole = e * (up * rank * (h + inter) + rank * (inter + h))
    return a, b, whole


def lora_memory(spec: ModelSpec, config: LoRAConfig, sem: VllmSemantics, tp: int, layers: range,
                first_stage: bool, last_stage: bool, model_dtype_bytes: int) -> LoRAMemory:
    """The LoRA buffers on one GPU of the pipeline stage holding ``layers`` (see the module docstring)."""
    rank, slots = config.max_lora_rank, config.max_loras
    elem = lora_dtype_bytes(config, model_dtype_bytes)
    extra = extra_vocab(config, sem)
    per_slot = 0  # elements of one adapter slot on this rank
    whole = 0  # elements of one whole adapter
    modules = 0
    for i in layers:
        layer = spec.layers[i]
        for t in mparams.layer_tensors(spec, layer):
            if t.expert:
                continue
            if not (t.quantizable or t.name == "router"):
                continue
            if t.name == "router":  # ReplicatedLinear(H, E): no group_dim recorded
                t = mparams.Tensor("router", t.numel, "rep", group_dim=spec.hidden_size)
            slices = 2 if t.name in _GATE_UP and getattr(layer.mlp, "gated", False) else 1
            a, b, w = _linear_ab(t, tp, rank, config.fully_sharded_loras, slices)
            per_slot += a + b
            whole += w
            modules += 1
        if isinstance(layer.mlp, MoEMLP) and sem.lora_wraps_moe_experts:
            a, b, w = _expert_ab(spec, layer.mlp, tp, rank)
            per_slot += a + b
            whole += w
            modules += 1
    vocab, hidden = spec.vocab_size, spec.hidden_size
    base_vocab = 0
    if first_stage:  # VocabParallelEmbeddingWithLoRA (+ its added-token embeddings up to 0.11)
        per_slot += (vocab + extra) * rank + hidden * rank + extra * hidden
        whole += (vocab + hidden) * rank
        modules += 1
        if extra and spec.model_type in _EXTRA_VOCAB_MODEL_TYPES:
            base_vocab += cdiv(extra, mparams.VOCAB_PADDING) * mparams.VOCAB_PADDING * hidden // tp
    if last_stage:  # LogitsProcessorWithLoRA
        # up to 0.11 the logits processor's vocabulary is the model's unpadded one: the extra LoRA rows
        # only for the models that add them (unpadded_vocab_size), rounded up to lora_vocab_padding_size
        grown = vocab + (extra if spec.model_type in _EXTRA_VOCAB_MODEL_TYPES else 0)
        vocab_b = vocab if not extra else cdiv(grown, LORA_VOCAB_PADDING) * LORA_VOCAB_PADDING
        per_slot += rank * hidden + vocab_b * rank + extra * hidden
        whole += (vocab + hidden) * rank
        modules += 1
        if extra and spec.model_type in _EXTRA_VOCAB_MODEL_TYPES and not spec.tie_word_embeddings:
            padded = cdiv(vocab, LORA_VOCAB_PADDING) * LORA_VOCAB_PADDING + cdiv(extra, LORA_VOCAB_PADDING) * \
                LORA_VOCAB_PADDING
            base_rows = cdiv(vocab, mparams.VOCAB_PADDING) * mparams.VOCAB_PADDING
            base_vocab += (cdiv(padded, tp) - cdiv(base_rows, tp)) * hidden
    adapter = whole * elem
    return LoRAMemory(stacked_bytes=slots * per_slot * elem, base_vocab_bytes=base_vocab * model_dtype_bytes,
                      adapter_bytes=adapter, host_bytes=config.cpu_loras * adapter, modules=modules,
                      extra_vocab=extra)


def lora_activation_bytes(spec: ModelSpec, config: LoRAConfig, tokens: int) -> int:
    """The punica shrink buffer live inside the widest LoRA linear of the profile's forward:
    ``torch.empty((len(output_slices), tokens, r), dtype=float32)`` (``PunicaWrapperGPU.add_lora_linear``,
    0.19.0; the same shape in 0.8.5's ``punica_gpu.py``): three slices for q/k/v."""
    return 3 * tokens * config.max_lora_rank * 4
