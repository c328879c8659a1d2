"""What each request asks: synthetic prompts of a chosen length distribution, or the prompts and
lengths of a real request log (read by ``kvplan.workload``).

Synthetic prompts are random sequences of common English words that are one token each in the
usual BPE vocabularies, so ``N`` words ≈ ``N`` prompt tokens; the exact count is always taken
from the server's ``usage``. Random words also keep requests from sharing a cached prefix.

``read_log_requests`` is the single integration point with the request-log readers of
``kvplan.workload``; nothing else in ``kvplan.bench`` touches that package.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Optional, Sequence

from ..errors import UsageError
from .config import BenchConfig, LengthDist

_WORDS = tuple(" the of and to in is it that for on was with as at by be this have from or one had not but what "
               "all were when we there can an your which their said if do will each about how up out them then "
               "she many some so these would other into has more her two like him see time could no make than "
               "first been its who now people my made over did down only way find use may water long little "
               "very after words called just where most know get through back much go good new write our me "
               "man too any day same right look think also around another came come work three word must because "
               "does part even place well such here take why things help put years different away again off went "
               "old number great tell men say small every found still between name should home big give air line "
               "set own under read last never us left end along while might next sound below saw something "
               "thought both few those always looked show large often together asked house world going want school "
               "important until form food keep children feet land side without boy once animals life enough took "
               "sometimes four head above kind began almost live page got earth need far hand high year mother "
               "light parts country father let night following picture being study second eyes soon times story "
               "boys since white days ever paper hard near sentence better best across during today others sure "
               "means knew its try told young miles sun ways thing whole hear example heard several change answer "
               "room sea against top turned learn point city play toward five using himself usually".split())


@dataclass(frozen=True)
class LogRequest:
    """One request taken from a log: its conversation or prompt, and its known lengths."""

    messages: Optional[tuple] = None
    prompt: Optional[str] = None
    max_tokens: Optional[int] = None
    prompt_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    timestamp: Optional[float] = None


def read_log_requests(paths: Sequence[str], limit: Optional[int] = None) -> tuple[list[LogRequest], dict]:
    """THE adapter to ``kvplan.workload``: every usable request of the logs (up to ``limit``) and
    a small account ``{"read": N, "skipped": {reason: n}}``. Multimodal records are skipped
    (a synthetic load generator cannot resend their media)."""
    try:
        from ..workload.analysis import LengthsOptions, _Book, iter_requests
        from ..workload.sources import expand_paths
    except ImportError as exc:  # pragma: no cover - the workload package is part of kvplan
        raise UsageError(f"--requests: the request-log reader is unavailable ({exc})") from None
    opts = LengthsOptions()
    book = _Book(opts)
    out: list[LogRequest] = []
    skipped: dict[str, int] = {}
    for _rid, r in iter_requests(expand_paths(list(paths), require_existing=True), opts, book):
        if r.multimodal:
            skipped["multimodal"] = skipped.get("multimodal", 0) + 1
            continue
        if not r.messages and not r.prompt:
            skipped["no_prompt"] = skipped.get("no_prompt", 0) + 1
            continue
        msgs = tuple({"role": m.get("role", "user"), "content": m.get("content", "")}
                     for m in r.messages if isinstance(m, dict)) if r.messages else None
        out.append(LogRequest(msgs, r.prompt, r.max_tokens, r.prompt_tokens, r.output_tokens, r.timestamp))
        if limit is not None and len(out) >= limit:
            break
    for reason, n in book.skipped.items():
        skipped[reason] = skipped.get(reason, 0) + n
    if not out:
        raise UsageError(f"--requests: no usable request in {', '.join(paths)} (skipped: {skipped or 'none'})")
    return out, {"read": book.read, "used": len(out), "skipped": skipped}


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: a JSON body (bytes, built once) and the lengths it asks for."""

    body: bytes
    max_tokens: int
    input_len_hint: int


def _draw(dist: LengthDist, rng: random.Random, empirical: Sequence[int], fallback: Optional[int]) -> int:
    if dist.kind == "fixed":
        return int(dist.a)
    if dist.kind == "uniform":
        return rng.randint(int(dist.a), int(dist.b))
    if dist.kind == "normal":
        return max(1, int(round(rng.gauss(dist.a, dist.b))))
    if dist.kind == "empirical":
        return rng.choice(empirical)
    # 'log': the record's own value when it has one
    return fallback if fallback else (rng.choice(empirical) if empirical else 64)


class RequestSource:
    """Request ``i`` of the run, deterministic in (seed, i) so every worker process agrees.
    Built once by the orchestrator and pickled to the workers."""

    def __init__(self, cfg: BenchConfig, model: str, ignore_eos: bool, log: Sequence[LogRequest] = (),
                 exact=None):
        self.cfg = cfg
        self.exact = exact  # an ExactPrompts (--prompt-length exact), else words ≈ tokens
        self.model = model
        self.ignore_eos = ignore_eos
        self.log = list(log)
        self.empirical_in = [r.prompt_tokens or _estimate(r) for r in self.log]
        self.empirical_out = [r.output_tokens or r.max_tokens for r in self.log if (r.output_tokens or r.max_tokens)]

    def __len__(self) -> int:
        return len(self.log)

    def timestamps(self) -> list[Optional[float]]:
        return [r.timestamp for r in self.log]

    def get(self, i: int) -> RequestSpec:
        cfg = self.cfg
        rng = random.Random((cfg.seed << 32) ^ i)
        rec = self.log[i % len(self.log)] if self.log else None
        out_len = _draw(cfg.output_len, rng, self.empirical_out,
                        (rec.output_tokens or rec.max_tokens) if rec else None)
        if rec is not None and cfg.input_len.kind == "log":
            messages, prompt, hint = rec.messages, rec.prompt, rec.prompt_tokens or _estimate(rec)
        else:
            n = _draw(cfg.input_len, rng, self.empirical_in, None)
            if self.exact is not None:
                prompt = self.exact.text(n, rng)
            else:
                prompt = "".join(" " + w for w in rng.choices(_WORDS, k=n)).lstrip()
            messages, hint = None, n
        body: dict = {"model": self.model, "max_tokens": out_len, "stream": cfg.stream}
        if cfg.endpoint == "chat":
            body["messages"] = list(messages) if messages else [{"role": "user", "content": prompt or ""}]
        else:
            body["prompt"] = prompt if prompt is not None else "\n".join(str(m.get("content", "")) for m in messages or ())
        if cfg.stream:
            body["stream_options"] = {"include_usage": True}
        if self.ignore_eos:
            body["ignore_eos"] = True
        return RequestSpec(json.dumps(body, separators=(",", ":")).encode(), out_len, hint)


def _estimate(r: LogRequest) -> int:
    """~4 characters per token: only for a log without server-reported prompt counts."""
    text = r.prompt or "".join(str(m.get("content", "")) for m in r.messages or ())
    return max(1, len(text) // 4)
