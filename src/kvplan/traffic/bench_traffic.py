"""Traffic as ``vllm bench serve`` makes it: the request lengths of its ``random`` and ``sharegpt``
datasets and its arrival times, drawn as each vLLM version draws them.

Read from the published wheels (``vllm/benchmarks/serve.py`` and ``datasets.py``; the repo script
``benchmarks/benchmark_serving.py`` of the same release samples the same way):

- Arrivals (``get_request``): ``--request-rate inf`` (the default) sends every request at t = 0.
  Otherwise the gaps are drawn from ``np.random.gamma(shape=burstiness, scale=1 / (rate ·
  burstiness))`` (burstiness 1 = Poisson; ``inf`` = constant gaps of 1 / rate, 0.11.1+), from numpy's
  global legacy generator seeded with ``--seed`` in ``main``. **0.10.0 and newer** draw one gap per
  request up front, sum them (the first request waits its gap too) and rescale the sums so that the
  last request goes out at exactly ``num_prompts / rate``. **0.9.x** sends request 0 at once and
  sleeps one gap after each request (no rescaling: the run's length varies with the seed).
- ``random`` dataset, **before 0.9** (``vllm bench serve`` of the 0.8.4 and 0.8.5 wheels,
  ``vllm/benchmarks/serve.py: sample_random_requests``, the same as the repo's
  ``benchmarks/benchmark_serving.py`` of those releases): ``--random-range-ratio`` r defaults to
  **1.0** and lengths are drawn in ``[int(L·r), L]`` (r = 1: every prompt exactly L tokens), from
  the global stream seeded in ``main``: the prefix, the input lengths, the output lengths, the
  offsets; L is ``random_input_len`` itself (no special tokens subtracted). Arrivals as 0.9.x.
- ``random`` dataset, **0.9.2 … 0.10.1**: ``np.random.seed(seed)`` again in the dataset; then, from
  that one global stream, the prefix tokens (``randint(0, vocab, prefix_len)`` when > 0), the input
  lengths ``randint(int(L·(1-r)), int(L·(1+r)) + 1, n)`` with ``L = random_input_len - num_special``,
  the output lengths likewise from ``random_output_len``, and one token offset per request
  (``randint(0, vocab, n)``). The arrival gaps are drawn after these, from the same stream: with a
  finite rate the arrival times depend on the vocabulary size (the tokenizer's ``vocab_size``).
  **0.9.0** (0.9.1 not read) drew the same way but from ``L = random_input_len`` (the special
  tokens not subtracted).
- ``random`` dataset, **0.10.2 and newer**: a private ``np.random.default_rng(seed)``; bounds
  ``floor(L·(1-r))`` … ``ceil(L·(1+r))`` (outputs at least 1); input lengths, output lengths and
  offsets drawn in that order (the prefix after them). The arrivals then come from the global
  stream alone.
- Prompt tokens: vLLM bench builds each prompt from ``prefix_len + input_len`` token ids, decodes
  and re-encodes it (truncating to that count), and reports that count (``prompt_len``, "Total
  input tokens"). The server adds the tokenizer's special tokens (BOS) again when it tokenizes the
  completion prompt: the engine computes ``prompt_len + num_special`` tokens. Re-encoding can come
  out a few tokens short (and 0.11.1+ pads it back with random tokens); that depends on the
  tokenizer's merges and is not modelled: kvplan takes the sampled count.
- Outputs: ``max_tokens`` = the sampled output length. With random token ids a model very rarely
  emits EOS, so with or without ``--ignore-eos`` the outputs run to ``max_tokens`` here (a run
  whose model does stop early produces fewer tokens than simulated).

numpy is used when it is installed (it is wherever vLLM or transformers is), which makes the draws
identical to vLLM's for the same seed. Without numpy the same distributions are drawn with
Python's generator: the same lengths and arrival law, not the same draws.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Optional

from ..errors import UsageError

DATASETS = ("random", "sharegpt")
#: vLLM bench's defaults (datasets.py / serve.py, unchanged 0.10 … 0.33)
DEFAULT_NUM_PROMPTS = 1000
DEFAULT_RANDOM_INPUT_LEN = 1024
DEFAULT_RANDOM_OUTPUT_LEN = 128


@dataclass(frozen=True)
class BenchTraffic:
    """The traffic flags of one ``vllm bench serve`` run (vLLM's names and defaults)."""

    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: Optional[int] = None
    num_prompts: int = DEFAULT_NUM_PROMPTS
    seed: int = 0
    dataset_name: str = "random"
    random_input_len: int = DEFAULT_RANDOM_INPUT_LEN
    random_output_len: int = DEFAULT_RANDOM_OUTPUT_LEN
    #: None: the version's default (0.0 from 0.9, 1.0 before: fixed lengths either way)
    random_range_ratio: Optional[float] = None
    random_prefix_len: int = 0
    sharegpt_output_len: Optional[int] = None
    ignore_eos: bool = False
    num_warmups: int = 0
    # A scenario, not a bench flag: the server already served the first ``warm_prompts`` prompts of
    # this seed's random dataset (an earlier run), each ``warm_prompt_len`` tokens long (None: this
    # run's length). vLLM's random prompt i is ``(offset_i + i + arange(L)) % vocab``, so an earlier
    # run of any length shares its first min(L, L') tokens; they sit in the prefix cache at t = 0.
    warm_prompts: int = 0
    warm_prompt_len: Optional[int] = None
    endpoint: str = "/v1/completions"
    notes: tuple[str, ...] = field(default=(), compare=False)

    def validate(self) -> "BenchTraffic":
        if not (self.request_rate > 0):
            raise UsageError(f"--request-rate must be positive or inf, got {self.request_rate}")
        if not (self.burstiness > 0):
            raise UsageError(f"--burstiness must be positive, got {self.burstiness}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise UsageError(f"--max-concurrency must be at least 1, got {self.max_concurrency}")
        if self.num_prompts < 1:
            raise UsageError(f"--num-prompts must be at least 1, got {self.num_prompts}")
        if self.dataset_name not in DATASETS:
            raise UsageError(f"--dataset-name {self.dataset_name!r} is not supported (kvplan models "
                             f"{' and '.join(DATASETS)})")
        # [0, 1] here: before 0.9 the ratio is a lower bound and 1.0 (its default) means fixed lengths;
        # sample_bench refuses 1.0 for the versions that assert r < 1 (range_ratio_rule)
        if self.random_range_ratio is not None and not 0.0 <= self.random_range_ratio <= 1.0:
            raise UsageError(f"--random-range-ratio must be in [0, 1], got {self.random_range_ratio}")
        for name in ("random_input_len", "random_output_len", "random_prefix_len"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} must not be negative")
        if self.warm_prompts < 0 or (self.warm_prompt_len is not None and self.warm_prompt_len < 1):
            raise UsageError("--warm-prompts must not be negative and --warm-prompt-len must be at least 1")
        if self.warm_prompts and self.dataset_name != "random":
            raise UsageError("--warm-prompts describes an earlier run of the random dataset (same --seed); "
                             f"--dataset-name {self.dataset_name} prompts are not modelled as token sequences")
        if self.sharegpt_output_len is not None and self.sharegpt_output_len < 1:
            raise UsageError("--sharegpt-output-len must be at least 1")
        return self

    def describe(self) -> str:
        rate = "inf" if math.isinf(self.request_rate) else f"{self.request_rate:g}"
        parts = [f"vllm bench serve: {self.num_prompts} prompts, request rate {rate}"]
        if not math.isinf(self.request_rate) and self.burstiness != 1.0:
            parts.append(f"burstiness {self.burstiness:g}")
        if self.max_concurrency is not None:
            parts.append(f"max concurrency {self.max_concurrency}")
        if self.dataset_name == "random":
            ds = f"random {self.random_input_len}/{self.random_output_len}"
            if self.random_range_ratio:
                ds += f" range ratio {self.random_range_ratio:g}"
            if self.random_prefix_len:
                ds += f" + {self.random_prefix_len} shared prefix"
        else:
            ds = "sharegpt (kvplan's length model, an approximation)"
            if self.sharegpt_output_len:
                ds += f", outputs {self.sharegpt_output_len}"
        parts.append(ds)
        parts.append(f"seed {self.seed}")
        if self.warm_prompts:
            parts.append(f"prefix cache warm with the first {self.warm_prompts} prompts"
                         + (f" ({self.warm_prompt_len} tokens)" if self.warm_prompt_len else ""))
        return ", ".join(parts)


@dataclass(frozen=True)
class BenchSample:
    """The sampled run: per request, the client's prompt count (vLLM bench's ``prompt_len``), the
    output budget (``max_tokens``) and the send time (s after the benchmark starts)."""

    prompt_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    arrivals: tuple[float, ...]
    prefix_len: int  # leading prompt tokens shared by every request (--random-prefix-len)
    exact: bool  # drawn with numpy exactly as vLLM draws them
    rule: str  # which version's rule was followed


def _numpy():
    try:
        import numpy

        return numpy
    except ImportError:  # pragma: no cover - numpy is there wherever vLLM or transformers is
        return None


def ratio_is_lower_bound(version: tuple[int, ...]) -> bool:
    """Before 0.9 ``--random-range-ratio`` r drew lengths in [int(L·r), L] with r = 1.0 by default
    (0.8.4/0.8.5 wheels' vllm/benchmarks/serve.py); from 0.9 in [L(1-r), L(1+r)] with r < 1
    asserted (datasets.py RandomDataset: "random_range_ratio must be < 1.0 to ensure a valid
    sampling range")."""
    return tuple(version) < (0, 9)


def legacy_random_rule(version: tuple[int, ...]) -> bool:
    """The random dataset drew from numpy's global generator with int() bounds up to 0.10.1.x."""
    return tuple(version) < (0, 10, 2)


def sample_bench(t: BenchTraffic, *, version: tuple[int, ...], num_special: int, vocab_size: int,
                 sharegpt_pairs=None) -> BenchSample:
    """Draw the run vLLM ``version``'s bench would send. ``num_special`` is the tokenizer's
    ``num_special_tokens_to_add()`` and ``vocab_size`` its ``vocab_size`` (the random dataset's
    offsets, whose draws shift the arrival stream before 0.10.2). ``sharegpt_pairs(n, seed)``
    supplies (prompt, output) lengths for the sharegpt dataset."""
    t.validate()
    if math.isinf(t.burstiness) and not math.isinf(t.request_rate) and tuple(version) < (0, 11, 1):
        raise UsageError(f"--burstiness inf (constant gaps) came with vLLM 0.11.1; vLLM {'.'.join(map(str, version))} "
                         "draws np.random.gamma(shape=inf), which fails")
    np = _numpy()
    n = t.num_prompts
    legacy = legacy_random_rule(version)
    glob = np.random.RandomState(t.seed) if np is not None else None  # np.random.seed(args.seed)
    py = random.Random(t.seed)
    prefix = 0
    below = ratio_is_lower_bound(version)
    ratio = t.random_range_ratio if t.random_range_ratio is not None else (1.0 if below else 0.0)
    if t.dataset_name == "random" and not below and ratio >= 1.0:
        raise UsageError(f"--random-range-ratio {ratio:g}: vLLM {'.'.join(map(str, version))}'s bench "
                         "asserts random_range_ratio must be < 1.0 to ensure a valid sampling range; before 0.9 it was "
                         "a lower bound and 1.0 (its default) meant fixed lengths: give --vllm-version 0.8.5 for a "
                         "command of that era")
    if t.dataset_name == "random":
        real = max(0, t.random_input_len - (num_special if tuple(version) >= (0, 9, 2) else 0))
        r = ratio
        if below:
            lo_i, hi_i = int(real * r), real
            lo_o, hi_o = int(t.random_output_len * r), t.random_output_len
        elif legacy:
            lo_i, hi_i = int(real * (1 - r)), int(real * (1 + r))
            lo_o, hi_o = int(t.random_output_len * (1 - r)), int(t.random_output_len * (1 + r))
        else:
            lo_i, hi_i = math.floor(real * (1 - r)), math.ceil(real * (1 + r))
            lo_o = max(math.floor(t.random_output_len * (1 - r)), 1)
            hi_o = max(math.ceil(t.random_output_len * (1 + r)), 1)
        if t.random_prefix_len + lo_i < 1:
            raise UsageError(f"--random-input-len {t.random_input_len} is too small: with {num_special} special "
                             f"token(s) and --random-range-ratio {r:g} a prompt could have no tokens")
        prefix = t.random_prefix_len
        if np is not None:
            if legacy:
                glob = np.random.RandomState(t.seed)  # RandomDataset.__init__ seeds the global stream again
                if prefix > 0:
                    glob.randint(0, vocab_size, size=prefix)
                ins = glob.randint(lo_i, hi_i + 1, size=n)
                outs = glob.randint(lo_o, hi_o + 1, size=n)
                glob.randint(0, vocab_size, size=n)  # the offsets: they move the stream the arrivals use
            else:
                rng = np.random.default_rng(t.seed)
                ins = rng.integers(lo_i, hi_i + 1, size=n)
                outs = rng.integers(lo_o, hi_o + 1, size=n)
            ins = [int(x) for x in ins]
            outs = [int(x) for x in outs]
        else:
            ins = [py.randint(lo_i, hi_i) for _ in range(n)]
            outs = [py.randint(lo_o, hi_o) for _ in range(n)]
        prompts = [prefix + x for x in ins]
    else:
        if sharegpt_pairs is None:
            raise UsageError("the sharegpt dataset needs its length model")
        pairs = sharegpt_pairs(n, t.seed, t.sharegpt_output_len)
        prompts = [p for p, _ in pairs]
        outs = [o for _, o in pairs]
    arrivals = arrival_offsets(n, t.request_rate, t.burstiness, glob if glob is not None else py,
                               rescale=tuple(version) >= (0, 10, 0))
    rule = ("vLLM < 0.9: numpy's global generator, lengths in [int(L·r), L]" if below and t.dataset_name == "random"
            else "vLLM <= 0.10.1: numpy's global generator, int() bounds" if legacy and t.dataset_name == "random"
            else "vLLM >= 0.10.2: numpy default_rng(seed) for lengths, global generator for arrivals")
    outs = [max(1, o) for o in outs]  # max_tokens 0 is refused by every version: at least one token
    if t.dataset_name == "sharegpt":
        rule = "kvplan's ShareGPT length model (approximation); arrivals as vLLM draws them"
    return BenchSample(tuple(prompts), tuple(outs), tuple(arrivals), prefix, exact=np is not None, rule=rule)


def arrival_offsets(n: int, rate: float, burstiness: float, gen, rescale: bool = True) -> list[float]:
    """``get_request``'s send times: gamma gaps (one draw per request, in order), summed, then
    rescaled so the last is ``n / rate`` (0.10+); without ``rescale`` (0.9.x) request 0 goes at once
    and each later one a gap after the previous. ``gen`` is a numpy RandomState (exact) or a
    ``random.Random`` (the same law)."""
    if math.isinf(rate):
        return [0.0] * n
    if not rescale:
        out, t = [], 0.0
        for _ in range(n):
            out.append(t)
            if isinstance(gen, random.Random):
                t += gen.gammavariate(burstiness, 1.0 / (rate * burstiness))
            else:
                t += float(gen.gamma(shape=burstiness, scale=1.0 / (rate * burstiness)))
        return out
    delays: list[float] = []
    for _ in range(n):
        if math.isinf(burstiness):
            delays.append(1.0 / rate)
        elif isinstance(gen, random.Random):
            delays.append(gen.gammavariate(burstiness, 1.0 / (rate * burstiness)))
        else:
            delays.append(float(gen.gamma(shape=burstiness, scale=1.0 / (rate * burstiness))))
    for i in range(1, n):
        delays[i] += delays[i - 1]
    if delays and delays[-1] != 0:
        factor = (n / rate) / delays[-1]
        delays = [d * factor for d in delays]
    return delays


#: tokenizer families whose ``num_special_tokens_to_add()`` is 0 (no BOS on encode); the others
#: (Llama, Mistral, DeepSeek, GLM, Gemma, ...) add one BOS. Used only without --tokenizer.
_NO_BOS_MODEL_TYPES = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next", "gpt_oss", "gpt2", "qwen2_vl",
                       "qwen2_5_vl", "minimax_m2", "minimax", "seed_oss")


def special_tokens_for(model_type: str) -> int:
    return 0 if (model_type or "").lower() in _NO_BOS_MODEL_TYPES else 1


#: Tokens a model's chat template adds around one user message on the chat endpoint (the server
#: renders the template, then tokenizes without special tokens): the role markers and the
#: assistant header, plus the system text the template inserts when the request has none
#: (Qwen2/2.5's default system prompt, Llama-3.x's knowledge-cutoff header, gpt-oss's Harmony system
#: message with its date, reasoning effort and channels). Approximate counts of each family's fixed
#: template text (its tokenizer_config.json chat_template; gpt-oss: openai_harmony's renderer).
CHAT_TEMPLATE_TOKENS = {"qwen3": 8, "qwen3_moe": 8, "qwen3_next": 8, "qwen2": 30, "qwen2_moe": 30, "gpt_oss": 66,
                        "glm4_moe": 6, "glm4": 6, "llama": 32, "mistral": 5, "mixtral": 5, "deepseek_v3": 4,
                        "deepseek_v2": 4, "gemma2": 9, "gemma3_text": 9, "gemma3": 9}
DEFAULT_CHAT_TEMPLATE_TOKENS = 8


def chat_template_tokens_for(model_type: str) -> int:
    """The tokens the chat endpoint adds to each prompt for this model family (approximate)."""
    return CHAT_TEMPLATE_TOKENS.get((model_type or "").lower(), DEFAULT_CHAT_TEMPLATE_TOKENS)


#: A reasoning chat model's own reply to a random-token prompt on the chat endpoint, without
#: ``--ignore-eos``: log-normal (median tokens, sigma), the reply stopping (EOS) there unless
#: ``max_tokens`` comes first. gpt-oss answers in Harmony's channels: a short analysis of the
#: gibberish, then a short final message ending in <|return|>. Fitted to the dev set's token counts
#: only (GPUStack gpt-oss-20b, vLLM 0.11.0, chat endpoint, 12 runs on A100/H100): 0.936-0.953 of
#: max_tokens 100 (32,000- and 2,000-token prompts), 0.523-0.535 of 200 (4,000-token prompts), all
#: of 4: median 104 tokens, sigma 0.21 give 0.940 and 0.529. The other families in the dev set
#: (Qwen2/2.5/3, GLM-4.5-Air) run random prompts to max_tokens (0.97-1.00); gpt-oss-120b on the
#: completions endpoint (no Harmony template: a plain continuation) stops too, about 0.25 of 1,024
#: tokens (dennislee22), which this table does not cover.
RANDOM_PROMPT_REPLY = {"gpt_oss": (104.0, 0.21)}


def random_prompt_reply_for(model_type: str):
    """(median tokens, log sigma) of the family's reply to a random-token chat prompt, or None: it
    runs to max_tokens."""
    return RANDOM_PROMPT_REPLY.get((model_type or "").lower())


def tokenizer_facts(path: str) -> tuple[int, int]:
    """(num_special_tokens_to_add, vocab_size) of a tokenizer.json (or a folder with one), as a
    Hugging Face fast tokenizer reports them (vocab without added tokens)."""
    from pathlib import Path

    from tokenizers import Tokenizer

    p = Path(path)
    f = p / "tokenizer.json" if p.is_dir() else p
    if not f.is_file():
        raise UsageError(f"--tokenizer {path}: no tokenizer.json there")
    try:
        tok = Tokenizer.from_file(str(f))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exceptions
        raise UsageError(f"--tokenizer {f}: cannot read it: {exc}") from None
    plain = len(tok.encode("hello", add_special_tokens=False).ids)
    special = len(tok.encode("hello", add_special_tokens=True).ids) - plain
    # transformers' Llama-style fast tokenizers rebuild the post-processor from tokenizer_config.json
    # (add_bos_token / add_eos_token), which tokenizer.json alone may not carry (DeepSeek-V3's)
    cfg_path = f.parent / "tokenizer_config.json"
    if cfg_path.is_file():
        import json

        try:
            cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            cfg = {}
        if isinstance(cfg, dict):
            flagged = int(bool(cfg.get("add_bos_token"))) + int(bool(cfg.get("add_eos_token")))
            special = max(special, flagged)
    return max(0, special), tok.get_vocab_size(with_added_tokens=False)
