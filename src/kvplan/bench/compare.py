"""``kvplan bench compare BASELINE CURRENT``: did P50/P95/P99 of TTFT, TPOT and E2E regress?

Each quantile's relative change comes with a bootstrap confidence interval (stats.diff_ci, on
the per-request samples stored in the result files). A change is *worse* only when it exceeds
the threshold AND its interval excludes zero (noise does not fail a build), *better* likewise
in the other direction, and *same* otherwise. Gates about trust come first: a partial or
client-bound run on either side makes the comparison fail, because its latencies describe the
client or an interrupted run, not the server.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import stats

METRICS = ("ttft", "tpot", "e2e")
QUANTILES = (0.5, 0.95, 0.99)


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

    def to_dict(self) -> dict:
        return {"metric": self.metric, "quantile": self.quantile, "stat": f"p{round(self.quantile * 100)}",
                "baseline": self.baseline, "current": self.current, "change": self.change,
                "ci_low": self.ci_low, "ci_high": self.ci_high, "verdict": self.verdict}


@dataclass(frozen=True)
class Comparison:
    rows: tuple[MetricVerdict, ...]
    problems: tuple[str, ...]  # reasons the comparison itself cannot pass (partial, client-bound)
    threshold: float
    level: float

    @property
    def regressed(self) -> bool:
        return any(r.verdict == "worse" for r in self.rows)

    @property
    def exit_code(self) -> int:
        return 1 if self.regressed or self.problems else 0

    def to_dict(self) -> dict:
        return {"kind": "kvplan.bench.compare", "threshold": self.threshold, "confidence": self.level,
                "regressed": self.regressed, "problems": list(self.problems),
                "passed": self.exit_code == 0, "rows": [r.to_dict() for r in self.rows]}


def _problems(d: dict, label: str) -> list[str]:
    out = []
    if d.get("partial"):
        out.append(f"{label} run is partial ({d.get('stop_reason')})")
    if d.get("client_bound"):
        out.append(f"{label} run was client-bound: {'; '.join(d.get('client_bound_reasons') or [])}")
    return out


def compare(base: dict, cur: dict, threshold: float = 0.05, level: float = 0.95, n_boot: int = 2000,
            seed: int = 0) -> Comparison:
    rows = []
    for m in METRICS:
        xb = (base.get("samples") or {}).get(m) or []
        xc = (cur.get("samples") or {}).get(m) or []
        for q in QUANTILES:
            sb, sc = sorted(xb), sorted(xc)
            pb, pc = stats.percentile(sb, q * 100), stats.percentile(sc, q * 100)
            ci = stats.diff_ci(sb, sc, q, n_boot=n_boot, seed=seed, level=level)
            if ci is None:
                rows.append(MetricVerdict(m, q, pb, pc, None, None, None, "n/a"))
                continue
            change, lo, hi = ci
            if change > threshold and lo > 0:
                verdict = "worse"
            elif change < -threshold and hi < 0:
                verdict = "better"
            else:
                verdict = "same"
            rows.append(MetricVerdict(m, q, round(pb, 6), round(pc, 6), round(change, 6), round(lo, 6), round(hi, 6),
                                      verdict))
    problems = tuple(_problems(base, "baseline") + _problems(cur, "current"))
    return Comparison(tuple(rows), problems, threshold, level)
