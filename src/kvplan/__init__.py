"""kvplan: vLLM-exact GPU memory and KV-cache planning.

The public API is small: load a model, pick a GPU, plan. Everything else lives in the domain
packages (``kvplan.models``, ``kvplan.hardware``, ``kvplan.memory``, ``kvplan.report``).
"""
from . import _native  # noqa: F401  (first: keeps a stale compiled build out; kvplan._native)
from .errors import KvplanError, UsageError
from .hardware import Gpu, custom_gpu, find_gpu, parse_size
from .memory import PlanRequest, PlanResult, plan
from .models import ModelSpec, load_model, spec_from_config

__version__ = "0.1.0"

__all__ = [
    "Gpu", "KvplanError", "ModelSpec", "PlanRequest", "PlanResult", "UsageError", "custom_gpu", "find_gpu",
    "load_model", "parse_size", "plan", "spec_from_config", "__version__",
]
