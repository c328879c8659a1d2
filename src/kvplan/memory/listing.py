"""The model catalog as ``kvplan models`` and the page list it: what a VRAM-calculator user scans
for (parameters, the longest context vLLM accepts, KV bytes per token), each from the planner."""
from __future__ import annotations

from typing import Optional


def catalog_rows(search: Optional[str] = None) -> list[dict]:
    """One row per catalog model (``search``: a substring of the id or an alias). The figures are
    the plan's own at vLLM's current rules, TP 1 and the checkpoint's KV dtype; the KV memory
    given only skips the estimate: bytes per token and the model's limit do not depend on it."""
    from ..hardware import custom_gpu
    from ..models import catalog, load_model
    from ..models.params import count_params
    from .planner import plan
    from .request import PlanRequest

    any_gpu = custom_gpu(80 << 30, "catalog listing")
    rows = []
    for entry in catalog.entries():
        if search and search.lower() not in (entry.id.lower() + " " + " ".join(entry.aliases)):
            continue
        spec = load_model(entry.id)
        r = plan(PlanRequest(spec, any_gpu, kv_cache_memory_bytes=1 << 30), what_ifs=False, fit_search=False)
        rows.append({"id": entry.id, "aliases": list(entry.aliases), "params": count_params(spec),
                     "max_context_tokens": r.derived_max_model_len, "kv_bytes_per_token": r.kv.bytes_per_token_total,
                     "kv_cache_dtype": r.flags.kv_cache_dtype, "summary": spec.describe()})
    return rows
