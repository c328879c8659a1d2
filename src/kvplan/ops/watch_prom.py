"""``kvplan watch --prometheus URL``: the same view as the live mode, read back from Prometheus.

For every deployment (scrape target) the selection finds, the scrapes Prometheus stored in the
last ``window`` seconds are replayed through :class:`kvplan.ops.watch.Watcher` (the live mode's
window, restart and histogram-delta logic), so both modes agree on the same scrapes. GPU memory
comes from the DCGM exporter's series on the same host (or ``--gpu-selector``), judged against
vLLM's budget (``--gpu-memory-utilization``, else the server's own ``vllm:cache_config_info``).
"""
from __future__ import annotations

from dataclasses import asdict, replace
from typing import Optional

from .prom import history as H
from .prom.client import PromClient, PromError
from .thresholds import Thresholds
from .watch import Snapshot, Watcher, tripped


def prometheus_snapshots(client: PromClient, sel: H.Selection, window_s: float, th: Thresholds,
                         at: Optional[float] = None, gpu_memory_utilization: Optional[float] = None,
                         gpu_selector: str = "", vllm_version: Optional[str] = None) -> list[Snapshot]:
    """One snapshot per deployment. Raises PromError (unreachable, error answers) and
    H.NoSeriesError (nothing for the selection) -- the cases where nothing could be read."""
    import time

    now = time.time() if at is None else at
    deps = H.find_deployments(client, sel, now - window_s, now)
    out = []
    for dep in deps:
        label = f"{client.url} {dep.job}/{dep.instance}"
        w = Watcher(label, window_s, th)
        snap: Optional[Snapshot] = None
        for scrape in H.raw_snapshots(client, dep, sel, window_s, now):
            snap = w.observe(scrape)
        notes: list[str] = []
        if snap is None:
            snap = w._down(f"no samples of {dep.instance} in the last {window_s:g} s (scraped before, not now: down?)")
        renamed = {k: v for k, v in dep.metric_names().items() if v and v != H.M.ALIASES[k][0]}
        if renamed:
            notes.append("older vLLM metric names: " + ", ".join(f"{k}={v}" for k, v in sorted(renamed.items())))
        gpu_list, gpu_frac, gpu_trips = None, None, []
        gsel = H.gpu_selection(client, dep, gpu_selector, now - window_s, now)
        if gsel.note:
            notes.append(gsel.note)
        else:
            util, source = H.utilization_of(client, dep, now, gpu_memory_utilization, vllm_version)
            readings = H.gpu_readings(client, gsel, now)
            gpu_list = [r.to_dict(util) for r in readings]
            fr = [g["memory_used_bytes"] / g["memory_total_bytes"] for g in gpu_list if g["memory_total_bytes"]]
            gpu_frac = max(fr) if fr else None
            notes.append(f"GPU memory from DCGM ({gsel.how}); vLLM budget {util:g} ({source})")
            if any(g["outside_budget_bytes"] is not None and g["memory_total_bytes"]
                   and g["outside_budget_bytes"] > th.gpu_budget_margin * g["memory_total_bytes"] for g in gpu_list):
                gpu_trips.append("gpu_budget")
        d = asdict(snap)
        d.update(gpu=gpu_list, gpu_memory_used_fraction=gpu_frac, deployment=dep.to_dict(), notes=tuple(notes),
                 metric_names={**d["metric_names"], **{k: v for k, v in dep.metric_names().items() if k in d["metric_names"]}})
        snap = Snapshot(**d)
        snap = replace(snap, tripped=tuple(tripped(snap, th) + gpu_trips) if snap.up else ())
        out.append(snap)
    return out


__all__ = ["prometheus_snapshots", "PromError"]
