"""The model's own tokenizer and chat template, or an explicit estimate.

:class:`ChatTokenizer` reads a fast tokenizer (``tokenizer.json``) with the ``tokenizers``
library and the chat template from ``chat_template.jinja`` / ``additional_chat_templates/`` /
``tokenizer_config.json`` / ``chat_template.json``, in transformers' order of precedence. It counts
exactly what vLLM would feed the model: the rendered template, encoded without extra special
tokens for chat requests (vLLM's default) and with them for completion prompts. Counting is
batched (``encode_batch``), which is where the speed comes from.

:class:`Estimator` is the explicit ``--estimate`` fallback: characters per token by script, never
used unless asked for, and always labelled. Heavy imports (tokenizers, jinja2) happen inside
functions so that ``kvplan plan`` never pays for them.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any, Optional, Sequence

from ..errors import UsageError
from . import chat_template as ct


class ChatTokenizer:
    kind = "tokenizer"

    def __init__(self, tokenizer: Any, chat_template: Any, special_tokens: dict[str, str], source: str,
                 template_source: Optional[str] = None):
        self.tok = tokenizer
        # A tokenizer.json may ship with truncation or padding switched on; HF's tokenizer (and
        # vLLM) encode a prompt whole, so both are switched off or counts would be capped.
        self.tok.no_truncation()
        self.tok.no_padding()
        self.chat_template = chat_template  # str, dict name → str, or None
        self.special_tokens = special_tokens
        self.source = source
        self.template_source = template_source
        self._fast = getattr(self.tok, "encode_batch_fast", None)

    # --- loading ---------------------------------------------------------------------------------
    @classmethod
    def from_path(cls, spec: str, chat_template_file: Optional[str] = None) -> "ChatTokenizer":
        """A model folder, a tokenizer.json (its tokenizer_config.json is read from beside it), or
        ``pkg:NAME``: the tokenizer.json shipped inside an installed Python package."""
        folder, tok_file = _locate(spec)
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise UsageError("counting tokens needs the `tokenizers` package: pip install tokenizers "
                             "(or kvplan's `tokenize` extra)") from None
        try:
            tok = Tokenizer.from_file(str(tok_file))
        except Exception as exc:  # noqa: BLE001 - the Rust loader raises plain Exception subclasses
            raise UsageError(f"{tok_file}: not a tokenizer.json the tokenizers library can read ({exc})") from None
        config = _read_json(folder / "tokenizer_config.json") or {}
        template, template_src = _find_template(folder, config)
        if chat_template_file:
            path = Path(chat_template_file)
            try:
                template, template_src = path.read_text(encoding="utf-8"), str(path)
            except OSError as exc:
                raise UsageError(f"--chat-template {path}: {exc.strerror or exc}") from None
        special = _special_tokens(config, _read_json(folder / "special_tokens_map.json") or {})
        return cls(tok, template, special, str(tok_file), template_src)

    @classmethod
    def for_model(cls, model: str) -> Optional["ChatTokenizer"]:
        """The tokenizer of a catalog/hub model: the local Hugging Face cache first (offline), then
        the hub when huggingface_hub is installed and the network allowed. None if neither has it."""
        path = Path(model).expanduser()
        if path.is_dir() and (path / "tokenizer.json").is_file():
            return cls.from_path(str(path))
        if path.is_file() and path.name == "config.json" and (path.parent / "tokenizer.json").is_file():
            return cls.from_path(str(path.parent))
        hub_id = model
        try:
            from ..models import catalog

            entry = catalog.find(model)
            if entry is not None:
                hub_id = entry.id
        except Exception:  # noqa: BLE001, S110 - the catalog is optional here: a hub id works without it
            pass
        if "/" not in hub_id:
            return None
        folder = _from_hf_cache(hub_id) or _from_hub(hub_id)
        return cls.from_path(str(folder)) if folder else None

    # --- templates -------------------------------------------------------------------------------
    def template_for(self, tools) -> str:
        t = self.chat_template
        if isinstance(t, dict):
            if tools and "tool_use" in t:
                return t["tool_use"]
            if "default" in t:
                return t["default"]
            raise ct.TemplateError(f"the tokenizer has several chat templates and no default: {sorted(t)}")
        if not t:
            raise UsageError(f"{self.source}: the tokenizer has no chat template (no chat_template.jinja, none in "
                             "tokenizer_config.json); give one with --chat-template FILE")
        return t

    def render(self, messages, tools=None, add_generation_prompt: bool = True, prepared: bool = False,
               **kwargs: Any) -> str:
        """The prompt text vLLM builds for a chat request (its preprocessing, then HF's template)."""
        source = self.template_for(tools)
        msgs = messages if prepared else ct.prepare_messages(messages, source)
        return ct.render(source, msgs, tools=tools, add_generation_prompt=add_generation_prompt,
                         special_tokens=self.special_tokens, **kwargs)

    # --- counting --------------------------------------------------------------------------------
    def count_texts(self, texts: Sequence[str], add_special_tokens: bool = False) -> list[int]:
        if not texts:
            return []
        if self._fast is not None:
            encs = self._fast(list(texts), add_special_tokens=add_special_tokens)
        else:
            encs = self.tok.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [len(e) for e in encs]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.tok.encode(text, add_special_tokens=add_special_tokens).ids

    def count_messages(self, messages, tools=None, add_generation_prompt: bool = True, **kwargs: Any) -> int:
        return self.count_texts([self.render(messages, tools, add_generation_prompt, **kwargs)])[0]

    def count_message_batch(self, batch: Sequence[tuple]) -> list[int]:
        """[(messages, tools, kwargs), …] → counts, rendered one by one, encoded in one batch."""
        texts = [self.render(m, t, **(kw or {})) for m, t, kw in batch]
        return self.count_texts(texts)

    @property
    def bos_token(self) -> Optional[str]:
        return self.special_tokens.get("bos_token")

    def describe(self) -> dict:
        return {"kind": "tokenizer", "source": self.source, "chat_template": self.template_source,
                "vocab_size": self.tok.get_vocab_size(with_added_tokens=True)}


def _locate(spec: str) -> tuple[Path, Path]:
    if spec.startswith("pkg:"):
        name = spec[4:]
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            found = None
        if found is None or not found.submodule_search_locations:
            raise UsageError(f"--tokenizer {spec}: no installed Python package {name!r}")
        base = Path(list(found.submodule_search_locations)[0])
        candidates = sorted(base.rglob("tokenizer.json"))
        if not candidates:
            raise UsageError(f"--tokenizer {spec}: the package {name} ships no tokenizer.json")
        return candidates[0].parent, candidates[0]
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "tokenizer.json").is_file():
            raise UsageError(f"--tokenizer {path}: no tokenizer.json in this folder (kvplan reads fast tokenizers: "
                             "save one with transformers' tokenizer.save_pretrained)")
        return path, path / "tokenizer.json"
    if path.is_file():
        return path.parent, path
    raise UsageError(f"--tokenizer {spec}: no such file or folder")


def _read_json(path: Path) -> Optional[dict]:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a readable JSON file ({exc})") from None
    return data if isinstance(data, dict) else None


def _find_template(folder: Path, config: dict) -> tuple[Any, Optional[str]]:
    """transformers' precedence: chat_template.jinja (+ additional_chat_templates/*.jinja) over
    tokenizer_config.json's chat_template; chat_template.json (processors) last."""
    templates: dict[str, str] = {}
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        templates["default"] = jinja.read_text(encoding="utf-8")
    extra = folder / "additional_chat_templates"
    if extra.is_dir():
        for f in sorted(extra.glob("*.jinja")):
            templates[f.stem] = f.read_text(encoding="utf-8")
    if templates:
        src = str(jinja if jinja.is_file() else extra)
        return (templates["default"] if list(templates) == ["default"] else templates), src
    value = config.get("chat_template")
    if isinstance(value, list):
        return {t["name"]: t["template"] for t in value if isinstance(t, dict) and "name" in t}, \
            str(folder / "tokenizer_config.json")
    if isinstance(value, str):
        return value, str(folder / "tokenizer_config.json")
    legacy = _read_json(folder / "chat_template.json")
    if legacy and isinstance(legacy.get("chat_template"), str):
        return legacy["chat_template"], str(folder / "chat_template.json")
    return None, None


def _special_tokens(config: dict, legacy: dict) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in ct.SPECIAL_TOKEN_NAMES:
        value = config.get(name, legacy.get(name))
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[name] = value
    return out


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def _from_hf_cache(hub_id: str) -> Optional[Path]:
    """A snapshot folder of the local Hugging Face cache holding tokenizer.json (no network)."""
    root = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache" /
                                                                       "huggingface")) / "hub")
    snapshots = root / ("models--" + hub_id.replace("/", "--")) / "snapshots"
    if not snapshots.is_dir():
        return None
    for snap in sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True):
        if (snap / "tokenizer.json").is_file():
            return snap
    return None


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One TCP connect to the hub before asking huggingface_hub, whose retries take ~25 s (and
    print a warning each) when there is no network at all."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def _from_hub(hub_id: str) -> Optional[Path]:
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("KVPLAN_OFFLINE") == "1":
        return None
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None
    if not _hub_reachable():
        return None
    folder = None
    for name in _TOKENIZER_FILES:
        try:
            folder = Path(hf_hub_download(hub_id, name, etag_timeout=5)).parent
        except Exception:  # noqa: BLE001 - a missing optional file, a gated repo, or no network: all mean "not here"
            if name == "tokenizer.json":
                return None
    return folder


class Estimator:
    """Characters per token by script: an explicit, labelled approximation (``--estimate``).

    Ratios measured with the DeepSeek-V3 tokenizer on the bundled customer-service log and on
    English prose (see tests/test_lengths_estimate.py for the tolerance they are held to):
    ASCII text ~3.8 characters per token, CJK ideographs/kana/hangul ~0.75 tokens per
    character, other scripts ~2.5 characters per token; plus the template's few tokens per
    message. Other tokenizers differ (older 32K vocabularies need up to 2x more tokens for
    Chinese), which is why an estimate is never used unless asked for.
    """

    kind = "estimate"
    ASCII_CHARS_PER_TOKEN = 3.8
    CJK_TOKENS_PER_CHAR = 0.75
    OTHER_CHARS_PER_TOKEN = 2.5
    PER_MESSAGE = 4
    PER_PROMPT = 3
    _CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
    source = "estimate"
    special_tokens: dict = {}

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        n = len(text)
        ascii_n = n if text.isascii() else len(text.encode("ascii", "ignore"))
        cjk = 0 if ascii_n == n else len(self._CJK.findall(text))
        other = n - ascii_n - cjk
        return max(1, round(ascii_n / self.ASCII_CHARS_PER_TOKEN + cjk * self.CJK_TOKENS_PER_CHAR
                            + other / self.OTHER_CHARS_PER_TOKEN))

    def count_texts(self, texts: Sequence[str], add_special_tokens: bool = False) -> list[int]:
        return [self.count_text(t) + (1 if add_special_tokens else 0) for t in texts]

    def count_messages(self, messages, tools=None, add_generation_prompt: bool = True, **kwargs: Any) -> int:
        total = self.PER_PROMPT
        for m in messages:
            total += self.PER_MESSAGE + self.count_text(_message_text(m))
        if tools:
            total += self.count_text(json.dumps(tools, ensure_ascii=False))
        return total

    def count_message_batch(self, batch: Sequence[tuple]) -> list[int]:
        return [self.count_messages(m, t) for m, t, _ in batch]

    def describe(self) -> dict:
        return {"kind": "estimate", "source": "characters per token by script (see docs/lengths.md)",
                "chat_template": None, "vocab_size": None}


def _message_text(m: dict) -> str:
    content = m.get("content")
    if isinstance(content, list):
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    parts = [content if isinstance(content, str) else ""]
    for key in ("reasoning_content", "tool_calls", "name"):
        if m.get(key):
            v = m[key]
            parts.append(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
    return "\n".join(parts)
