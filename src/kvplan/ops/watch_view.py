"""Rendering of ``kvplan watch`` snapshots: a rich table (tripped thresholds in red) and one
plain line per snapshot when stdout is not a terminal."""
from __future__ import annotations

from typing import Optional

from .watch import Snapshot

_ROWS = [
    ("KV-cache usage", "kv_cache_usage", "pct", "kv_cache_usage"),
    ("GPU memory used", "gpu_memory_used_fraction", "pct", "gpu_memory"),
    ("running", "requests_running", "int", None),
    ("waiting", "requests_waiting", "int", "waiting"),
    ("preemptions / s", "preemptions_per_s", "rate", "preemptions"),
    ("prompt tokens / s", "prompt_tokens_per_s", "rate", None),
    ("generation tokens / s", "generation_tokens_per_s", "rate", None),
    ("requests / s", "requests_per_s", "rate", None),
    ("TTFT P50 / P99", ("ttft_p50_s", "ttft_p99_s"), "s", "ttft_p99"),
    ("E2E P50 / P99", ("e2e_p50_s", "e2e_p99_s"), "s", "e2e_p99"),
    ("queue P50 / P99", ("queue_p50_s", "queue_p99_s"), "s", None),
]


def _fmt(v: Optional[float], kind: str) -> str:
    if v is None:
        return "–"
    if kind == "pct":
        return f"{v * 100:.1f}%"
    if kind == "int":
        return f"{v:.0f}"
    if kind == "s":
        return f"{v:.3f}s"
    if kind == "text":
        return str(v) or "none"
    if kind == "len":
        return f"{v:.2f}"
    return f"{v:,.1f}"


#: shown only for servers that expose them (--speculative-config, --enable-lora)
_OPTIONAL_ROWS = [
    ("draft acceptance", "spec_acceptance_rate", "pct", "spec_acceptance"),
    ("tokens per step (acceptance length)", "spec_mean_acceptance_length", "len", None),
    ("LoRA adapters running", "lora_running_adapters", "text", None),
    ("LoRA adapters waiting", "lora_waiting_adapters", "text", None),
]


def rows(s: Snapshot) -> list[tuple[str, str, bool]]:
    out = []
    for label, attr, kind, th in _ROWS + [r for r in _OPTIONAL_ROWS if getattr(s, r[1]) is not None]:
        if isinstance(attr, tuple):
            text = " / ".join(_fmt(getattr(s, a), kind) for a in attr)
        else:
            text = _fmt(getattr(s, attr), kind)
        out.append((label, text, th is not None and th in s.tripped))
    return out


def render_table(s: Snapshot):
    from rich.table import Table

    title = f"kvplan watch {s.url}  " + ("[green]up[/]" if s.up else f"[red]DOWN[/] {s.error}")
    if s.restarts:
        title += f"  [yellow]restarts: {s.restarts}[/]"
    t = Table(title=title, caption=f"window {s.window_s or 0:.0f} s, {s.scrapes} scrapes")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for label, text, hot in rows(s):
        t.add_row(label, f"[bold red]{text}[/]" if hot else text)
    return t


def render_line(s: Snapshot) -> str:
    if not s.up:
        return f"DOWN {s.error}"
    return "  ".join(f"{label}={text}{'!' if hot else ''}" for label, text, hot in rows(s))
