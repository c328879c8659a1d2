"""Fit a :class:`StepTimeProfile` to a real run: ``kvplan bench`` client timings, one equation per request.

Why per request and not per ITL gap: vLLM's V1 engine gives every running request exactly one
token per step (no speculative decoding here), so between a request's first and last token there
were exactly ``output_tokens - 1`` engine steps, whatever else was running. Their summed duration
is measured by the client (last token − first token); what those steps computed is known from the
other requests' records on the same clock: every token another request received in that window was
one more sequence (and its context one more KV read) in one of those steps, and every first token
another request received in it was a whole prefill in one of them. Dividing by the step count gives
one linear equation per request in the profile's coefficients — the request's TPOT::

    TPOT_r = overhead + per_seq · seqs/step + per_token · tokens/step
             + per_kv_token · kv_read/step + per_attn_pair · attn_pairs/step

Requests that found the server idle add a second kind of equation, for prefill and the API
server's own latency: ``TTFT_q = request_overhead + step(prefill of q)``.

The coefficients are a non-negative least-squares solution (Lawson–Hanson on the normal equations,
pure Python: six unknowns need no numpy). The fitted step is the plain sum of its terms
(``serial_fraction = 1``): memory and compute regimes are not separable from per-request sums.

Step shapes follow the simulator's accounting (:mod:`kvplan.sim.steptime`): a decode of a request
with ``L`` tokens of context reads ``L`` KV entries; a prefill of ``p`` new tokens after ``s``
cached ones computes ``p·s + p²/2`` attention pairs and reads ``s + p`` KV entries
(:meth:`kvplan.sim.engine.Engine._schedule` counts them so).

Limits, stated in the fit: chunks are mapped to tokens proportionally when the server coalesced
tokens into one chunk; requests preempted during the run make their window's equation wrong (the
server's preemption counter is reported, and such runs are flagged); prefills longer than the
step's token budget are counted in the step of their first token.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from ..errors import UsageError
from ..runs.files import find_records, iter_records, load_result
from .fitmath import explained, nnls, quality
from .steptime import StepTimeProfile

#: Coefficients the fit solves for, in design-matrix column order.
COEFFICIENTS = ("overhead_s", "per_seq_s", "per_token_s", "per_kv_token_s", "per_attn_pair_s", "request_overhead_s")
#: A TTFT equation is used only when nothing else was scheduled between the send and the first token.
MIN_DECODE_STEPS = 4  # shorter windows are dominated by the client's timing jitter
#: Decode windows are cut into pieces of this many chunks (see :func:`build_equations`).
DEFAULT_WINDOW_CHUNKS = 8
CALIBRATION_FORMAT = "kvplan-calibration/1"


@dataclass(frozen=True)
class _Req:
    """One successful request of a run, reduced to what the equations need (seconds on the run's clock)."""

    sent: float
    first: float
    last: float
    prompt: int
    output: int
    emissions: tuple[float, ...]  # time of each chunk (first chunk = first token)
    tokens_per_chunk: float  # tokens after the first, per later chunk (usage / chunks)


@dataclass(frozen=True)
class RunSummary:
    """What one input run contributed."""

    result: str
    records: str
    requests_read: int
    requests_used: int
    skipped: dict[str, int]
    tpot_equations: int
    ttft_equations: int
    rate: Optional[float]
    preemptions: Optional[float]
    server_checks: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"result": self.result, "records": self.records, "requests_read": self.requests_read,
                "requests_used": self.requests_used, "skipped": dict(self.skipped),
                "tpot_equations": self.tpot_equations, "ttft_equations": self.ttft_equations,
                "rate": self.rate, "preemptions": self.preemptions, "server_checks": dict(self.server_checks)}


@dataclass(frozen=True)
class CalibrationResult:
    """The fitted profile plus how well it reproduces what was measured."""

    profile: StepTimeProfile
    runs: tuple[RunSummary, ...]
    fit: dict[str, Any]
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"format": CALIBRATION_FORMAT, "profile": self.profile.to_dict(), "runs": [r.to_dict() for r in self.runs],
                "fit": self.fit, "warnings": list(self.warnings)}


# --------------------------------------------------------------------------- reading runs
# The run files' format is read by kvplan.runs.files, the one reader bench uses too.
_CALIBRATE_READS = "calibrate reads the --output of `kvplan bench`"
_RECORDS_NEEDED = " (calibration needs each request's token times, the result JSON alone has only percentiles)"


def _load_json(path: Path) -> dict:
    return load_result(path, hint=_CALIBRATE_READS)


def _records_path(result_path: Path, result: dict, given: Optional[str | Path]) -> Path:
    return find_records(result_path, result, given, why=_RECORDS_NEEDED)


def _num(obj: dict, key: str, path: Path, lineno: int, *, integer: bool = False) -> Optional[float]:
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise UsageError(f"{path}:{lineno}: field {key!r} must be a number, got {v!r}")
    if integer and v != int(v):
        raise UsageError(f"{path}:{lineno}: field {key!r} must be a whole number, got {v!r}")
    return int(v) if integer else float(v)


def read_requests(path: Path) -> tuple[list[_Req], int, dict[str, int]]:
    """The successful, measured requests of a records file; skipped ones counted by reason."""
    reqs: list[_Req] = []
    skipped: dict[str, int] = {}
    n = 0

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    for lineno, obj in iter_records(path):
        n += 1
        if obj.get("warmup"):
            skip("warmup")
            continue
        if not obj.get("ok", obj.get("error") is None):
            skip(f"failed:{obj.get('error') or 'unknown'}")
            continue
        sent = _num(obj, "sent", path, lineno)
        first = _num(obj, "first_token", path, lineno)
        last = _num(obj, "last_token", path, lineno)
        prompt = _num(obj, "prompt_tokens", path, lineno, integer=True)
        output = _num(obj, "output_tokens", path, lineno, integer=True)
        if sent is None or first is None or last is None or prompt is None or output is None:
            skip("missing_timing_or_usage")
            continue
        if obj.get("usage_missing"):
            skip("usage_missing")
            continue
        itl = obj.get("itl") or []
        if not isinstance(itl, list) or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in itl):
            raise UsageError(f"{path}:{lineno}: field 'itl' must be a list of numbers")
        if first < sent or last < first:
            raise UsageError(f"{path}:{lineno}: times out of order (sent {sent}, first_token {first}, last_token {last})")
        times = [first]
        for gap in itl:
            times.append(times[-1] + float(gap))
        later_chunks = len(times) - 1
        per_chunk = (output - 1) / later_chunks if later_chunks else 0.0
        reqs.append(_Req(sent, first, last, int(prompt), int(output), tuple(times), per_chunk))
    return reqs, n, skipped


# --------------------------------------------------------------------------- equations
def _decode_kv_sum(prompt: int, k_from: float, k_to: float) -> float:
    """Σ context over decode tokens k_from..k_to (token k reads prompt + k - 1 entries), continuous."""
    if k_to < k_from:
        return 0.0
    n = k_to - k_from + 1
    return n * (prompt - 1) + (k_from + k_to) * n / 2


def _around(reqs: Sequence[_Req], starts: Sequence[float], span: float, a: float, b: float) -> Sequence[_Req]:
    """The requests (sorted by send time) that may be alive somewhere in [a, b]: sent by b, and not
    before a − span (``span`` = the longest send → last token of the run), so a window costs the
    requests around it, not the whole run."""
    return reqs[bisect.bisect_left(starts, a - span):bisect.bisect_right(starts, b)]


def _window_features(reqs: Sequence[_Req], starts: Sequence[float], a: float, b: float,
                     span: float = math.inf) -> list[float]:
    """Summed step shape of every step that ended in (a, b]: [seqs, tokens, kv_read, pairs]."""
    seqs = tokens = kv = pairs = 0.0
    for q in _around(reqs, starts, span, a, b):
        if q.last <= a or q.first > b:
            continue
        times = q.emissions
        lo_i = bisect.bisect_right(times, a)
        hi_i = bisect.bisect_right(times, b)
        if hi_i <= lo_i:
            continue
        if lo_i == 0:  # the prefill step (first token) is in the window
            seqs += 1
            tokens += q.prompt
            kv += q.prompt
            pairs += q.prompt * q.prompt / 2.0
            lo_i = 1
        if hi_i > lo_i:
            n_dec = (hi_i - lo_i) * q.tokens_per_chunk
            # chunk j (j >= 1) carries tokens up to 1 + j * tokens_per_chunk
            k_from = 1 + (lo_i - 1) * q.tokens_per_chunk + 1
            k_to = 1 + (hi_i - 1) * q.tokens_per_chunk
            seqs += n_dec
            tokens += n_dec
            kv += _decode_kv_sum(q.prompt, k_from, k_to)
    return [seqs, tokens, kv, pairs]


def build_equations(reqs: Sequence[_Req], window_chunks: int = 0) -> tuple[list[list[float]], list[float], list[str]]:
    """Rows (features per step, in :data:`COEFFICIENTS` order), targets (s per step) and the kind of each row.

    ``tpot``: a request's whole decode window (for reporting how well TPOT is reproduced);
    ``decode``: the same window cut into pieces of ``window_chunks`` chunks (the rows that are
    fitted: the batch changes within a request's life, and the pieces see it change; 0 = whole
    windows); ``ttft``: requests that found the engine idle."""
    reqs = sorted(reqs, key=lambda r: r.sent)
    starts = [r.sent for r in reqs]
    span = max((r.last - r.sent for r in reqs), default=0.0)
    rows: list[list[float]] = []
    ys: list[float] = []
    kinds: list[str] = []

    def add(a: float, b: float, steps: float, kind: str) -> None:
        seqs, tokens, kv, pairs = _window_features(reqs, starts, a, b, span)
        rows.append([1.0, seqs / steps, tokens / steps, kv / steps, pairs / steps, 0.0])
        ys.append((b - a) / steps)
        kinds.append(kind)

    for r in reqs:
        steps = r.output - 1
        if steps < MIN_DECODE_STEPS or r.last <= r.first:
            continue
        add(r.first, r.last, steps, "tpot")
        chunks = len(r.emissions) - 1
        k = window_chunks if 0 < window_chunks < chunks else chunks
        j = 0
        while j < chunks:
            j1 = min(chunks, j + k)
            if chunks - j1 < k // 2:  # fold a short tail into this piece
                j1 = chunks
            a, b = r.emissions[j], r.emissions[j1]
            if b > a:
                add(a, b, (j1 - j) * r.tokens_per_chunk, "decode")
            j = j1
    # TTFT of requests that had the engine to themselves: no other request was between its send and
    # its last token while this one waited (it would share or delay the prefill step).
    for q in reqs:
        if any(o is not q and o.sent <= q.first and o.last >= q.sent for o in _around(reqs, starts, span, q.sent, q.first)):
            continue
        rows.append([1.0, 1.0, float(q.prompt), float(q.prompt), q.prompt * q.prompt / 2.0, 1.0])
        ys.append(q.first - q.sent)
        kinds.append("ttft")
    return rows, ys, kinds


# --------------------------------------------------------------------------- which coefficients the runs identify
#: The optional coefficients, simplest first: per sequence, per token, per KV entry read, per attention pair.
OPTIONAL = (1, 2, 3, 4)
#: A feature that the simpler ones already explain this well (weighted R²) cannot be told apart from them.
COLLINEAR_R2 = 0.95


def _nnls_subset(rows, ys, weights, active: Sequence[int]) -> list[float]:
    sub = nnls([[row[i] for i in active] for row in rows], ys, weights)
    coef = [0.0] * len(COEFFICIENTS)
    for i, v in zip(active, sub):
        coef[i] = v
    return coef


def select_coefficients(rows, ys, weights, kinds) -> tuple[list[int], dict[str, Any]]:
    """Keep a coefficient only if its feature varies independently of the simpler ones in these runs.

    Why: in a bench run the KV read per step grows with the batch (every sequence brings its
    context), and prefill tokens with the arrival rate; an unconstrained fit then splits time between
    terms it cannot tell apart, which extrapolates badly to other rates and lengths. Each optional
    feature, simplest first, is regressed on the ones already kept; above COLLINEAR_R2 it is dropped
    (its cost stays in the simpler terms) and the profile says so."""
    active = [0] + ([5] if "ttft" in kinds else [])
    dropped: dict[str, float] = {}
    for i in OPTIONAL:
        col = [r[i] for r in rows]
        if not any(col):
            dropped[COEFFICIENTS[i]] = 1.0
            continue
        r2 = explained(rows, weights, i, active)
        if r2 > COLLINEAR_R2:
            dropped[COEFFICIENTS[i]] = round(r2, 4)
        else:
            active.append(i)
    active.sort()
    return active, {"method": f"a coefficient is fitted only if the simpler ones explain its feature with R² <= "
                              f"{COLLINEAR_R2} (weighted, over the equations)",
                    "kept": [COEFFICIENTS[i] for i in active], "dropped_r2": dropped}


# --------------------------------------------------------------------------- quality
def _server_checks(result: dict) -> dict[str, Any]:
    """vLLM's own view of the same run, from the histograms bench captured (deltas over the run)."""
    d = (result.get("server") or {}).get("deltas") or {}
    out: dict[str, Any] = {}

    def mean(name: str) -> Optional[float]:
        c, s = d.get(f"{name}_count"), d.get(f"{name}_sum")
        return round(s / c, 6) if c and s is not None else None

    steps = d.get("vllm:iteration_tokens_total_count")
    if steps:
        out["engine_steps"] = steps
        out["tokens_per_step_mean"] = mean("vllm:iteration_tokens_total")
    for key, name in (("server_tpot_mean_s", "vllm:request_time_per_output_token_seconds"),
                      ("server_itl_mean_s", "vllm:inter_token_latency_seconds"),
                      ("server_prefill_mean_s", "vllm:request_prefill_time_seconds"),
                      ("server_decode_mean_s", "vllm:request_decode_time_seconds"),
                      ("server_queue_mean_s", "vllm:request_queue_time_seconds"),
                      ("server_ttft_mean_s", "vllm:time_to_first_token_seconds")):
        m = mean(name)
        if m is not None:
            out[key] = m
    lat = result.get("latency_s") or {}
    for key in ("ttft", "tpot"):
        m = (lat.get(key) or {}).get("mean")
        if m is not None:
            out[f"client_{key}_mean_s"] = m
    return out


def _api_latency(checks: dict[str, Any]) -> Optional[float]:
    """Mean time a request spent outside vLLM's engine before its first token reached the client
    (client TTFT − vLLM's queue + prefill time): a diagnostic, it grows with load on a small host."""
    c, q, p = (checks.get(k) for k in ("client_ttft_mean_s", "server_queue_mean_s", "server_prefill_mean_s"))
    if c is None or q is None or p is None:
        return None
    checks["api_latency_mean_s"] = round(c - q - p, 6)
    return c - q - p


def prefill_step_features(reqs: Sequence[_Req], coincide_s: float = 0.002) -> Optional[list[float]]:
    """Mean shape of the step that computed each request's prefill: its own prompt, every request
    decoding at that moment (one token each, its context read), and other prefills whose first
    token came out within ``coincide_s`` (the same step). vLLM's ``request_prefill_time_seconds``
    (scheduled → first token) measures exactly these steps, engine-side."""
    if not reqs:
        return None
    acc = [0.0] * len(COEFFICIENTS)
    reqs = sorted(reqs, key=lambda r: r.sent)
    starts = [r.sent for r in reqs]
    span = max(r.last - r.sent for r in reqs)
    for q in reqs:
        seqs, tokens, kv, pairs = 1.0, float(q.prompt), float(q.prompt), q.prompt * q.prompt / 2.0
        for o in _around(reqs, starts, span, q.first - coincide_s, q.first + coincide_s):
            if o is q:
                continue
            if abs(o.first - q.first) <= coincide_s:
                seqs += 1
                tokens += o.prompt
                kv += o.prompt
                pairs += o.prompt * o.prompt / 2.0
            elif o.first < q.first <= o.last:
                k = 1 + bisect.bisect_left(o.emissions, q.first) * o.tokens_per_chunk
                seqs += 1
                tokens += 1
                kv += o.prompt + k - 1
        for i, v in enumerate((1.0, seqs, tokens, kv, pairs, 0.0)):
            acc[i] += v
    return [v / len(reqs) for v in acc]


# --------------------------------------------------------------------------- entry point
def _collect(results: Sequence[str | Path], records: Optional[Sequence[Optional[str | Path]]], window_chunks: int = 0):
    recs_given = list(records or [])
    if len(recs_given) > len(results):
        raise UsageError(f"{len(recs_given)} --records files for {len(results)} result files: give at most one each")
    recs_given += [None] * (len(results) - len(recs_given))
    rows: list[list[float]] = []
    ys: list[float] = []
    kinds: list[str] = []
    runs: list[RunSummary] = []
    warnings: list[str] = []
    for res_path, rec_given in zip(results, recs_given):
        rp = Path(res_path)
        result = _load_json(rp)
        rec_path = _records_path(rp, result, rec_given)
        reqs, n_read, skipped = read_requests(rec_path)
        r_rows, r_ys, r_kinds = build_equations(reqs, window_chunks)
        checks = _server_checks(result)
        _api_latency(checks)
        prefill_mean = checks.get("server_prefill_mean_s")
        feats = prefill_step_features(reqs) if prefill_mean else None
        if feats is not None:
            r_rows.append(feats)
            r_ys.append(prefill_mean)
            r_kinds.append("prefill")
        preempt = ((result.get("server") or {}).get("deltas") or {}).get("vllm:num_preemptions_total")
        if preempt:
            warnings.append(f"{rp}: the server preempted {preempt:g} requests during the run: recomputed "
                            "prefills are not in the equations, so the fit overstates decode cost a little")
        if result.get("partial"):
            warnings.append(f"{rp}: partial run ({result.get('stop_reason')}); its completed requests are used")
        if result.get("client_bound"):
            warnings.append(f"{rp}: the load generator was client-bound; the timings include the client's delays")
        runs.append(RunSummary(
            result=str(rp), records=str(rec_path), requests_read=n_read, requests_used=len(reqs),
            skipped=skipped, tpot_equations=r_kinds.count("tpot"), ttft_equations=r_kinds.count("ttft"),
            rate=(result.get("rate") or {}).get("achieved"), preemptions=preempt, server_checks=checks))
        rows += r_rows
        ys += r_ys
        kinds += r_kinds
    return rows, ys, kinds, runs, warnings


def _by_kind(pred: Sequence[float], ys: Sequence[float], kinds: Sequence[str]) -> dict[str, Any]:
    return {label: quality(kind, [p for p, k in zip(pred, kinds) if k == kind], [y for y, k in zip(ys, kinds) if k == kind])
            for label, kind in (("tpot", "tpot"), ("decode_window", "decode"), ("ttft_idle", "ttft"),
                                ("prefill_step", "prefill"))}


def calibrate(results: Sequence[str | Path], *, records: Optional[Sequence[Optional[str | Path]]] = None,
              device: str = "", config: Optional[dict[str, Any]] = None,
              window_chunks: int = DEFAULT_WINDOW_CHUNKS) -> CalibrationResult:
    """Fit a step-time profile to one or more ``kvplan bench`` runs of the same server configuration.

    ``records[i]`` is the per-request records file of ``results[i]`` (default: the result's
    ``records_file`` or ``<result>.records.jsonl``). ``config`` (the plan flags the runs were
    served with) is recorded in the profile's ``fit`` so a profile is not reused blindly elsewhere."""
    if not results:
        raise UsageError("calibrate needs at least one `kvplan bench` result file")
    rows, ys, kinds, runs, warnings = _collect(results, records, window_chunks)
    n_t, n_f, n_p = kinds.count("tpot"), kinds.count("ttft"), kinds.count("prefill")
    if n_t < 3:
        raise UsageError(f"{', '.join(str(r) for r in results)}: only {n_t} requests with at least "
                         f"{MIN_DECODE_STEPS + 1} output tokens; calibration needs more (run `kvplan bench` "
                         "longer, with --output-len 32 or more)")
    if not n_f:
        warnings.append("no request found the server idle, so the API server's latency (request_overhead_s) "
                        "is not measured; add a run at a low rate (e.g. --rate 0.5)")
    if not n_p:
        warnings.append("the runs have no vLLM prefill-time histogram (/metrics not scraped), so prefill cost "
                        "rests on the decode windows and idle TTFTs only")
    # Each kind of equation carries the same total weight, so a thousand decode
    # windows do not drown ten idle TTFTs or the one engine-side prefill mean per run.
    n_d = kinds.count("decode")
    count = {"decode": n_d, "ttft": n_f, "prefill": n_p}
    # Within a kind the residuals are absolute (a window's error counts in seconds, so the fit keeps
    # the mean step right: E2E is a sum of steps); between kinds they are relative to the kind's mean.
    scale = {k: sum(y for y, kk in zip(ys, kinds) if kk == k) / n for k, n in count.items() if n}
    weights = [1.0 / (scale[k] ** 2 * count[k]) if k in scale else 0.0 for k in kinds]
    active, cv = select_coefficients(rows, ys, weights, kinds)
    coef = _nnls_subset(rows, ys, weights, active)
    pred = [sum(c * f for c, f in zip(coef, row)) for row in rows]
    fit: dict[str, Any] = {
        "method": "non-negative least squares (each kind of equation weighted equally): one equation per piece of "
                  "every request's decode window (window_chunks chunks), one TTFT equation per request that found the engine idle, one per run for vLLM's "
                  "mean prefill time",
        "coefficients": {name: coef[i] for i, name in enumerate(COEFFICIENTS)},
        "selection": cv,
        "equations": {"decode_windows": n_d, "tpot_requests": n_t, "ttft": n_f, "prefill": n_p},
        "window_chunks": window_chunks,
        **_by_kind(pred, ys, kinds),
        "runs": [r.to_dict() for r in runs],
    }
    if config:
        fit["config"] = dict(config)
    names = ", ".join(Path(r).name for r in results)
    profile = StepTimeProfile(
        overhead_s=coef[0], per_seq_s=coef[1], weights_read_s=0.0, per_kv_token_s=coef[3], per_token_s=coef[2],
        per_attn_pair_s=coef[4], serial_fraction=1.0, request_overhead_s=coef[5],
        source=f"calibrated on {names}", device=device,
        notes=(f"fitted by kvplan calibrate on {len(results)} run(s), {len(rows)} equations",
               "step = overhead + per_seq·seqs + per_token·tokens + per_kv_token·kv_read + per_attn_pair·pairs "
               "(serial_fraction 1: the terms add up)") + tuple(warnings),
        fit=fit)
    return CalibrationResult(profile=profile, runs=tuple(runs), fit=fit, warnings=tuple(warnings))


def predict_equations(profile: StepTimeProfile, results: Sequence[str | Path],
                      records: Optional[Sequence[Optional[str | Path]]] = None) -> dict[str, Any]:
    """How well ``profile`` reproduces other runs' equations (a held-out check: not used in a fit)."""
    rows, ys, kinds, _, _ = _collect(results, records)
    coef = [getattr(profile, name) for name in COEFFICIENTS]
    pred = [sum(c * f for c, f in zip(coef, row)) for row in rows]
    return _by_kind(pred, ys, kinds)


__all__ = ["calibrate", "CalibrationResult", "RunSummary", "nnls", "read_requests", "build_equations",
           "predict_equations", "prefill_step_features", "COEFFICIENTS"]
