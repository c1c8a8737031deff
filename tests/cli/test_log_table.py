"""``computer log``'s table on a narrow terminal: the short columns keep one line each, the
description folds."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from rich.console import Console

from computer import AuditRecord
from computer.cli._log import _print_table


def test_an_80_column_table_keeps_time_status_and_duration_on_one_line() -> None:
    record = AuditRecord(
        id=50, time=datetime(2026, 12, 5, 17, 51, 49, tzinfo=UTC), kind="tool", tool="exec", status="error",
        error="cancelled", duration_ms=1130.3, caller={"adapter": "langchain", "agent": "reviewer-agent-7"},
        args={"command": "head -c 3000 /dev/urandom > /workspace/a-long-file-name-without-spaces.dat " * 3},
    )  # fmt: skip
    out = io.StringIO()
    _print_table([record], "w", Console(file=out, width=80, color_system=None))
    lines = out.getvalue().splitlines()
    row = next(line for line in lines if "│ 50 │" in line)
    for cell in ("12-05 17:51:49", "exec", "error", "1130.3"):
        assert cell in row, out.getvalue()
    assert max(len(line) for line in lines) <= 80
