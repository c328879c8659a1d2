"""``kvplan doctor``: diagnose vLLM logs. See diagnose.diagnose and model.FINDING_IDS."""
from .diagnose import diagnose, read_source
from .model import FINDING_IDS, DoctorReport, Evidence, Finding, Fix, RunSummary

__all__ = ["diagnose", "read_source", "FINDING_IDS", "DoctorReport", "Evidence", "Finding", "Fix", "RunSummary"]
