"""Issue 30's CLI-level checks run the real command in this process (typer's CliRunner: the same
parser, exit codes and output a user gets, without a Python start-up per test)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from typer.testing import CliRunner

FIXTURES = Path(__file__).parent / "fixtures"
ARGS_LOGS = FIXTURES / "vllm_logs_args"
EXAMPLE_LOG = Path(__file__).parents[1] / "src" / "kvplan" / "workload" / "examples" / "customer_service.jsonl.gz"


class Run:
    def __init__(self, exit_code: int, stdout: str, stderr: str) -> None:
        self.exit_code, self.stdout, self.stderr = exit_code, stdout, stderr

    @property
    def flat(self) -> str:
        """stdout as one line: rich's box edges and line wraps removed."""
        return " ".join(self.stdout.replace("│", " ").split())

    def json(self) -> dict:
        return json.loads(self.stdout)


def kvplan(*args: str, columns: int = 120, stdin: Optional[str] = None) -> Run:
    from kvplan.cli.main import app

    out = CliRunner().invoke(app, [str(a) for a in args], input=stdin, catch_exceptions=False,
                             env={"KVPLAN_OFFLINE": "1", "COLUMNS": str(columns), "NO_COLOR": "1"},
                             terminal_width=columns)
    return Run(out.exit_code, out.stdout, out.stderr)
