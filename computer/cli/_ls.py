"""``computer ls``: the workspaces of the directory with size, last activity and state (no Ray)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from rich.console import Console
from rich.table import Table

from ._context import GlobalOptions, local_settings

__all__ = ["WorkspaceRow", "list_workspaces", "print_workspaces"]


@dataclass(frozen=True)
class WorkspaceRow:
    name: str
    size: int | None  # bytes of the SQLite file and its WAL on this machine; None when not here
    last_active: float
    state: str
    node: str | None


def list_workspaces(options: GlobalOptions) -> list[WorkspaceRow]:
    """Every workspace the directory knows, sorted by name."""
    from ..actors import open_directory
    from ..actors.naming import workspace_file

    config = local_settings(options)
    directory = open_directory(config)
    try:
        rows = []
        now = time.time()
        for name in directory.names():
            record = directory.get(name)
            if record is None:
                continue
            state: str = record.state
            if state == "active" and not record.lease_live(now):
                state = "active (lease expired)"  # its owner stopped without hibernating
            path = workspace_file(config, name)
            files = [path, path.with_name(path.name + "-wal")]
            sizes = [f.stat().st_size for f in files if f.exists()]
            rows.append(
                WorkspaceRow(name, sum(sizes) if sizes else None, record.last_active, state, record.node)
            )
        return rows
    finally:
        directory.close()


def print_workspaces(rows: list[WorkspaceRow], *, as_json: bool, console: Console) -> None:
    if as_json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
        return
    if not rows:
        console.print("no workspaces yet (`computer demo` creates some)")
        return
    table = Table()
    for column in ("name", "size", "last activity", "state"):
        table.add_column(column, justify="right" if column == "size" else "left")
    now = time.time()
    for row in rows:
        size = "not on this node" if row.size is None else _size(row.size)
        table.add_row(row.name, size, _ago(now - row.last_active), row.state)
    console.print(table)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.1f} days ago"
