"""Speculative decoding (``--speculative-config``): what the drafter adds to vLLM's memory.

vLLM loads the drafter inside the model-loading measurement (``GPUModelRunner.load_model``:
``self.drafter.load_model(self.model)`` within ``DeviceMemoryProfiler``, 0.8.5-0.19.0), registers its
attention layers next to the target's, so ``get_kv_cache_spec`` gives them KV pages in the same block
pool (one more layer in the full-attention group for an EAGLE head or an MTP layer, every layer of a
draft model), and profiles them: the drafter's dummy run and, on the last rank, a dummy rejection
sampler over one draft token per request (:func:`rejection_sampler_bytes_per_logit`). Per method
(``config/speculative.py``, ``v1/spec_decode/eagle.py``, ``model_executor/models/llama_eagle*.py``,
``deepseek_mtp.py``; read in 0.8.5, 0.9.2, 0.10.1.1, 0.11.0, 0.12.0, 0.14.0, 0.19.0 and 0.33.0):

* ``ngram`` / ``suffix``: no weights, no KV layers; the proposer runs on the CPU;
* ``eagle``: the head's decoder layer(s) plus ``fc`` (2H -> H, replicated); the input embedding and
  the LM head are the target's (``_maybe_share_embeddings`` / ``_maybe_share_lm_head``);
* ``eagle3``: the same layer with a 2H-wide q/k/v input, ``fc`` (3H -> H), its own LM head over
  ``draft_vocab_size`` rows (split over TP) and the int64 ``draft_id_to_target_id`` map; the embedding
  is the target's;
* ``mtp`` (DeepSeek's ``num_nextn_predict_layers``, Qwen3-Next's, GLM's...): each MTP layer is one more
  decoder layer of the target's shape plus ``enorm``/``hnorm`` and ``eh_proj`` (2H -> H, replicated) and
  a ``shared_head`` LM head that vLLM shares with the target from 0.19 (earlier versions keep the copy:
  VllmSemantics.mtp_shares_lm_head); ``num_speculative_tokens`` above the layer count reuses the layers;
* ``draft_model``: a whole second model at the target's TP (V1 from 0.19; 0.10-0.14 refuse it, and
  0.8-0.9 fall back to the V0 engine for it).

V0 (``spec_decode_worker.py``, read in 0.6.4.post1) gives the draft model its own cache with the same
block count: ``split_num_cache_blocks_evenly`` scales the scorer's blocks by ``scorer / (scorer +
proposer)`` bytes per block; kvplan prices a block as both, which agrees to within one block.

Where the head's config.json is not given (the catalog has no EAGLE heads), kvplan derives the head
from the target as the EAGLE papers build it: one decoder layer of the target's attention and dense
MLP shape; the plan says so in a note.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

from ..errors import UsageError
from ..models import params as mparams
from ..models.spec import DenseMLP, FullAttention, Layer, MLAttention, ModelSpec, MoEMLP, SlidingWindowAttention
from .semantics import VllmSemantics

#: method names vLLM folds into ``mtp`` (``MTPModelTypes``, 0.11.0 and 0.19.0)
MTP_METHODS = ("mtp", "deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp", "qwen3_next_mtp", "longcat_flash_mtp",
               "pangu_ultra_moe_mtp")
NO_WEIGHT_METHODS = ("ngram", "[ngram]", "ngram_gpu", "suffix")
#: ``draft_vocab_size`` of the EAGLE-3 authors' heads (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's config.json)
EAGLE3_DRAFT_VOCAB = 32000
KNOWN_METHODS = ("eagle", "eagle3", "draft_model", "medusa", "mlp_speculator") + MTP_METHODS + NO_WEIGHT_METHODS


@dataclass(frozen=True)
class SpeculativeConfig:
    """vLLM's ``--speculative-config`` JSON, the keys that move memory, as vLLM names them; ``draft`` is
    the drafter's architecture where kvplan knows it (the ``model``'s config.json)."""

    method: Optional[str] = None
    model: Optional[str] = None
    num_speculative_tokens: Optional[int] = None
    draft_tensor_parallel_size: Optional[int] = None
    quantization: Optional[str] = None
    draft: Optional[ModelSpec] = None

    def as_json(self) -> str:
        """The flag's value for the serve command."""
        out = {k: getattr(self, k) for k in ("method", "model", "num_speculative_tokens", "draft_tensor_parallel_size",
                                             "quantization") if getattr(self, k) is not None}
        return json.dumps(out, separators=(",", ":"))


#: the keys vLLM's SpeculativeConfig takes (its fields in the 0.10.1.1, 0.19.0 and 0.33.0 wheels, and V0's
#: acceptance options); anything else is a typo vLLM would refuse
_KEYS = frozenset({
    "method", "model", "num_speculative_tokens", "draft_tensor_parallel_size", "tensor_parallel_size", "quantization",
    "prompt_lookup_max", "prompt_lookup_min", "max_model_len", "revision", "code_revision", "speculative_token_tree",
    "disable_by_batch_size", "disable_log_stats", "disable_logprobs", "enable_chunked_prefill", "enforce_eager",
    "disable_padded_drafter_batch", "parallel_drafting", "rejection_sample_method", "moe_backend",
    "use_local_argmax_reduction", "synthetic_acceptance_rate", "synthetic_acceptance_rates",
    "synthetic_acceptance_length", "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob", "attention_backend", "kv_cache_dtype",
    "draft_lm_head_quantization", "disable_eagle_block_drop", "disable_lookahead_block_hashes",
    "enable_adaptive_verification", "index_share_for_mtp_iteration", "num_speculative_tokens_per_batch_size",
    "use_heterogeneous_vocab", "acceptance_method", "posterior_threshold", "posterior_alpha", "draft_vocab_size",
    "dtype"})


def parse_speculative_config(value: Any) -> Optional[SpeculativeConfig]:
    """``--speculative-config`` as given: JSON text, a mapping or a :class:`SpeculativeConfig`."""
    if value is None or isinstance(value, SpeculativeConfig):
        return value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--speculative-config: not JSON ({exc.msg} at character {exc.pos}): {value!r}") from None
    if not isinstance(value, Mapping):
        raise UsageError("--speculative-config must be a JSON object, e.g. "
                         "'{\"method\": \"eagle3\", \"model\": \"...\", \"num_speculative_tokens\": 3}'")
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        raise UsageError(f"--speculative-config: unknown key(s) {', '.join(unknown)} (vLLM's keys include method, "
                         "model, num_speculative_tokens, draft_tensor_parallel_size, quantization)")
    k = value.get("num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise UsageError(f"--speculative-config: num_speculative_tokens must be a positive integer, got {k!r}")
    tp = value.get("draft_tensor_parallel_size")
    if tp is not None and (not isinstance(tp, int) or isinstance(tp, bool) or tp < 1):
        raise UsageError(f"--speculative-config: draft_tensor_parallel_size must be a positive integer, got {tp!r}")
    for key in ("method", "model", "quantization"):
        if value.get(key) is not None and not isinstance(value[key], str):
            raise UsageError(f"--speculative-config: {key} must be a string, got {value[key]!r}")
    return SpeculativeConfig(method=value.get("method"), model=value.get("model"), num_speculative_tokens=k,
                             draft_tensor_parallel_size=tp, quantization=value.get("quantization"))


def infer_method(config: SpeculativeConfig) -> str:
    """``SpeculativeConfig.__post_init__`` (0.19.0): no model -> ngram (or MTP with the target's own
    layers when asked); a model whose name says eagle-/eagle3 -> that; a draft config of an MTP type ->
    mtp; else a draft model."""
    method = (config.method or "").lower()
    if method in MTP_METHODS:
        return "mtp"
    if method in ("[ngram]",):
        return "ngram"
    if method:
        if method not in KNOWN_METHODS:
            raise UsageError(f"--speculative-config: unsupported speculative method {config.method!r} (vLLM's: "
                             "ngram, eagle, eagle3, mtp, draft_model, medusa, suffix)")
        return method
    if not config.model:
        return "ngram"
    name = config.model.lower()
    if "eagle-" in name:
        return "eagle"
    if "eagle3" in name:
        return "eagle3"
    if config.draft is not None and config.draft.model_type in MTP_METHODS:
        return "mtp"
    return "draft_model"


@dataclass(frozen=True)
class Drafter:
    """The drafter as vLLM builds it for one target: its layers (those that keep KV), its weights on one
    GPU of the last stage, and the numbers the scheduler and profile use."""

    method: str
    num_speculative_tokens: int
    layers: tuple[Layer, ...]  # the attention layers it registers (KV pages in the target's pool)
    tensor_parallel_size: int
    weights_bytes: int  # on one GPU, after the embedding / LM head it shares with the target
    forward_bytes_per_token: float  # its widest layer's live intermediates, plus the inputs it is handed
    derived: bool  # the head's shape was derived from the target (no config.json given)
    model: Optional[str]
    notes: tuple[str, ...] = ()

    @property
    def lookahead_tokens(self) -> int:
        """Slots ``allocate_slots`` reserves past the scheduled tokens (``Scheduler.__init__``,
        0.19.0: ``num_lookahead_tokens = num_spec_tokens`` for EAGLE/MTP and draft models; 0 for
        n-gram, whose proposals need no KV of their own)."""
        return 0 if self.method in NO_WEIGHT_METHODS else self.num_speculative_tokens


def _last_attention_layer(spec: ModelSpec) -> Layer:
    for layer in reversed(spec.layers):
        if isinstance(layer.mixer, (FullAttention, MLAttention)) and not isinstance(layer.mixer, SlidingWindowAttention):
            return layer
    return spec.layers[-1]


def _full(mixer) -> Any:
    """An EAGLE head's attention is full attention (a sliding target layer's window is not kept)."""
    if isinstance(mixer, FullAttention) and type(mixer) is not FullAttention:
        return FullAttention(mixer.num_heads, mixer.num_kv_heads, mixer.head_dim, mixer.head_dim_v, mixer.qkv_bias,
                             mixer.qk_norm)
    return mixer


def _dense_width(spec: ModelSpec) -> int:
    """The dense MLP width of a head derived from ``spec``: its dense layers', or the config's
    ``intermediate_size`` for an MoE target (the published heads of MoE models are dense)."""
    for layer in spec.layers:
        if isinstance(layer.mlp, DenseMLP) and layer.mlp.intermediate_size:
            return layer.mlp.intermediate_size
    width = spec.raw_flag("intermediate_size")
    if isinstance(width, int) and width > 0:
        return width
    mlp = spec.layers[-1].mlp
    assert isinstance(mlp, MoEMLP)
    return mlp.expert_intermediate_size * max(mlp.experts_per_token, 1)


def _tensors_bytes(tensors: list[mparams.Tensor], tp: int, dtype_bytes: int, quant) -> int:
    return int(sum(t.numel_per_rank(tp) * mparams.bytes_per_param(t, quant, dtype_bytes) for t in tensors))


def _layer_activation(layer: Layer, tp: int, hidden: int) -> float:
    """Elements per token of one decoder layer's widest intermediates (budget._layer_activation_per_token's rule)."""
    mlp = layer.mlp
    if isinstance(mlp, MoEMLP):
        mi = mlp.expert_intermediate_size / tp
        per = mlp.experts_per_token * (max(2 * mi, hidden) + mi) + hidden + mlp.num_experts
        if mlp.shared_intermediate_size:
            per += 3 * mlp.shared_intermediate_size / tp
        return per + 2 * hidden
    return 3 * mlp.intermediate_size / tp + 2 * hidden


def build_drafter(config: SpeculativeConfig, target: ModelSpec, sem: VllmSemantics, tp: int, dtype_bytes: int,
                  quantization) -> Drafter:
    """The drafter vLLM builds for ``target`` (see the module docstring). ``quantization`` is the
    target's resolved method: vLLM aligns an MTP drafter's with it; an EAGLE head is unquantized."""
    method = infer_method(config)
    draft_tp = config.draft_tensor_parallel_size or tp
    if draft_tp not in (1, tp):
        raise UsageError(f"--speculative-config: draft_tensor_parallel_size={draft_tp} cannot be other value than 1 "
                         f"or the target's tensor_parallel_size ({tp})")
    k = config.num_speculative_tokens
    h = target.hidden_size
    notes: list[str] = []
    if method in NO_WEIGHT_METHODS:
        if k is None:
            raise UsageError("--speculative-config: ngram needs num_speculative_tokens")
        return Drafter(method, k, (), draft_tp, 0, 0.0, False, config.model)
    if method in ("medusa", "mlp_speculator"):
        raise UsageError(f"--speculative-config: kvplan does not size {method} heads (not read); "
                         "plan with an eagle / eagle3 / mtp / draft_model / ngram drafter")
    if method == "mtp":
        n = target.num_mtp_layers or (config.draft.num_mtp_layers if config.draft else 0) or 1
        if k is None:
            k = n
        base = _last_attention_layer(target)
        layers = tuple(replace(base, index=target.num_layers + i) for i in range(n))
        per_layer = mparams.layer_tensors(target, base)
        extra = [mparams.Tensor("enorm+hnorm", 2 * h, "rep"), mparams.Tensor("eh_proj", 2 * h * h, "rep")]
        if not sem.mtp_shares_lm_head:
            extra.append(mparams.Tensor("shared_head", target.vocab_size * h, "vocab", group_dim=h))
            notes.append(f"vLLM {sem.label} keeps the MTP layer's own LM head (shared_head.head) beside the "
                         "target's: shared from 0.19.")
        quant = quantization
        weights = n * _tensors_bytes(per_layer, draft_tp, dtype_bytes, quant) + n * _tensors_bytes(
            extra, draft_tp, dtype_bytes, None)
        forward = _layer_activation(base, draft_tp, h) + 2 * h
        return Drafter("mtp", k, layers, draft_tp, weights, forward, False, config.model, tuple(notes))
    if k is None:
        raise UsageError("--speculative-config: num_speculative_tokens must be provided with a speculative model "
                         "unless the draft model config contains an n_predict parameter")
    if method == "draft_model":
        draft = config.draft
        if draft is None:
            raise UsageError(f"--speculative-config: kvplan needs the draft model's config.json to size it "
                             f"({config.model!r} is not in the catalog): give a config path as \"model\"")
        if draft.vocab_size != target.vocab_size:
            raise UsageError(f"--speculative-config: the draft model's vocabulary ({draft.vocab_size}) differs from "
                             f"the target's ({target.vocab_size}); vLLM requires them equal")
        layers = tuple(replace(layer, index=target.num_layers + i) for i, layer in enumerate(draft.layers))
        stage = mparams.weights_per_rank(draft, draft_tp, 1, dtype_bytes, draft.quantization)[0]
        forward = max(_layer_activation(layer, draft_tp, draft.hidden_size) for layer in draft.layers)
        return Drafter(method, k, layers, draft_tp, stage.bytes_per_rank, forward, False, config.model)
    # EAGLE / EAGLE-3: the head's own config, or one decoder layer of the target's shape
    head = config.draft
    derived = head is None
    if head is not None:
        head_layers = head.layers
    else:
        base = _last_attention_layer(target)
        head_layers = (Layer(0, _full(base.mixer), DenseMLP(_dense_width(target))),)
        notes.append(f"The {method.upper()} head's config.json was not given: sized as one decoder layer of the target's "
                     f"attention and a dense MLP of {_dense_width(target):,} (the published heads' shape).")
    layers = tuple(replace(layer, index=target.num_layers + i, mixer=_full(layer.mixer))
                   for i, layer in enumerate(head_layers))
    tensors: list[mparams.Tensor] = []
    host = head or target
    for layer in layers:
        tensors += mparams.layer_tensors(host, layer)
    if method == "eagle3":
        # QKVParallelLinear over 2H inputs (embedding and hidden state): twice the q/k/v weights
        tensors += [t for t in mparams.layer_tensors(host, layers[0]) if t.name in ("q_proj", "k_proj", "v_proj")]
        if head is not None:  # Eagle3LlamaForCausalLM: draft_vocab_size, else the head's vocabulary
            draft_vocab = int(head.raw_flag("draft_vocab_size") or head.vocab_size)
        else:  # the published EAGLE-3 heads (yuhuili/EAGLE3-*) map to a 32,000-token draft vocabulary
            draft_vocab = min(EAGLE3_DRAFT_VOCAB, target.vocab_size)
            notes.append(f"EAGLE-3 head assumed with a {draft_vocab:,}-token draft vocabulary (its own LM head).")
        tensors += [mparams.Tensor("fc", 3 * h * h, "rep"), mparams.Tensor("hidden_norm+norm", 2 * h, "rep"),
                    mparams.Tensor("lm_head", draft_vocab * h, "vocab", group_dim=h)]
        extra_bytes = draft_vocab * 8  # draft_id_to_target_id, int64
        forward = _layer_activation(layers[0], draft_tp, h) + 4 * h  # the three target layers' hidden states
    else:
        tensors += [mparams.Tensor("fc", 2 * h * h, "rep")]
        extra_bytes = 0
        forward = _layer_activation(layers[0], draft_tp, h) + 2 * h
    weights = _tensors_bytes(tensors, draft_tp, dtype_bytes, None) + extra_bytes
    return Drafter(method, k, layers, draft_tp, weights, forward, derived, config.model, tuple(notes))


def rejection_sampler_bytes_per_logit(sem: VllmSemantics, sampler_bytes: int, rows: int, sort_bytes: int,
                                      dtype_bytes: int = 2) -> int:
    """Peak bytes per (request row x vocabulary) of the profile's dummy rejection sampler, which
    ``_dummy_sampler_run`` runs after the sampler with one draft token per request.

    ``sort_bytes``: budget.native_sort_bytes_per_logit at these rows (the torch.sort path on float32 logits).

    * 0.12+ (``RejectionSampler.forward``, read in 0.12.0, 0.14.0 and 0.19.0): ``logits`` holds 2
      rows per request (target + bonus) in the model dtype; the bonus rows are copied out and sampled
      by the ordinary sampler (``sampler_bytes``, which counts its own input) while their float32
      ``raw_logits`` copy is kept for the logprobs: 2·d + 4 + sampler. Then the target rows go to
      float32 and are cloned (4 + 4), top-k/top-p masks them in place (0.17+ Triton from 8 rows) or
      sorts them (up to 0.16: the sort's temporaries, as budget.native_sort_bytes_per_logit counts them
      for float32 input), and ``softmax`` adds 4: held 3·d + 4 + 8, plus the larger of the two.
    * 0.8-0.11 (read in 0.8.5, 0.9.2, 0.10.1.1, 0.11.0): the sampler's logits (d) stay referenced, a
      second ``(rows, vocab)`` tensor of target logits (d) is masked by the native top-k/top-p on the
      model dtype (its sort: values d, int64 indices 8, CUB's alternates d + 8, the reverse indices 8),
      then ``softmax`` to float32 (4): 2·d + max(2·d + 24, 4).
    """
    d = dtype_bytes
    if sem.rejection_sampler_profile == "target_only":
        return 2 * d + max(2 * d + 24, 4)
    bonus = 2 * d + 4 + sampler_bytes
    if sem.native_sampler_triton_topk_topp and rows >= 8:
        topk = 0
    else:
        topk = sort_bytes - 6  # the sort's temporaries on float32 input (sort_bytes counts d = 2 and a float32 copy)
    target = 3 * d + 4 + 8 + max(topk, 4)
    return max(bonus, target)
