"""`kvplan watch` on a server with speculative decoding and LoRA: the draft acceptance rate and mean
acceptance length over the window (vLLM's own formulas over its spec_decode counters), the adapters
vllm:lora_requests_info names, and the acceptance floor as a tripped threshold."""
from __future__ import annotations

from kvplan.ops.thresholds import Thresholds
from kvplan.ops.watch import Watcher
from kvplan.ops.watch_view import render_line
from test_watch import LAB, Script, clock, scrape


def _with_flags(base: str, drafts: float, drafted: float, accepted: float, waiting: str = "") -> str:
    return base + "\n".join([
        "# TYPE vllm:spec_decode_num_drafts counter", f"vllm:spec_decode_num_drafts_total{{{LAB}}} {drafts}",
        "# TYPE vllm:spec_decode_num_draft_tokens counter", f"vllm:spec_decode_num_draft_tokens_total{{{LAB}}} {drafted}",
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f"vllm:spec_decode_num_accepted_tokens_total{{{LAB}}} {accepted}",
        "# TYPE vllm:lora_requests_info gauge",
        f'vllm:lora_requests_info{{max_lora="2",running_lora_adapters="sql,chat",waiting_lora_adapters="{waiting}"}} '
        "1.7e9"]) + "\n"


def test_acceptance_comes_from_the_window_and_trips_below_the_floor():
    a = _with_flags(scrape(100, 100, 0, [0.4]), drafts=1000, drafted=3000, accepted=2000)
    b = _with_flags(scrape(200, 400, 0, [0.4]), drafts=1100, drafted=3300, accepted=2060, waiting="code")
    w = Watcher("http://x", 60, Thresholds(spec_acceptance=0.3), fetch=Script([a, b]), clock=clock(0, 30))
    w.poll()
    s = w.poll()
    assert s.spec_acceptance_rate == 0.2  # 60 accepted of 300 drafted in the window, not 2060 / 3300
    assert s.spec_mean_acceptance_length == 1.6  # 1 + 60 / 100 drafts
    assert s.lora_running_adapters == "sql,chat" and s.lora_waiting_adapters == "code"
    assert "spec_acceptance" in s.tripped
    assert "draft acceptance=20.0%!" in render_line(s)


def test_a_server_without_them_shows_no_such_rows():
    w = Watcher("http://x", 60, Thresholds(), fetch=Script([scrape(1, 1, 0, [0.4]), scrape(2, 2, 0, [0.4])]),
                clock=clock(0, 30))
    w.poll()
    s = w.poll()
    assert s.spec_acceptance_rate is None and s.lora_running_adapters is None
    assert "acceptance" not in render_line(s) and "LoRA" not in render_line(s)
