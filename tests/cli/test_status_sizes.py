"""`computer status`'s pool size column: a pool turned off says so; a pool is elastic when its
maximum is above its minimum (issue 23), ``auto`` when that maximum follows the cluster's CPUs. Its
owner-host rows show the workspaces' names escaped."""

from __future__ import annotations

import pytest

from computer.cli._status import _size


@pytest.mark.parametrize(
    ("pool", "shown"),
    [
        ({"min": 0, "max": 0, "max_setting": None}, "off"),  # was "0..0 (elastic)"
        ({"min": 2, "max": 8, "max_setting": None}, "2..8 (elastic, auto)"),
        ({"min": 2, "max": 2, "max_setting": None}, "2..2"),  # a cluster with room for the minimum only
        ({"min": 2, "max": 4, "max_setting": 4}, "2..4 (elastic)"),
        ({"min": 3, "max": 3, "max_setting": 3}, "3..3"),
    ],
)
def test_the_size_column(pool: dict[str, object], shown: str) -> None:
    assert _size(pool) == shown


def test_an_owner_hosts_row_shows_workspace_names_escaped_not_as_terminal_codes_or_markup() -> None:
    """``computer status``'s owner-host table listed the awake workspaces' names as they were: a name
    (chosen by a user or a model; only "/" and NUL are refused) holding a clear-screen code reached the
    terminal, and one holding ``[bold]`` was read as rich markup."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    from computer.cli._status import host_row

    stats = {"workspaces": ["demo-\x1b[2J", "[bold]b[/bold]", "c\nfake row"], "node": "n" * 40, "pid": 7}
    table = Table()
    for column in ("host", "node", "pid", "memory", "workspaces", "awake"):
        table.add_column(column)
    table.add_row(*host_row("computer:host:3", stats))
    out = StringIO()
    Console(file=out, width=400, color_system=None).print(table)
    shown = out.getvalue()
    assert "\x1b" not in shown and "demo-\\x1b[2J" in shown
    assert "[bold]b[/bold]" in shown
    assert "c\\nfake row" in shown
    assert host_row("computer:host:3", stats)[:5] == ("3", "n" * 12, "7", "-", "3")
