"""``kvplan bench compare BASELINE CURRENT``: did P50/P95/P99 of TTFT, TPOT and E2E regress?

Each quantile's relative change comes with a distribution-free confidence interval
(stats.quantile_change_ci: order statistics of the per-request samples stored in the result
files, exact for any latency distribution and any n; a bootstrap of a P99 from 50 samples is not).
The nine tests (3 metrics × 3 quantiles) are corrected together with Bonferroni: each row's
interval is at 1 - (1 - confidence) / rows, so the chance that identical configurations show any
row as worse is at most 1 - confidence. A quantile needs a minimum count per side
(stats.min_count_for_quantile at that level: 10 for P50, 129 for P95, 655 for P99 at 95%);
below it the row is ``n/a`` and a warning says so (it never fails a build).

A change is *worse* only when it exceeds the threshold AND its interval excludes zero (noise does
not fail a build), *better* likewise in the other direction, and *same* otherwise. Gates about
trust come first: a partial or client-bound run on either side makes the comparison fail, because
its latencies describe the client or an interrupted run, not the server; and two runs that offered
different traffic (rate, concurrency, arrival, lengths, request log, endpoint) are not compared at
all unless asked (``allow_traffic_change``): their latencies differ because the load did.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from . import stats

METRICS = ("ttft", "tpot", "e2e")
QUANTILES = (0.5, 0.95, 0.99)
#: the bench config keys that define the offered traffic (BenchConfig): equal on both sides, or
#: the latencies answer a different question
TRAFFIC_KEYS = ("rate", "concurrency", "arrival", "burstiness", "ramp_s", "input_len", "output_len", "requests_log",
                "replay", "replay_speed", "endpoint", "stream", "ignore_eos")


def traffic_differences(base: dict, cur: dict) -> list[str]:
    """``["rate 0.5 vs 2.0", ...]``: the traffic settings in which the two results' configs differ."""
    bc, cc = base.get("config") or {}, cur.get("config") or {}
    return [f"{key} {bc.get(key)!r} vs {cc.get(key)!r}" if not isinstance(bc.get(key), (int, float))
            or isinstance(bc.get(key), bool) else f"{key} {bc.get(key):g} vs {cc.get(key)}"
            for key in TRAFFIC_KEYS if (key in bc or key in cc) and bc.get(key) != cc.get(key)]


@dataclass(frozen=True)
class MetricVerdict:
    metric: str
    quantile: float
    baseline: Optional[float]
    current: Optional[float]
    change: Optional[float]  # relative
    ci_low: Optional[float]
    ci_high: Optional[float]
    verdict: str  # better | same | worse | n/a
    counts: tuple[int, int] = (0, 0)  # samples: baseline, current
    min_count: int = 0  # per side, for this quantile at the row's level
    note: str = ""

    def to_dict(self) -> dict:
        return {"metric": self.metric, "quantile": self.quantile, "stat": f"p{round(self.quantile * 100)}",
                "baseline": self.baseline, "current": self.current, "change": self.change,
                "ci_low": self.ci_low, "ci_high": self.ci_high, "verdict": self.verdict,
                "counts": list(self.counts), "min_count": self.min_count, "note": self.note}


@dataclass(frozen=True)
class Comparison:
    rows: tuple[MetricVerdict, ...]
    problems: tuple[str, ...]  # reasons the comparison itself cannot pass (partial, client-bound)
    threshold: float
    level: float
    warnings: tuple[str, ...] = ()  # rows that could not be compared (too few samples)
    row_level: float = 0.0  # each row's interval level after the Bonferroni correction
    traffic_changed: tuple[str, ...] = ()  # traffic_differences: refused unless allowed

    @property
    def regressed(self) -> bool:
        return any(r.verdict == "worse" for r in self.rows)

    @property
    def exit_code(self) -> int:
        return 1 if self.regressed or self.problems else 0

    def to_dict(self) -> dict:
        return {"kind": "kvplan.bench.compare", "threshold": self.threshold, "confidence": self.level,
                "method": "order-statistic (distribution-free) intervals, Bonferroni over the rows",
                "row_confidence": round(self.row_level, 6), "warnings": list(self.warnings),
                "regressed": self.regressed, "problems": list(self.problems),
                "traffic_changed": list(self.traffic_changed),
                "passed": self.exit_code == 0, "rows": [r.to_dict() for r in self.rows]}


def _problems(d: dict, label: str) -> list[str]:
    out = []
    if d.get("partial"):
        out.append(f"{label} run is partial ({d.get('stop_reason')})")
    if d.get("client_bound"):
        out.append(f"{label} run was client-bound: {'; '.join(d.get('client_bound_reasons') or [])}")
    return out


def compare(base: dict, cur: dict, threshold: float = 0.05, level: float = 0.95, n_boot: int = 2000,
            seed: int = 0, allow_traffic_change: bool = False) -> Comparison:
    """``n_boot`` and ``seed`` are kept for callers of the former bootstrap; the intervals are exact.
    Runs of different traffic get every row ``n/a`` and a problem, unless ``allow_traffic_change``
    (then the rows are judged and the difference is a warning)."""
    del n_boot, seed
    changed = tuple(traffic_differences(base, cur))
    tests = len(METRICS) * len(QUANTILES)
    row_level = 1 - (1 - level) / tests  # Bonferroni: the family of rows holds at ``level``
    rows = []
    short: dict[str, list[str]] = {}
    for m in METRICS:
        xb = (base.get("samples") or {}).get(m) or []
        xc = (cur.get("samples") or {}).get(m) or []
        for q in QUANTILES:
            sb, sc = sorted(xb), sorted(xc)
            pb, pc = stats.percentile(sb, q * 100), stats.percentile(sc, q * 100)
            need = stats.min_count_for_quantile(q, math.sqrt(row_level))
            counts = (len(sb), len(sc))
            def r6(x):
                return (None if x is None else round(x, 6))
            if sb and sc and min(counts) < need:
                stat = f"p{round(q * 100)}"
                short.setdefault(stat, []).append(m)
                rows.append(MetricVerdict(m, q, r6(pb), r6(pc), r6((pc - pb) / pb) if pb else None, None, None, "n/a",
                                          counts, need, f"too few samples: {min(counts)} < {need}"))
                continue
            ci = stats.quantile_change_ci(sb, sc, q, row_level)
            if ci is None:
                rows.append(MetricVerdict(m, q, r6(pb), r6(pc), None, None, None, "n/a", counts, need, "no data"))
                continue
            change, lo, hi = ci
            if change > threshold and lo is not None and lo > 0:
                verdict = "worse"
            elif change < -threshold and hi is not None and hi < 0:
                verdict = "better"
            else:
                verdict = "same"
            rows.append(MetricVerdict(m, q, r6(pb), r6(pc), r6(change), r6(lo), r6(hi), verdict, counts, need))
    warnings = tuple(f"{stat} not compared ({', '.join(ms)}): fewer than {_need(rows, stat):,} samples per run "
                     f"(distribution-free interval at {row_level:.2%}); record longer runs to judge it"
                     for stat, ms in short.items())
    problems = _problems(base, "baseline") + _problems(cur, "current")
    if changed and not allow_traffic_change:
        problems.insert(0, "NOT COMPARABLE: the runs offered different traffic (" + "; ".join(changed) + "): their "
                        "latencies differ because the load did. Compare runs of the same traffic, or pass "
                        "--allow-traffic-change to judge them anyway")
        rows = [MetricVerdict(r.metric, r.quantile, r.baseline, r.current, r.change, None, None, "n/a", r.counts,
                              r.min_count, "different traffic") for r in rows]
    elif changed:
        warnings += ("DIFFERENT TRAFFIC (" + "; ".join(changed) + "): a change in the table may be the load's, not a "
                     "regression",)
    return Comparison(tuple(rows), tuple(problems), threshold, level, warnings, row_level, changed)


def _need(rows, stat: str) -> int:
    return next(r.min_count for r in rows if f"p{round(r.quantile * 100)}" == stat)
