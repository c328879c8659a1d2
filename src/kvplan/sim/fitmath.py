"""Small numerical pieces of ``kvplan calibrate``, pure Python (a handful of unknowns needs no
numpy): Lawson–Hanson non-negative least squares on the normal equations, the weighted R² of one
column against others (identifiability), and the fit-quality summary of predicted vs measured."""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence


def solve(a: list[list[float]], b: list[float]) -> Optional[list[float]]:
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-14:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(c + 1, n):
            f = m[r][c] / m[c][c]
            if f:
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    x = [0.0] * n
    for c in range(n - 1, -1, -1):
        x[c] = (m[c][n] - sum(m[c][k] * x[k] for k in range(c + 1, n))) / m[c][c]
    return x


def nnls(rows: Sequence[Sequence[float]], ys: Sequence[float], weights: Optional[Sequence[float]] = None,
         max_iter: int = 100) -> list[float]:
    """min ‖W(Ax − y)‖ subject to x ≥ 0 (Lawson & Hanson 1974), on column-scaled normal equations."""
    n = len(rows[0]) if rows else 0
    w = list(weights) if weights is not None else [1.0] * len(rows)
    scale = [math.sqrt(sum(wi * row[j] ** 2 for wi, row in zip(w, rows))) or 1.0 for j in range(n)]
    g = [[sum(wi * row[i] * row[j] for wi, row in zip(w, rows)) / (scale[i] * scale[j]) for j in range(n)]
         for i in range(n)]
    h = [sum(wi * row[i] * y for wi, row, y in zip(w, rows, ys)) / scale[i] for i in range(n)]
    ridge = 1e-10 * max(1.0, max(g[i][i] for i in range(n))) if n else 0.0
    x = [0.0] * n
    passive: list[int] = []
    tol = 1e-12 * max(1.0, max((abs(v) for v in h), default=1.0))

    def sub_solve(p: list[int]) -> list[float]:
        z = solve([[g[i][j] + (ridge if i == j else 0.0) for j in p] for i in p], [h[i] for i in p])
        return z if z is not None else [0.0] * len(p)

    for _ in range(max_iter):
        grad = [h[i] - sum(g[i][j] * x[j] for j in range(n)) for i in range(n)]
        cand = [i for i in range(n) if i not in passive and grad[i] > tol]
        if not cand:
            break
        passive.append(max(cand, key=lambda i: grad[i]))
        for _inner in range(max_iter):
            z = sub_solve(passive)
            if all(v > 0 for v in z):
                for i, v in zip(passive, z):
                    x[i] = v
                break
            alpha = min(x[i] / (x[i] - v) for i, v in zip(passive, z) if v <= 0)
            for i, v in zip(passive, z):
                x[i] += alpha * (v - x[i])
            passive = [i for i in passive if x[i] > 1e-15]
            for i in range(n):
                if i not in passive:
                    x[i] = 0.0
    return [x[i] / scale[i] for i in range(n)]


def explained(rows, weights, target: int, by: Sequence[int]) -> float:
    """Weighted R² of column ``target`` regressed (least squares) on the columns ``by``."""
    a = [[sum(w * r[i] * r[j] for w, r in zip(weights, rows)) for j in by] for i in by]
    b = [sum(w * r[i] * r[target] for w, r in zip(weights, rows)) for i in by]
    x = solve(a, b)
    if x is None:
        return 1.0
    wsum = sum(weights) or 1.0
    mean = sum(w * r[target] for w, r in zip(weights, rows)) / wsum
    ss_tot = sum(w * (r[target] - mean) ** 2 for w, r in zip(weights, rows))
    ss_res = sum(w * (r[target] - sum(c * r[i] for c, i in zip(x, by))) ** 2 for w, r in zip(weights, rows))
    return 1.0 if ss_tot <= 0 else 1.0 - ss_res / ss_tot


def pct(vals: Sequence[float], q: float) -> Optional[float]:
    if not vals:
        return None
    s = sorted(vals)
    k = (len(s) - 1) * q / 100
    lo = int(math.floor(k))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def quality(kind: str, pred: Sequence[float], meas: Sequence[float]) -> dict[str, Any]:
    if not meas:
        return {"kind": kind, "count": 0}
    rel = [(p - m) / m for p, m in zip(pred, meas) if m > 0]
    mean_m = sum(meas) / len(meas)
    ss_tot = sum((m - mean_m) ** 2 for m in meas)
    ss_res = sum((p - m) ** 2 for p, m in zip(pred, meas))
    r6 = lambda v: None if v is None else round(v, 6)  # noqa: E731
    return {
        "kind": kind, "count": len(meas),
        "measured_mean_s": r6(mean_m), "predicted_mean_s": r6(sum(pred) / len(pred)),
        "mean_error": r6((sum(pred) - sum(meas)) / sum(meas)) if sum(meas) else None,
        "rmse_s": r6(math.sqrt(ss_res / len(meas))),
        "r2": r6(1 - ss_res / ss_tot) if ss_tot > 0 else None,
        "abs_rel_error_p50": r6(pct([abs(x) for x in rel], 50)),
        "abs_rel_error_p90": r6(pct([abs(x) for x in rel], 90)),
        "abs_rel_error_max": r6(max((abs(x) for x in rel), default=0.0)),
        "measured_p50_s": r6(pct(meas, 50)), "predicted_p50_s": r6(pct(pred, 50)),
    }
