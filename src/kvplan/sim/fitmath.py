"""Small numerical pieces of ``kvplan calibrate``, pure Python (a handful of unknowns needs no
numpy): Lawson–Hanson non-negative least squares on scaled, orthogonalised columns, the weighted R²
of one column against others (identifiability), and the fit-quality summary of predicted vs measured."""
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


#: A column whose largest (weighted) entry is below this fraction of the largest (weighted) target
#: is treated as zero: explaining the targets with it would take a coefficient beyond 1e100 (or an
#: overflow), which is no fit. Real features (counts of steps, sequences, tokens, attention pairs)
#: against step times in seconds are nowhere near: a count is 0 or at least 1, a time below 1e3 s.
COLUMN_RTOL = 1e-100
#: After scaling, a column whose part outside the span of the columns already in the solve is below
#: this fraction of its own norm is numerically dependent on them: it gets no coefficient.
DEPENDENT_RTOL = 1e-10
#: A column enters the active set only if its correlation (cosine) with the residual exceeds this.
GRADIENT_RTOL = 1e-12


def _dot(u: Sequence[float], v: Sequence[float]) -> float:
    return math.fsum(a * b for a, b in zip(u, v))


def _norm(v: Sequence[float]) -> float:
    return math.hypot(*v)  # scaled internally: no overflow or underflow of the squares


def weighted_columns(rows: Sequence[Sequence[float]], ys: Sequence[float],
                     weights: Optional[Sequence[float]] = None) -> tuple[list[list[float]], list[float], list[float]]:
    """The problem ``nnls`` solves, column by column: the columns of ``√W·A`` divided by their
    largest absolute entry (so every kept column's largest entry is 1, whatever its unit), the
    targets ``√W·y``, and each column's divisor — 0.0 for a column treated as zero (COLUMN_RTOL).
    A column is zero also when it is all zeros; every column is kept when the targets are zero."""
    n = len(rows[0]) if rows else 0
    sw = [math.sqrt(w) for w in weights] if weights is not None else [1.0] * len(rows)
    cols = [[s * row[j] for s, row in zip(sw, rows)] for j in range(n)]
    b = [s * y for s, y in zip(sw, ys)]
    colmax = [max((abs(v) for v in c), default=0.0) for c in cols]
    target = max((abs(v) for v in b), default=0.0)
    scale = [m if m > COLUMN_RTOL * target else 0.0 for m in colmax]
    return [[v / s for v in c] if s else [0.0] * len(c) for c, s in zip(cols, scale)], b, scale


def _lstsq(cols: list[list[float]], b: list[float]) -> list[float]:
    """Least squares on the given columns by modified Gram–Schmidt (twice, for orthogonality);
    a numerically dependent column (DEPENDENT_RTOL) gets coefficient 0."""
    basis: list[list[float]] = []
    r_cols: list[list[float]] = []  # each kept column in the basis: upper-triangular R, column by column
    kept: list[int] = []
    for k, c in enumerate(cols):
        v = list(c)
        coef = [0.0] * len(basis)
        for _ in range(2):
            for t, q in enumerate(basis):
                d = _dot(q, v)
                coef[t] += d
                v = [vi - d * qi for vi, qi in zip(v, q)]
        nv = _norm(v)
        if nv <= DEPENDENT_RTOL * _norm(c):
            continue
        basis.append([vi / nv for vi in v])
        r_cols.append(coef + [nv])
        kept.append(k)
    qb = [_dot(q, b) for q in basis]
    z = [0.0] * len(basis)
    for t in range(len(basis) - 1, -1, -1):
        z[t] = (qb[t] - sum(r_cols[u][t] * z[u] for u in range(t + 1, len(basis)))) / r_cols[t][t]
    out = [0.0] * len(cols)
    for k, v in zip(kept, z):
        out[k] = v
    return out


def nnls(rows: Sequence[Sequence[float]], ys: Sequence[float], weights: Optional[Sequence[float]] = None,
         max_iter: int = 100) -> list[float]:
    """min ‖√W(Ax − y)‖ subject to x ≥ 0 (Lawson & Hanson 1974, active set).

    Why not the normal equations: the features differ by many orders of magnitude (one per step vs.
    attention pairs) and can be nearly collinear; squaring them loses the small ones (or underflows
    to zero). Columns are scaled to a largest entry of 1 and each sub-problem is solved by
    orthogonalisation (``_lstsq``). A column below COLUMN_RTOL of the targets' scale is zero."""
    cols, b, scale = weighted_columns(rows, ys, weights)
    n = len(cols)
    norms = [_norm(c) for c in cols]
    live = [j for j in range(n) if scale[j]]
    x = [0.0] * n
    passive: list[int] = []
    barred: set[int] = set()  # entered with a non-positive coefficient (rounding): never again

    def residual() -> list[float]:
        return [bi - math.fsum(x[j] * cols[j][i] for j in passive) for i, bi in enumerate(b)]

    for _ in range(max_iter):
        r = residual()
        rn = _norm(r)
        corr = {j: _dot(cols[j], r) / norms[j] for j in live if j not in passive and j not in barred}
        cand = [j for j, v in corr.items() if v > GRADIENT_RTOL * rn]
        if not cand:
            break
        entering = max(cand, key=corr.__getitem__)
        passive.append(entering)
        for inner in range(max_iter):
            z = dict(zip(passive, _lstsq([cols[j] for j in passive], b)))
            if all(v > 0 for v in z.values()):
                for j, v in z.items():
                    x[j] = v
                break
            if inner == 0 and z[entering] <= 0:
                passive.remove(entering)
                barred.add(entering)
                break
            alpha = min(x[j] / (x[j] - v) for j, v in z.items() if v <= 0)
            for j, v in z.items():
                x[j] += alpha * (v - x[j])
            passive = [j for j in passive if x[j] > 0]
            for j in range(n):
                if j not in passive:
                    x[j] = 0.0
    return [x[j] / scale[j] if scale[j] else 0.0 for j in range(n)]


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
