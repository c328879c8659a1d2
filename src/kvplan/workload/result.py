"""The result of ``kvplan lengths``: one frozen object every renderer reads.

``LengthsResult.to_dict`` is the JSON contract (docs/lengths.md): fields are only ever added.
Token figures are exact for the records counted by ``usage`` or ``tokenizer``; when any record
was estimated, ``estimated`` is true and every renderer says so.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from .stats import Histogram, Percentiles

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RecordCounts:
    read: int
    used: int
    skipped: dict  # reason → count
    requests: int  # requests analysed (a ShareGPT conversation gives one per human turn)
    requests_skipped: dict  # reason → count, for requests of records that were otherwise used
    shapes: dict  # shape → requests
    lines_ignored: int  # blank lines, and log lines that are not request-log lines


@dataclass(frozen=True)
class FileCounts:
    read: int
    skipped: dict  # reason → count


@dataclass(frozen=True)
class IssueInfo:
    file: str
    line: int
    reason: str
    message: str


@dataclass(frozen=True)
class TurnRow:
    turn: int  # 1-based; the last row may be "turn ≥ N" (open_ended)
    count: int
    p50: int
    p90: int
    p99: int
    max: int
    mean: float
    open_ended: bool = False


@dataclass(frozen=True)
class CoverageRow:
    max_model_len: int
    requests: int
    rejected: int  # prompt ≥ max_model_len, or max_tokens > max_model_len: vLLM answers 400
    clamped: int  # prompt + max_tokens > max_model_len: vLLM 0.33 lowers max_tokens to the room left
    truncated: int  # the observed output would not have fit: the answer is cut (finish_reason=length)
    fits: int  # neither rejected nor clamped
    rejected_share: float
    clamped_share: float
    truncated_share: float
    fits_share: float
    label: str = ""  # "recommended", "P99", …


@dataclass(frozen=True)
class BlockWasteRow:
    block_size: int
    mean_tokens: float  # mean final length (prompt + output) per request
    mean_allocated_tokens: float  # mean of ceil(length / block) × block
    mean_waste_tokens: float
    waste_share: float  # waste / allocated
    waste_bytes_per_request: Optional[int]  # with a plan: × KV bytes per token (whole replica)
    waste_gib_full_cache: Optional[float]  # with a plan: per GPU, when the cache is full of this mix


@dataclass(frozen=True)
class Arrivals:
    requests: int  # requests with a timestamp
    first: float
    last: float
    duration_s: float
    mean_rps: float
    peak_rps_1s: int
    peak_rps_60s: float
    p99_rps_1s: int
    concurrency_source: Optional[str]  # "durations" when start + duration were logged, else None
    concurrency_peak: Optional[int]
    concurrency_p99: Optional[int]
    concurrency_mean: Optional[float]


@dataclass(frozen=True)
class Conversations:
    count: int
    turns: Percentiles
    max_context: Percentiles  # the largest prompt + budget over a conversation's turns
    fit_at_recommended: int  # conversations whose every turn fits the recommended max_model_len
    fit_share: float
    evicted: int  # conversations closed early because more than max_open_sessions were open


@dataclass(frozen=True)
class Recommendation:
    percentile: float
    block_size: int
    max_model_len: Optional[int]
    max_model_len_reason: str
    max_tokens: Optional[int]
    max_tokens_reason: str
    history_turns: Optional[int]
    history_tokens: Optional[int]
    history_reason: str
    #: the model's own limit (vLLM's derived max_model_len), when the model is known
    model_limit: Optional[int] = None
    #: the percentile's length before it was capped at model_limit (None: not capped)
    max_model_len_capped_from: Optional[int] = None
    max_tokens_capped_from: Optional[int] = None
    #: requests whose prompt + max_tokens exceed the model's limit (no max_model_len serves them whole)
    outliers: int = 0
    outliers_reason: str = ""


@dataclass(frozen=True)
class LengthsResult:
    inputs: dict  # files, tokenizer, model, options
    files: FileCounts
    records: RecordCounts
    issues: tuple[IssueInfo, ...]  # the first few, with file and line
    counted_by: dict  # prompt counts: usage | tokenizer | estimate → requests
    output_counted_by: dict  # output counts: usage | tokenizer | estimate | unknown → requests
    estimated: bool
    prompt_tokens: Percentiles
    output_tokens: Percentiles
    max_tokens: Percentiles  # the output budgets requests asked for (or --max-tokens)
    total_tokens: Percentiles  # prompt + output budget: what max_model_len must hold
    final_tokens: Percentiles  # prompt + observed output (budget when unknown): KV held at the end
    histograms: dict  # name → Histogram
    finish_reasons: dict
    per_turn: tuple[TurnRow, ...]
    conversations: Optional[Conversations]
    arrivals: Optional[Arrivals]
    coverage: tuple[CoverageRow, ...]
    block_waste: tuple[BlockWasteRow, ...]
    recommendation: Recommendation
    notes: tuple[str, ...]
    # The exact distribution of final lengths as (tokens, requests) pairs: what kvplan plan
    # --requests needs to compute blocks per request. Not part of the JSON output.
    final_length_counts: tuple[tuple[int, int], ...] = field(default=(), repr=False)
    # The exact histograms behind the coverage table (name → (tokens, requests) pairs), so that
    # coverage at any other max_model_len can be computed later. Not part of the JSON output.
    exact: dict = field(default_factory=dict, repr=False, compare=False)
    issues_total: int = 0  # every issue found; ``issues`` holds the first --max-issues of them

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("final_length_counts", None)
        d.pop("exact", None)
        d["histograms"] = {k: {"edges": list(h.edges), "counts": list(h.counts)} for k, h in self.histograms.items()}
        return {"schema_version": SCHEMA_VERSION, "kind": "kvplan.lengths", **d}


__all__ = ["Arrivals", "BlockWasteRow", "Conversations", "CoverageRow", "FileCounts", "Histogram", "IssueInfo",
           "LengthsResult", "Percentiles", "Recommendation", "RecordCounts", "TurnRow", "SCHEMA_VERSION"]
