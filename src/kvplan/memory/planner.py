"""``plan()``: a model, a GPU and vLLM's serve flags in; vLLM's memory and KV-cache numbers out.

Three stages, in vLLM's own start-up order (``EngineCore._initialize_kv_caches``):

1. :func:`~kvplan.memory._resolve.resolve`: the config checks, the dtypes, lengths and batch
   limits, the per-layer KV specs and their groups, into a frozen :class:`ResolvedConfig`;
2. :func:`~kvplan.memory._sizing.size_kv`: the memory budget of every worker, the block count
   (minimum over workers), the admission check, the auto-fit and the capacity ladder;
3. :func:`~kvplan.memory._assemble.assemble`: the :class:`PlanResult`, with the capacity line vLLM
   logs, the serve command and the what-ifs.
"""
from __future__ import annotations

from typing import Optional

from ._assemble import CONFIG_ERRORS, assemble
from ._resolve import ResolvedConfig, resolve
from ._sizing import LADDER, size_kv
from .request import PlanRequest
from .result import PlanResult

__all__ = ["CONFIG_ERRORS", "LADDER", "PlanRequest", "PlanResult", "ResolvedConfig", "plan"]


def plan(req: PlanRequest, what_ifs: bool = True, fit_search: Optional[bool] = None) -> PlanResult:
    """Compute vLLM's start-up memory and KV-cache numbers for one configuration. ``what_ifs``
    adds the what-if rows; ``fit_search`` (default: with the what-ifs) the smallest TP × PP that
    starts a failing configuration, and whether the serve command offered starts."""
    config = resolve(req)
    sized = size_kv(config)
    return assemble(config, sized, what_ifs=what_ifs, fit_search=fit_search, replan=plan)
