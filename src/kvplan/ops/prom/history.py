"""vLLM and DCGM series in Prometheus -> what kvplan's live mode understands.

Deployments are found with ``/api/v1/series`` (every exposed name vLLM has had, from
kvplan.bench.metrics.ALIASES, so renamed metrics of other versions are found too), one per
scrape target (``job``, ``instance``), with the model names its series carry. ``--model-name`` and
``--match '{...}'`` narrow the search before anything else is read.

Raw samples (a range selector ``x[60s]`` in an instant query returns every stored sample) are
regrouped by scrape timestamp into :class:`kvplan.bench.metrics.MetricsSnapshot` s -- one per
scrape, as if kvplan had fetched ``/metrics`` itself -- so ``watch --prometheus`` computes its rates
and percentiles with the very code of the live mode, and agrees with a direct read of the same
scrapes.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Optional

from ...bench import metrics as M
from .. import dcgm
from .client import PromClient, PromError
from .parse import Series

START = "process_start_time_seconds"
CACHE_INFO = "vllm:cache_config_info"
_WATCHED = tuple(sorted({n for names in M.ALIASES.values() for n in names}))
_SUFFIXED = tuple(n for key in M.HISTOGRAM_KEYS for n in M.ALIASES[key])
_TARGET_LABELS = ("instance", "job")
_MATCHER = re.compile(r'^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*$')


class NoSeriesError(PromError):
    """Prometheus answered, but holds nothing kvplan could use for this selection."""


def name_regex(names: tuple[str, ...] = _WATCHED) -> str:
    """``__name__`` regex for every sample name of ``names`` (histograms with their suffixes)."""
    parts = []
    for n in names:
        esc = re.escape(n).replace("\\:", ":")
        parts.append(esc + ("(_bucket|_sum|_count)" if n in _SUFFIXED else ""))
    return "|".join(parts)


def parse_match(text: Optional[str]) -> str:
    """``--match '{namespace="prod",job=~"vllm.*"}'`` -> the matcher body, checked matcher by matcher."""
    body = dcgm.selector_body(text)
    if not body:
        return ""
    for part in _split_matchers(body):
        if not _MATCHER.match(part):
            raise ValueError(f"--match: cannot read label matcher {part.strip()!r} (expected e.g. namespace=\"prod\")")
    return body


def _split_matchers(body: str) -> list[str]:
    out, cur, in_str, esc = [], "", False, False
    for ch in body:
        if in_str:
            cur += ch
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str, cur = True, cur + ch
        elif ch == ",":
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [p for p in out if p.strip()]


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class Selection:
    model_names: tuple[str, ...] = ()
    match: str = ""  # label matcher body from --match

    def vllm_matchers(self) -> str:
        parts = [self.match] if self.match else []
        if self.model_names:
            from ..alerts import regex_escape

            parts.append("model_name=~" + _q("|".join(regex_escape(m) for m in self.model_names)))
        return ",".join(parts)

    def describe(self) -> str:
        bits = []
        if self.model_names:
            bits.append("--model-name " + " ".join(self.model_names))
        if self.match:
            bits.append("--match {" + self.match + "}")
        return ", ".join(bits) or "no selection"


@dataclass(frozen=True)
class Deployment:
    """One scrape target serving vLLM."""

    job: str
    instance: str
    model_names: tuple[str, ...]
    names: frozenset[str]  # the exposed vLLM sample names Prometheus holds for it

    @property
    def target(self) -> str:
        return f"job={_q(self.job)},instance={_q(self.instance)}"

    @property
    def host(self) -> str:
        return self.instance.rsplit(":", 1)[0] if ":" in self.instance else self.instance

    def metric_names(self) -> dict[str, Optional[str]]:
        """Which exposed name this target uses for each stable key (renamed metrics of other versions)."""
        out: dict[str, Optional[str]] = {}
        for key, names in M.ALIASES.items():
            out[key] = next((n for n in names if n in self.names or n + "_bucket" in self.names or n + "_count" in self.names), None)
        return out

    def to_dict(self) -> dict:
        return {"job": self.job, "instance": self.instance, "model_names": list(self.model_names)}


def find_deployments(client: PromClient, sel: Selection, start: float, end: float) -> list[Deployment]:
    """Every target with vLLM series between ``start`` and ``end`` for the selection."""
    extra = sel.vllm_matchers()
    matcher = "{__name__=~" + _q(name_regex()) + ("," + extra if extra else "") + "}"
    res = client.series([matcher], start, end)
    by_target: dict[tuple[str, str], tuple[set[str], set[str]]] = {}
    for s in res.series:
        d = dict(s.labels)
        key = (d.get("job", ""), d.get("instance", ""))
        names, models = by_target.setdefault(key, (set(), set()))
        names.add(d.get("__name__", ""))
        if d.get("model_name"):
            models.add(d["model_name"])
    if not by_target:
        raise NoSeriesError(client.url, matcher, _no_series_hint(client, sel, start, end))
    return [Deployment(j, i, tuple(sorted(models)), frozenset(names)) for (j, i), (names, models) in sorted(by_target.items())]


def _no_series_hint(client: PromClient, sel: Selection, start: float, end: float) -> str:
    """Why nothing matched: no vLLM at all, or a selection that excludes what is there."""
    window = f"between {_iso(start)} and {_iso(end)}"
    if not sel.model_names and not sel.match:
        return (f"no vLLM series {window}: is the vLLM server a scrape target of this Prometheus (its /metrics; "
                "check the target's `up` series and the scrape config)?")
    try:
        res = client.series(["{__name__=~" + _q(name_regex(M.ALIASES["requests_running"])) + "}"], start, end)
    except PromError:
        return f"no vLLM series {window} for {sel.describe()}"
    models = sorted({m for s in res.series if (m := s.label("model_name"))})
    targets = sorted({f"{s.label('job')}/{s.label('instance')}" for s in res.series})
    if not models:
        return f"no vLLM series at all {window} (not just for {sel.describe()})"
    return (f"no vLLM series {window} for {sel.describe()}; Prometheus has model_name {', '.join(models)} "
            f"on {', '.join(targets)}")


def _iso(t: float) -> str:
    import datetime as _dt

    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


iso = _iso


# --------------------------------------------------------------------------- raw samples -> snapshots
def _strip(labels: tuple[tuple[str, str], ...]) -> tuple[str, tuple[tuple[str, str], ...]]:
    d = dict(labels)
    name = d.pop("__name__", "")
    for k in _TARGET_LABELS:
        d.pop(k, None)
    return name, tuple(sorted(d.items()))


def snapshots_from_series(series: tuple[Series, ...], types: Optional[dict] = None) -> list[M.MetricsSnapshot]:
    """Samples that share a timestamp are one scrape of the target: regroup them per timestamp."""
    by_t: dict[float, dict] = {}
    for s in series:
        key = _strip(s.labels)
        for t, v in s.samples:
            by_t.setdefault(t, {})[key] = v
    return [M.MetricsSnapshot(by_t[t], types or {}, t=t) for t in sorted(by_t)]


def raw_snapshots(client: PromClient, dep: Deployment, sel: Selection, window_s: float, at: Optional[float] = None
                  ) -> list[M.MetricsSnapshot]:
    """Every scrape of ``dep`` in the last ``window_s`` seconds (up to ``at``) as snapshots."""
    w = f"{max(1, int(math.ceil(window_s)))}s"
    extra = sel.vllm_matchers()
    vsel = "{__name__=~" + _q(name_regex()) + "," + dep.target + ("," + extra if extra else "") + "}"
    vllm = client.query(f"{vsel}[{w}]", at).series
    start = client.query(f"{START}{{{dep.target}}}[{w}]", at).series
    snaps = snapshots_from_series(vllm)
    starts = {t: v for s in start for t, v in s.samples}
    out = []
    for snap in snaps:
        series = dict(snap.series)
        if snap.t in starts:
            series[(START, ())] = starts[snap.t]
        out.append(M.MetricsSnapshot(series, {}, t=snap.t))
    return out


# --------------------------------------------------------------------------- GPU memory (DCGM)
@dataclass(frozen=True)
class GpuSelection:
    """Which DCGM series belong to a deployment, and how they were found."""

    matcher: str  # PromQL matcher body for DCGM series
    how: str
    note: Optional[str] = None  # set when GPU checks are skipped: why


def gpu_selection(client: PromClient, dep: Deployment, gpu_selector: str, start: float, end: float) -> GpuSelection:
    """``--gpu-selector`` when given; else the DCGM series on the same host as the vLLM target."""
    query = "{__name__=" + _q(dcgm.FB_USED) + (("," + gpu_selector) if gpu_selector else "") + "}"
    try:
        res = client.series([query], start, end)
    except PromError as exc:
        return GpuSelection("", "none", f"GPU checks skipped: {exc}")
    if not res.series:
        return GpuSelection("", "none", f"GPU checks skipped: no DCGM exporter series ({query}) between {_iso(start)} and "
                                        f"{_iso(end)}; vLLM exports no GPU memory metric: scrape NVIDIA's dcgm-exporter")
    if gpu_selector:
        return GpuSelection(gpu_selector, "--gpu-selector")
    same_host = {s.label("instance") for s in res.series if (s.label("instance") or "").rsplit(":", 1)[0] == dep.host}
    if same_host:
        from ..alerts import regex_escape

        return GpuSelection("instance=~" + _q("|".join(regex_escape(i) for i in sorted(same_host))),
                            f"DCGM exporter on the same host ({dep.host})")
    return GpuSelection("", "none", f"GPU checks skipped: DCGM series exist ({query}) but none on host {dep.host} of "
                                    f"{dep.instance}; pass --gpu-selector '{{...}}' to name the deployment's GPUs")


def utilization_of(client: PromClient, dep: Deployment, at: Optional[float], flag: Optional[float],
                   version: Optional[str] = None) -> tuple[float, str]:
    """vLLM's gpu_memory_utilization: the flag, else the server's own vllm:cache_config_info, else the default."""
    if flag is not None:
        return flag, "--gpu-memory-utilization"
    try:
        res = client.query(f"last_over_time({CACHE_INFO}{{{dep.target}}}[1h])", at)
    except PromError:
        res = None
    values = {s.label("gpu_memory_utilization") for s in (res.series if res else ())}
    values.discard(None)
    if len(values) == 1:
        try:
            u = float(values.pop())
            if 0 < u <= 1:
                return u, f"{CACHE_INFO} of {dep.instance}"
        except ValueError:
            pass
    return dcgm.resolve_utilization(None, None, version)


@dataclass(frozen=True)
class GpuReading:
    labels: dict
    used_mib: float
    free_mib: float
    reserved_mib: Optional[float]
    util_pct: Optional[float]
    t: float

    def to_dict(self, budget: float) -> dict:
        total = self.used_mib + self.free_mib
        return {"gpu": self.labels.get("gpu"), "uuid": self.labels.get("UUID"),
                "host": self.labels.get("Hostname") or self.labels.get("hostname"),
                "instance": self.labels.get("instance"),
                "memory_used_bytes": int(self.used_mib * (1 << 20)), "memory_total_bytes": int(total * (1 << 20)),
                "memory_reserved_bytes": int(self.reserved_mib * (1 << 20)) if self.reserved_mib is not None else None,
                "utilization_pct": self.util_pct, "budget_fraction": budget,
                "outside_budget_bytes": int((self.used_mib - budget * total) * (1 << 20)) if total else None}


def gpu_readings(client: PromClient, gsel: GpuSelection, at: Optional[float]) -> list[GpuReading]:
    """The newest DCGM reading of every selected GPU (within 5 min, Prometheus' lookback)."""
    out: dict[tuple, dict] = {}
    sel = "{" + gsel.matcher + "}" if gsel.matcher else ""
    for name in (dcgm.FB_USED, dcgm.FB_FREE, dcgm.FB_RESERVED, dcgm.GPU_UTIL):
        for s in client.query(f"{name}{sel}", at).series:
            key = tuple((k, v) for k, v in s.labels if k != "__name__")
            out.setdefault(key, {})[name] = s.samples[-1]
    readings = []
    for key, vals in sorted(out.items()):
        if dcgm.FB_USED not in vals or dcgm.FB_FREE not in vals:
            continue
        readings.append(GpuReading(dict(key), vals[dcgm.FB_USED][1], vals[dcgm.FB_FREE][1],
                                   vals.get(dcgm.FB_RESERVED, (0, None))[1], vals.get(dcgm.GPU_UTIL, (0, None))[1],
                                   vals[dcgm.FB_USED][0]))
    return readings


@dataclass
class Window:
    """A time range where a condition held, with its peak value and any extra numbers."""

    start: float
    end: float
    peak: float
    numbers: dict = field(default_factory=dict)


def windows(points: list[tuple[float, float]], cond, step: float) -> list[Window]:
    """Merge the times where ``cond(value)`` holds into ranges (a gap of more than two steps splits)."""
    out: list[Window] = []
    for t, v in points:
        if v is None or (isinstance(v, float) and math.isnan(v)) or not cond(v):
            continue
        if out and t - out[-1].end <= 2 * step + 1e-9:
            out[-1].end = t
            out[-1].peak = max(out[-1].peak, v)
        else:
            out.append(Window(t, t, v))
    return out
