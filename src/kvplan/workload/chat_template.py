"""Chat templates rendered exactly as Hugging Face renders them, without transformers.

``transformers.utils.chat_template_utils`` compiles a template in an
``ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)`` with the ``loopcontrols``
extension and a ``{% generation %}`` tag, overrides the ``tojson`` filter (no HTML escaping,
``ensure_ascii=False``) and adds the globals ``raise_exception``, ``strftime_now``, a restricted
``dict`` and a ``namespace`` that refuses underscore names. ``apply_chat_template`` passes the
tokenizer's named special tokens (``bos_token`` …) as variables, drops ``None``-valued message
keys and copies reasoning fields under their aliases. This module does the same, and
``tests/test_lengths_template.py`` checks the output against ``apply_chat_template`` itself.

On top, :func:`prepare_messages` applies what vLLM's OpenAI server does to a request body before
the template sees it: content parts joined with newlines (or kept as text parts when the
template loops over them), tool-call arguments parsed from JSON strings, and ``developer``
messages turned into ``system`` when the template does not know that role.
jinja2 is imported only when a template is compiled.
"""
from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any, Optional

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class TemplateError(Exception):
    """The template raised (``raise_exception`` or a type error): vLLM answers such requests 400."""


@lru_cache(maxsize=16)
def compile_template(source: str):
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(Extension):
        # HF's AssistantTracker: {% generation %}…{% endgeneration %} renders its body unchanged.
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} is not allowed")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise TemplateError(f"the chat template does not compile: {exc.message} (template line {exc.lineno})") from None


def normalize_messages(messages) -> list[dict]:
    """HF's normalisation: drop keys whose value is None, alias reasoning fields."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if v is not None}
        reasoning = next((m[k] for k in REASONING_FIELDS if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def render(source: str, messages, *, tools: Optional[list] = None, documents: Optional[list] = None,
           add_generation_prompt: bool = False, continue_final_message: bool = False,
           special_tokens: Optional[dict] = None, **kwargs: Any) -> str:
    """The text ``tokenizer.apply_chat_template(messages, tokenize=False, ...)`` returns."""
    import jinja2

    template = compile_template(source)
    chat = normalize_messages(messages)
    variables = {**(special_tokens or {}), **kwargs}
    tag = "CONTINUE_FINAL_MESSAGE_TAG "
    final = None
    if continue_final_message:
        if not chat or not isinstance(chat[-1].get("content"), str):
            raise TemplateError("continue_final_message needs a final message with text content")
        final = chat[-1]["content"]
        chat[-1] = {**chat[-1], "content": final + tag}
    try:
        text = template.render(messages=chat, tools=tools, documents=documents,
                               add_generation_prompt=add_generation_prompt, **variables)
    except jinja2.exceptions.TemplateError as exc:
        raise TemplateError(f"the chat template raised: {exc}") from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        raise TemplateError(f"the chat template failed on this request: {type(exc).__name__}: {exc}") from None
    if final is not None:
        at = text.rfind(tag.strip())
        if at < 0:
            raise TemplateError("continue_final_message: the template dropped the final message")
        text = text[:at] if text[at:at + len(tag)] == tag else text[:at].rstrip()
    return text


@lru_cache(maxsize=16)
def content_format(source: str) -> str:
    """vLLM's content-format detection: ``openai`` when the template loops over a message's
    ``content`` (so it expects a list of parts), else ``string`` (parts are joined)."""
    from jinja2 import nodes

    try:
        ast = compile_template(source).environment.parse(source)
    except Exception:  # noqa: BLE001 - an unparsable template fails later with a clear error
        return "string"

    def is_content(node) -> bool:
        while isinstance(node, (nodes.Filter, nodes.Test)):
            node = node.node
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and node.arg.value == "content":
            return True
        if isinstance(node, nodes.Getattr) and node.attr == "content":
            return True
        return isinstance(node, nodes.Name) and node.name == "content"

    return "openai" if any(is_content(loop.iter) for loop in ast.find_all(nodes.For)) else "string"


def prepare_messages(messages, source: str) -> list[dict]:
    """A request body's messages as vLLM hands them to the template (see the module docstring)."""
    fmt = content_format(source)
    knows_developer = '"developer"' in source or "'developer'" in source
    converted = False
    out = []
    for m in messages:
        m = dict(m)
        content = m.get("content")
        if isinstance(content, list):
            texts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content
                     if isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("text"), str))]
            m["content"] = [{"type": "text", "text": t} for t in texts] if fmt == "openai" else "\n".join(texts)
        if m.get("role") == "assistant" and isinstance(m.get("tool_calls"), list):
            if not m["tool_calls"]:
                m.pop("tool_calls")
            else:
                m["tool_calls"] = [_parse_arguments(tc) for tc in m["tool_calls"]]
        if m.get("role") == "developer" and not knows_developer:
            m["role"] = "system"
            m.pop("tools", None)
            converted = True
        out.append(m)
    if converted:
        out = _consolidate_system(out)
    return out


def _consolidate_system(messages: list[dict]) -> list[dict]:
    # vLLM merges every system message into one at the front after converting developer ones.
    systems, rest = [], []
    for i, m in enumerate(messages):
        if m.get("role") == "system":
            c = m.get("content", "")
            if isinstance(c, list):
                c = "\n".join(p.get("text", "") for p in c if isinstance(p, dict))
            if c:
                systems.append(c)
        else:
            rest.append(m)
    if len(systems) <= 1 and (not messages or messages[0].get("role") == "system" or not systems):
        return messages
    return [{"role": "system", "content": "\n\n".join(systems)}, *rest]


def _parse_arguments(call: Any) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    fn = dict(call["function"])
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            parsed = json.loads(args) if args else {}
        except json.JSONDecodeError:
            parsed = {}  # vLLM coerces malformed arguments to an empty object
        fn["arguments"] = parsed if isinstance(parsed, dict) else {}
    elif not args:
        fn["arguments"] = {}
    return {**call, "function": fn}
