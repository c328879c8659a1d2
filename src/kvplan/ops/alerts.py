"""``kvplan alerts``: Prometheus alerting rules and a Grafana dashboard for a vLLM deployment.

The metric names follow the chosen vLLM version: :mod:`kvplan.memory.vllm_metrics` is the one
table of vLLM's names and their renames (``gpu_cache_usage_perc`` -> ``kv_cache_usage_perc`` at
0.11, ...), shared with bench and watch.

The YAML is written by hand, every string as a JSON string literal: JSON strings are valid YAML
double-quoted scalars, so no value (a PromQL ``=~"a|b"``, a ``{{ $labels }}`` template) can ever be
read back as YAML syntax, and no YAML library is needed at run time.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterable, Optional

from .._json import dumps_report
from ..memory import vllm_metrics as VM
from ..memory.semantics import parse_version
from . import dcgm
from .dcgm import GpuRuleOptions
from .thresholds import Thresholds

RULES_FILE = "kvplan-alerts.yml"
DASHBOARD_FILE = "kvplan-dashboard.json"


@dataclass(frozen=True)
class MetricNames:
    """The exposed names of one vLLM version (counters with ``_total``, histograms as families)."""

    version: str
    kv_cache_usage: str
    requests_running: str
    requests_waiting: str
    preemptions: str
    prompt_tokens: str
    generation_tokens: str
    request_success: str
    prefix_cache_queries: Optional[str]  # V0 had only hit-rate gauges
    prefix_cache_hits: Optional[str]
    ttft: str
    itl: str
    e2e: str
    queue_time: str
    has_engine_label: bool
    # speculative decoding and LoRA (kvplan alerts --speculative-decoding / --lora): only servers with
    # those flags expose them
    spec_accepted_tokens: Optional[str] = None
    spec_draft_tokens: Optional[str] = None
    spec_drafts: Optional[str] = None  # V1 (0.8+)
    lora_requests_info: Optional[str] = None

    def all(self) -> list[str]:
        """Every sample name a query may use (histograms as ``_bucket``)."""
        names = [self.kv_cache_usage, self.requests_running, self.requests_waiting, self.preemptions,
                 self.prompt_tokens, self.generation_tokens, self.request_success]
        names += [n for n in (self.prefix_cache_queries, self.prefix_cache_hits) if n]
        names += [h + "_bucket" for h in (self.ttft, self.itl, self.e2e, self.queue_time)]
        return names


def metric_names(vllm_version: Optional[str] = None) -> MetricNames:
    """The names ``vllm_version`` exposes (kvplan.memory.vllm_metrics, the one table of vLLM's names)."""
    v = parse_version(vllm_version)
    keys = {"spec_accepted_tokens", "spec_draft_tokens", "spec_drafts", "lora_requests_info"}
    return MetricNames(version=".".join(str(p) for p in v), has_engine_label=v >= (0, 8),
                       **{f.name: VM.name_for(f.name, v) for f in fields(MetricNames)
                          if f.name not in ("version", "has_engine_label")
                          and (f.name not in keys or f.name in VM.METRICS)})


def model_selector(model_names: Iterable[str] = ()) -> str:
    """``model_name=~"a|b"`` (regex-escaped, anchored by PromQL) or any model."""
    names = [n for n in model_names if n]
    if not names:
        return 'model_name=~".+"'
    return "model_name=~" + json.dumps("|".join(regex_escape(n) for n in names))


_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def regex_escape(text: str) -> str:
    """Escape RE2's metacharacters only. Python's re.escape also escapes spaces and other
    characters, and RE2 (Prometheus, Grafana) rejects a backslash before a non-punctuation one."""
    return _RE2_SPECIAL.sub(r"\\\1", text)


def _dur(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60}m" if s % 60 == 0 and s >= 60 else f"{max(s, 1)}s"


def _num(x: float) -> str:
    return repr(int(x)) if float(x).is_integer() else repr(float(x))


@dataclass(frozen=True)
class Rule:
    alert: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str


def serve_flag_rules(th: Thresholds, names: MetricNames, model_names: Iterable[str] = (), speculative: bool = False,
                     lora: bool = False) -> list[Rule]:
    """Rules for a server with speculative decoding (the draft acceptance rate) or LoRA (adapters
    waiting for a GPU slot: --max-loras too small for the traffic)."""
    sel = model_selector(model_names)
    w, f, by = _dur(th.window_seconds), _dur(th.for_seconds), "model_name"
    out = []
    if speculative and names.spec_accepted_tokens and names.spec_draft_tokens:
        out.append(Rule(
            "VllmSpecDecodeAcceptanceLow",
            f"(sum by ({by}) (rate({names.spec_accepted_tokens}{{{sel}}}[{w}])) / sum by ({by}) "
            f"(rate({names.spec_draft_tokens}{{{sel}}}[{w}]))) < {_num(th.spec_acceptance)}", f, "warning",
            "Draft acceptance {{ $value | humanizePercentage }} on {{ $labels.model_name }}",
            "The drafter's tokens are mostly rejected: each step verifies k drafts for little gain. Check the "
            "drafter matches the model and the traffic; `kvplan simulate --spec-acceptance` shows what TPOT to expect."))
    if lora and names.lora_requests_info:
        out.append(Rule(
            "VllmLoraAdaptersWaiting", f'max by ({by}) ({names.lora_requests_info}{{{sel},waiting_lora_adapters!=""}}) > 0',
            f, "warning", "LoRA adapters waiting for a GPU slot on {{ $labels.model_name }}",
            "Requests for adapters not in the --max-loras GPU slots wait: raise --max-loras (its buffers grow "
            "linearly, `kvplan plan --enable-lora` sizes them) or route adapters to fewer replicas."))
    return out


def rules(th: Thresholds, names: MetricNames, model_names: Iterable[str] = ()) -> list[Rule]:
    sel = model_selector(model_names)
    w = _dur(th.window_seconds)
    f = _dur(th.for_seconds)
    by = "model_name"

    def q(hist: str, p: float) -> str:
        return f"histogram_quantile({p}, sum by (le, {by}) (rate({hist}_bucket{{{sel}}}[{w}])))"

    latency = []
    if th.e2e_p99 is not None:
        latency.append(Rule("VllmE2eLatencyP99High", f"{q(names.e2e, 0.99)} > {_num(th.e2e_p99)}", f, "warning",
                            "E2E latency P99 {{ $value | humanizeDuration }} on {{ $labels.model_name }}",
                            "The slowest 1% of requests take longer than the threshold end to end."))
    if th.ttft_p99 is not None:
        latency.append(Rule("VllmTtftP99High", f"{q(names.ttft, 0.99)} > {_num(th.ttft_p99)}", f, "warning",
                            "TTFT P99 {{ $value | humanizeDuration }} on {{ $labels.model_name }}",
                            "Time to first token is high: queueing or long prefills (see queue time)."))
    finished = f"sum by ({by}) (rate({names.request_success}{{{sel}}}[{w}]))"
    aborted = f"sum by ({by}) (rate({names.request_success}{{{sel},finished_reason=\"abort\"}}[{w}]))"
    # vLLM's HTTP server counts every answer by status class (prometheus-fastapi-instrumentator's
    # http_requests_total, no model label): joined on instance to the vLLM servers selected
    http = 'http_requests_total{handler=~"/v1/.*"'
    vllm_instances = f"group by (instance) ({names.requests_running}{{{sel}}})"
    errors = (f"(sum by (instance) (rate({http},status=\"5xx\"}}[{w}])) / sum by (instance) (rate({http}}}[{w}])))"
              f" > {_num(th.error_rate)} and on (instance) {vllm_instances}")
    return [
        Rule("VllmKvCacheNearlyFull", f"max by ({by}) ({names.kv_cache_usage}{{{sel}}}) > {_num(th.kv_cache_usage)}",
             f, "warning", "vLLM KV cache above {{ $value | humanizePercentage }} on {{ $labels.model_name }}",
             "KV-cache usage stayed above the threshold: new requests wait and running ones get preempted. "
             "Check `kvplan plan` for --max-model-len / --kv-cache-dtype fp8 / more TP."),
        Rule("VllmRequestsWaiting", f"sum by ({by}) ({names.requests_waiting}{{{sel}}}) > {_num(th.waiting)}",
             f, "warning", "{{ $value }} requests waiting on {{ $labels.model_name }}",
             "Requests are queueing: the server is at capacity (KV cache or --max-num-seqs)."),
        Rule("VllmPreemptions", f"sum by ({by}) (increase({names.preemptions}{{{sel}}}[{w}])) > {_num(th.preemptions)}",
             "0s", "warning", "vLLM preempted {{ $value }} requests on {{ $labels.model_name }}",
             "The KV cache ran out mid-generation and requests were recomputed: raise KV memory or lower concurrency."),
        *latency,
        Rule("VllmErrorRateHigh", errors, f, "critical",
             "{{ $value | humanizePercentage }} of requests answered 5xx on {{ $labels.instance }}",
             f"More than {th.error_rate:.0%} of the /v1 requests failed with a server error (HTTP 5xx): engine "
             "errors, a crashed engine core, or requests vLLM could not schedule. Check the server log (kvplan doctor)."),
        Rule("VllmRequestsAborted", f"{aborted} / {finished} > {_num(th.aborted)}", f, "warning",
             "{{ $value | humanizePercentage }} of requests aborted on {{ $labels.model_name }}",
             f"More than {th.aborted:.0%} of the finished requests were aborted (finished_reason=\"abort\"): clients "
             "disconnecting or timing out, usually because responses got slow (see TTFT and queue time)."),
        Rule("VllmMetricsAbsent", absent_expr(names, model_names, w), "0s", "critical",
             "No vLLM metrics for {{ with $labels.model_name }}{{ . }}{{ else }}any model (none scraped){{ end }}",
             "Prometheus has not seen vLLM's metrics for the window: the server is down or not scraped."),
    ]


#: how far back VllmMetricsAbsent (without --model-name) remembers a model that was scraped:
#: a model gone for longer stops alerting (pass --model-name to alert until it is back)
ABSENT_LOOKBACK = "24h"


def absent_expr(names: MetricNames, model_names: Iterable[str], window: str) -> str:
    """A gauge every vLLM exports (num_requests_running) missing for ``window``, per model.

    ``absent_over_time(x{model_name=~"a|b"}[w])`` is empty while *any* series matches the regex, so
    it never fired when one of several models stopped, and a regex matcher gives the alert no
    model_name label. Named models: one ``absent_over_time`` per model with an equality matcher
    (which puts ``model_name`` on the alert), joined with ``or``. Any model: a model seen in the
    last :data:`ABSENT_LOOKBACK` but not in the window, or, with no model at all, a label-less alert.
    """
    g = names.requests_running
    models = [n for n in model_names if n]
    if models:
        return " or ".join(f"absent_over_time({g}{{model_name={json.dumps(m)}}}[{window}])" for m in models)
    sel = model_selector(())
    gone = (f"(group by (model_name) (present_over_time({g}{{{sel}}}[{ABSENT_LOOKBACK}])) "
            f"unless group by (model_name) (present_over_time({g}{{{sel}}}[{window}])))")
    return f"{gone} or (absent_over_time({g}{{{sel}}}[{window}]) unless on () {gone})"


def gpu_rules(th: Thresholds, names: MetricNames, model_names: Iterable[str], gpu: Optional[GpuRuleOptions]) -> list[Rule]:
    """GPU-memory rules on dcgm-exporter's metrics (see kvplan.ops.dcgm for the budget semantics)."""
    if gpu is None or gpu.mode == "none":
        return []
    g = gpu.selector
    vllm = f"{names.requests_running}{{{model_selector(model_names)}}}"
    f = _dur(th.for_seconds)
    u = gpu.utilization
    out: list[Rule] = []
    if gpu.mode in ("budget", "both"):
        over = f"({dcgm.used(g)} - {_num(u)} * {dcgm.total(g)}) > {_num(th.gpu_budget_margin)} * {dcgm.total(g)}"
        out.append(Rule(
            "GpuMemoryAboveVllmBudget", dcgm.join(over, gpu.join, vllm), f, "warning",
            "{{ $value | humanize }} MiB above vLLM's budget (" + f"{u:g}" + " of total) on " + dcgm.GPU_NAME,
            f"GPU memory in use exceeds vLLM's budget (gpu_memory_utilization {u:g} x total, {gpu.utilization_source}) "
            f"by more than {th.gpu_budget_margin:.0%} of the total: memory outside vLLM's budget is growing (another "
            "process on the GPU, a leak, fragmentation, CUDA graphs this vLLM version does not count). The next "
            "allocation may fail with CUDA out of memory. Check nvidia-smi for other processes."))
        low = f"{dcgm.free(g)} < {_num(th.gpu_headroom)} * {dcgm.total(g)}"
        out.append(Rule(
            "GpuMemoryHeadroomLow", dcgm.join(low, gpu.join, vllm), f, "warning",
            "only {{ $value | humanize }} MiB free on " + dcgm.GPU_NAME,
            f"Free GPU memory is below {th.gpu_headroom:.0%} of the total. vLLM's own budget "
            f"({u:g}) leaves {1 - u:.0%}; less means something outside vLLM holds memory, or the budget leaves too "
            "little for the CUDA context and other processes."))
    if gpu.mode in ("plain", "both"):
        plain = f"{dcgm.used_fraction(g)} > {_num(th.gpu_memory)}"
        out.append(Rule(
            "GpuMemoryAboveThreshold", dcgm.join(plain, gpu.join, vllm), f, "warning",
            "GPU memory {{ $value | humanizePercentage }} used on " + dcgm.GPU_NAME,
            f"Plain threshold: used / total above {th.gpu_memory:g}. vLLM pre-allocates gpu_memory_utilization "
            f"({u:g}) of the GPU at start-up and fills it with KV cache, so on a healthy server this fires whenever "
            f"the utilization is above {th.gpu_memory:g} (vLLM's default 0.92 > 0.9: always), and it cannot tell "
            "vLLM's cache from memory outside the budget. Prefer GpuMemoryAboveVllmBudget."))
    return out


def _y(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def rules_yaml(th: Thresholds, names: MetricNames, model_names: Iterable[str] = (),
               gpu: Optional[GpuRuleOptions] = None, speculative: bool = False, lora: bool = False,
               notes: Iterable[str] = ()) -> str:
    models = list(model_names)
    lines = [
        f"# Generated by kvplan alerts for vLLM {names.version}. Thresholds: "
        + ", ".join(f"{k}={v}" for k, v in th.to_dict().items() if v is not None),
    ]
    lines += [f"# {note}" for note in notes]
    if gpu is not None and gpu.mode != "none":
        lines.append(f"# GPU memory ({gpu.mode}): vLLM budget gpu_memory_utilization={gpu.utilization:g} "
                     f"({gpu.utilization_source}); DCGM join: {gpu.join}")
    lines.append("groups:")
    groups = [("kvplan-vllm", rules(th, names, models) + serve_flag_rules(th, names, models, speculative, lora)),
              ("kvplan-gpu-memory", gpu_rules(th, names, models, gpu))]
    for group, group_rules in groups:
        if not group_rules:
            continue
        lines += [f"  - name: {_y(group)}", "    rules:"]
        for r in group_rules:
            lines += [
                f"      - alert: {_y(r.alert)}",
                f"        expr: {_y(r.expr)}",
                f"        for: {_y(r.for_)}",
                "        labels:",
                f"          severity: {_y(r.severity)}",
                "        annotations:",
                f"          summary: {_y(r.summary)}",
                f"          description: {_y(r.description)}",
            ]
    return "\n".join(lines) + "\n"


def dashboard(th: Thresholds, names: MetricNames, model_names: Iterable[str] = (),
              gpu: Optional[GpuRuleOptions] = None, speculative: bool = False, lora: bool = False) -> dict:
    """A Grafana dashboard (schema 39) with a ``model_name`` variable; every query names only
    metrics of ``names`` (tests check them against a real /metrics scrape)."""
    sel = 'model_name=~"$model_name"'
    w = "$__rate_interval"

    def q(hist: str, p: float) -> str:
        return f"histogram_quantile({p}, sum by (le, model_name) (rate({hist}_bucket{{{sel}}}[{w}])))"

    panels: list[tuple[str, str, list[tuple[str, str]], Optional[float]]] = [
        ("KV-cache usage", "percentunit", [(f"max by (model_name) ({names.kv_cache_usage}{{{sel}}})", "{{model_name}}")],
         th.kv_cache_usage),
        ("Requests running / waiting", "short", [
            (f"sum by (model_name) ({names.requests_running}{{{sel}}})", "running {{model_name}}"),
            (f"sum by (model_name) ({names.requests_waiting}{{{sel}}})", "waiting {{model_name}}")], th.waiting),
        ("Preemptions / s", "short", [(f"sum by (model_name) (rate({names.preemptions}{{{sel}}}[{w}]))", "{{model_name}}")],
         None),
        ("Tokens / s", "short", [
            (f"sum by (model_name) (rate({names.prompt_tokens}{{{sel}}}[{w}]))", "prompt {{model_name}}"),
            (f"sum by (model_name) (rate({names.generation_tokens}{{{sel}}}[{w}]))", "generation {{model_name}}")], None),
        ("E2E latency P50 / P99", "s", [(q(names.e2e, 0.5), "P50 {{model_name}}"), (q(names.e2e, 0.99), "P99 {{model_name}}")],
         th.e2e_p99),
        ("TTFT P50 / P99", "s", [(q(names.ttft, 0.5), "P50 {{model_name}}"), (q(names.ttft, 0.99), "P99 {{model_name}}")],
         th.ttft_p99),
        ("Queue time P50 / P99", "s", [(q(names.queue_time, 0.5), "P50 {{model_name}}"),
                                       (q(names.queue_time, 0.99), "P99 {{model_name}}")], None),
        ("Inter-token latency P50 / P99", "s", [(q(names.itl, 0.5), "P50 {{model_name}}"),
                                                (q(names.itl, 0.99), "P99 {{model_name}}")], None),
        ("Finished requests / s by reason", "short", [
            (f"sum by (model_name, finished_reason) (rate({names.request_success}{{{sel}}}[{w}]))",
             "{{finished_reason}} {{model_name}}")], None),
    ]
    if names.prefix_cache_queries and names.prefix_cache_hits:
        panels.append(("Prefix-cache hit rate", "percentunit", [(
            f"sum by (model_name) (rate({names.prefix_cache_hits}{{{sel}}}[{w}])) / "
            f"sum by (model_name) (rate({names.prefix_cache_queries}{{{sel}}}[{w}]))", "{{model_name}}")], None))
    if speculative and names.spec_accepted_tokens and names.spec_draft_tokens:
        acceptance = (f"sum by (model_name) (rate({names.spec_accepted_tokens}{{{sel}}}[{w}])) / "
                      f"sum by (model_name) (rate({names.spec_draft_tokens}{{{sel}}}[{w}]))")
        panels.append(("Speculative decoding: draft acceptance rate", "percentunit",
                       [(acceptance, "{{model_name}}")], th.spec_acceptance))
        if names.spec_drafts:  # V1: mean acceptance length = 1 + accepted / drafts (vLLM's SpecDecodingProm)
            panels.append(("Speculative decoding: tokens per step (mean acceptance length)", "short", [(
                f"1 + sum by (model_name) (rate({names.spec_accepted_tokens}{{{sel}}}[{w}])) / "
                f"sum by (model_name) (rate({names.spec_drafts}{{{sel}}}[{w}]))", "{{model_name}}")], None))
    if lora and names.lora_requests_info:
        panels.append(("LoRA adapters (running / waiting)", "short", [(
            f"max by (model_name, running_lora_adapters, waiting_lora_adapters) ({names.lora_requests_info}{{{sel}}})",
            "running [{{running_lora_adapters}}] waiting [{{waiting_lora_adapters}}]")], None))
    panels += _gpu_panels(th, gpu)
    out_panels = []
    for i, (title, unit, targets, threshold) in enumerate(panels):
        steps = [{"color": "green", "value": None}]
        if threshold is not None:
            steps.append({"color": "red", "value": threshold})
        out_panels.append({
            "id": i + 1, "type": "timeseries", "title": title,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps},
                                         "custom": {"thresholdsStyle": {"mode": "line" if threshold is not None else "off"}}},
                            "overrides": []},
            "targets": [{"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                        for j, (expr, legend) in enumerate(targets)],
        })
    models = list(model_names)
    return {
        "title": f"vLLM (kvplan, vLLM {names.version})",
        "uid": "kvplan-vllm",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "tags": ["vllm", "kvplan"],
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"},
            {"name": "model_name", "type": "query", "label": "Model",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": f"label_values({names.requests_running}, model_name)", "refId": "model_name"},
             "definition": f"label_values({names.requests_running}, model_name)",
             # --model-name preselects the models the rules watch; otherwise all.
             "regex": ("/^(" + "|".join(regex_escape(m) for m in models) + ")$/") if models else "",
             "includeAll": True, "multi": True, "allValue": ".+", "refresh": 2,
             "current": {"selected": True, "text": ["All"], "value": ["$__all"]}},
        ]},
        "panels": out_panels,
    }


def _gpu_panels(th: Thresholds, gpu: Optional[GpuRuleOptions]) -> list:
    if gpu is None or gpu.mode == "none":
        return []
    g, u = gpu.selector, _num(gpu.utilization)
    legend = "{{Hostname}}{{hostname}} GPU {{gpu}}"
    return [
        (f"GPU memory used vs vLLM budget ({gpu.utilization:g} of total)", "decmbytes", [
            (dcgm.used(g), "used " + legend),
            (f"{u} * {dcgm.total(g)}", "budget " + legend)], None),
        ("GPU memory outside vLLM's budget", "decmbytes", [
            (f"{dcgm.used(g)} - {u} * {dcgm.total(g)}", legend)], None),
        ("GPU utilisation", "percent", [(dcgm.gpu_util(g), legend)], None),
    ]


_METRIC = re.compile(r"vllm:[A-Za-z0-9_:]+")
_DCGM_METRIC = re.compile(r"DCGM_FI_[A-Z0-9_]+")


def queried_metrics(dash: dict) -> set[str]:
    """Every ``vllm:`` sample name the dashboard's queries and variables mention."""
    found: set[str] = set()
    for p in dash.get("panels", []):
        for t in p.get("targets", []):
            found.update(_METRIC.findall(t.get("expr", "")))
    for var in dash.get("templating", {}).get("list", []):
        found.update(_METRIC.findall(str(var.get("definition", ""))))
    return found


def queried_dcgm_metrics(dash: dict) -> set[str]:
    return {m for p in dash.get("panels", []) for t in p.get("targets", []) for m in _DCGM_METRIC.findall(t.get("expr", ""))}


@dataclass(frozen=True)
class AlertsOutput:
    rules_path: Path
    dashboard_path: Path
    names: MetricNames
    thresholds: Thresholds
    gpu: Optional[GpuRuleOptions] = None
    alerts: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # where each latency threshold came from (thresholds.derive_latency)

    def to_dict(self) -> dict:
        return {"rules": str(self.rules_path), "dashboard": str(self.dashboard_path),
                "vllm_version": self.names.version, "thresholds": self.thresholds.to_dict(), "notes": list(self.notes),
                "metrics": self.names.all(), "alerts": list(self.alerts),
                "gpu_memory": self.gpu.to_dict() if self.gpu is not None else None,
                "gpu_metrics": list(dcgm.NAMES) if self.gpu is not None and self.gpu.mode != "none" else []}


def write(output_dir: Path, th: Thresholds, vllm_version: Optional[str] = None,
          model_names: Iterable[str] = (), gpu: Optional[GpuRuleOptions] = None, speculative: bool = False,
          lora: bool = False, notes: Iterable[str] = ()) -> AlertsOutput:
    """Write the rules and the dashboard. ``gpu`` None: the GPU rules with vLLM's default budget
    for the version; pass ``GpuRuleOptions(mode="none")`` to leave them out. ``speculative`` / ``lora``:
    the server runs --speculative-config / --enable-lora (their metrics exist only then)."""
    names = metric_names(vllm_version)
    models = list(model_names)
    if gpu is None:
        util, source = dcgm.resolve_utilization(None, None, vllm_version)
        gpu = GpuRuleOptions(util, source)
    output_dir.mkdir(parents=True, exist_ok=True)
    rules_path = output_dir / RULES_FILE
    dash_path = output_dir / DASHBOARD_FILE
    notes = tuple(notes)
    rules_path.write_text(rules_yaml(th, names, models, gpu, speculative, lora, notes), encoding="utf-8")
    dash_path.write_text(dumps_report(dashboard(th, names, models, gpu, speculative, lora)), encoding="utf-8")
    written = tuple(r.alert for r in rules(th, names, models) + serve_flag_rules(th, names, models, speculative, lora)
                    + gpu_rules(th, names, models, gpu))
    return AlertsOutput(rules_path, dash_path, names, th, gpu, written, notes)
