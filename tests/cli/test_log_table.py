"""``computer log``'s table on a narrow terminal: the short columns keep one line each, the
description folds."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from rich.console import Console

from computer import AuditRecord
from computer.cli._log import _print_table, format_row


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


def test_names_a_model_chose_are_shown_escaped_not_as_terminal_codes_or_markup() -> None:
    """A file name, a tool name or an agent name holding ``ESC [2J`` (clear screen) or an OSC title
    sequence reached the terminal as is (``computer ls`` and ``ps`` escape theirs), and ``[bold]`` in
    a caller was read as rich markup."""
    record = AuditRecord(
        id=7, time=datetime(2026, 12, 5, 17, 51, 49, tzinfo=UTC), kind="tool", tool="x\x1b[2J", status="ok",
        error=None, duration_ms=1.0, caller={"agent": "[bold]a\x1b]0;PWNED\x1b\\"},
        args={"path": "/workspace/\x1b[2J\x1b]0;PWNED\x07[bold]x[/bold]"},
    )  # fmt: skip
    for render in (
        lambda console: _print_table([record], "w", console),
        lambda console: console.print(format_row(record)),
    ):
        out = io.StringIO()
        render(Console(file=out, width=400, color_system=None))
        text = out.getvalue()
        assert "\x1b" not in text and "\\x1b[2J" in text, text
        assert "[bold]a" in text and "[bold]x[/bold]" in text  # as written, never markup
