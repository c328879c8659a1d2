"""Rebuild the ``derived`` shares of ``src/kvplan/hardware/kernel_transfer.json`` from its quoted
kernel measurements (kvplan.sim.kernel_transfer.derive): each measured GEMM against what the
reference GPU's kernel table predicts for it at this GPU's catalog peaks, and the stream bandwidth's
share of peak against the reference GPU's in the same harness. ``--check`` fails when the file is
not what the rule gives (a table or catalog change that moved a share).

    python scripts/build_kernel_transfer.py [--check]
"""
from __future__ import annotations

import json
import sys

from kvplan.hardware import find_gpu
from kvplan.sim import kernel_transfer as KT


def rebuilt() -> dict:
    doc = json.loads(KT.TRANSFER_FILE.read_text(encoding="utf-8"))
    for name, row in doc["gpus"].items():
        row["derived"] = KT.derive(row, find_gpu(name), find_gpu(row["reference_table"]))
    return doc


def main(argv: list[str]) -> int:
    doc = rebuilt()
    text = json.dumps(doc, indent=1) + "\n"
    if "--check" in argv:
        if KT.TRANSFER_FILE.read_text(encoding="utf-8") != text:
            print(f"{KT.TRANSFER_FILE}: derived shares are stale; run scripts/build_kernel_transfer.py")
            return 1
        return 0
    KT.TRANSFER_FILE.write_text(text, encoding="utf-8")
    for name, row in doc["gpus"].items():
        print(name, "against", row["reference_table"], json.dumps(row["derived"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
