"""``computer ps NAME`` and ``computer kill NAME PID``: the processes of a workspace's live sandbox.

A live sandbox lives in the process that owns the workspace (an owner actor of a cluster, or the
process of a ``computer shell`` session) and ends with it. So these commands join the cluster named
by ``--address``/``RAY_ADDRESS``; with none, the directory's record (as ``computer ls`` reads it,
nothing is opened) says where it is awake and how to reach it (``_not_here``), or that it is asleep,
when nothing of it can be running.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from ._context import CliError, GlobalOptions
from ._ls import WorkspaceRow
from ._workspaces import open_workspace
from .display import plain_text

__all__ = ["kill_process", "list_processes"]

_ASLEEP = (
    "workspace {name!r} is asleep: no live sandbox, nothing of it runs (a live sandbox lives in the "
    "process that owns the workspace: join its cluster with --address or RAY_ADDRESS)"
)


def _known(options: GlobalOptions, name: str) -> WorkspaceRow:
    """Refuse a name no workspace has (opening it made one, empty, listed by ``computer ls``)."""
    from ._ls import list_workspaces

    for row in list_workspaces(options, prefix=name):
        if row.name == name:
            return row
    raise CliError(f"no workspace named {name!r} (`computer ls` lists them)", code=1)


def _not_here(name: str, row: WorkspaceRow) -> str | None:
    """With no cluster named: why ``ps``/``kill`` cannot reach a live sandbox of ``name`` from here,
    or ``None`` when it is asleep (nothing of it runs).

    Decision: the workspace is no longer opened in this process to find out. Opening one that
    another command holds (a ``computer shell`` session running ``!server &``) answered "another
    owner holds it; wait until that command ends": at that end its processes end too, so the advice
    could never show them. The directory's record says where it is awake; one awake on a cluster is
    reached with ``--address``, one in another process only from within that process."""
    if row.state != "awake":
        return None
    if (row.node or "").startswith("process:"):
        return (
            f"workspace {name!r} is awake {row.where}: its live sandbox lives in that process (a "
            "`computer shell` or `mcp` session, or a Python program) and only it reaches the sandbox: "
            "at that shell's prompt `!ps -ef` lists its processes"
        )
    return (
        f"workspace {name!r} is awake {row.where}: its live sandbox lives in that cluster's owner; "
        "join it with --address HOST:PORT (or RAY_ADDRESS)"
    )


async def list_processes(options: GlobalOptions, name: str, backend: str | None, console: Console) -> int:
    row = await asyncio.to_thread(_known, options, name)  # the directory's client runs a loop of its own
    if options.local:
        elsewhere = _not_here(name, row)
        if elsewhere is not None:
            raise CliError(elsewhere, code=1)
        console.print(_ASLEEP.format(name=name), markup=False, highlight=False, soft_wrap=True)
        return 0
    async with open_workspace(options, name, backends=False, assets=False) as workspace:
        try:
            found = await workspace.runtime.processes(backend=backend)
        except ValueError as exc:  # an unknown backend: the message lists the configured ones
            raise CliError(str(exc), code=2) from None
        except (RuntimeError, TimeoutError, OSError) as exc:  # the sandbox or its owner ended meanwhile
            raise CliError(f"cannot list the processes of {name!r}: {exc}", code=1) from None
    if not found:
        console.print(
            f"no processes: workspace {name!r} has no live sandbox running anything",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return 0
    table = Table(box=None, header_style="bold")
    for column in ("PID", "STARTED", "CPU", "RSS", "EXEC", "COMMAND"):
        table.add_column(
            column,
            no_wrap=column != "COMMAND",
            justify="right" if column in ("PID", "CPU", "RSS") else "left",
        )
    now = datetime.now(UTC)
    for p in found:
        table.add_row(
            str(p.pid),
            _ago(now, p.started),
            f"{p.cpu_seconds:.1f}s",
            f"{p.rss_bytes / 2**20:.1f}M",
            plain_text(p.exec_id or ""),
            plain_text(p.command),
        )
    console.print(table)
    return 0


async def kill_process(
    options: GlobalOptions, name: str, pid: int, backend: str | None, console: Console
) -> int:
    row = await asyncio.to_thread(_known, options, name)
    if options.local:
        raise CliError(_not_here(name, row) or _ASLEEP.format(name=name), code=1)
    async with open_workspace(options, name, backends=False, assets=False) as workspace:
        try:
            await workspace.runtime.kill_process(pid, backend=backend)
        except ProcessLookupError as exc:
            raise CliError(str(exc) or f"no process {pid}", code=1) from None
        except ValueError as exc:
            raise CliError(str(exc), code=2) from None
        except (RuntimeError, TimeoutError, OSError) as exc:  # the sandbox or its owner ended meanwhile
            raise CliError(f"cannot kill process {pid} of {name!r}: {exc}", code=1) from None
    console.print(f"killed {pid}")
    return 0


def _ago(now: datetime, then: datetime) -> str:
    seconds = max(0.0, (now - then).total_seconds())
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return time.strftime("%H:%M:%S", then.timetuple())


async def ending_processes(workspace: object) -> str | None:
    """What a session in process says as it ends (``computer shell``, ``computer mcp``): the processes
    still running in the workspace's live sandbox, which end with it (the sandbox lives in this
    process); None when there are none, or none can be listed (a workspace taken over, a sandbox
    gone). Before, a server an agent or a line had started was gone without a word."""
    processes = getattr(getattr(workspace, "runtime", None), "processes", None)  # owners and clients
    if processes is None:
        return None
    try:
        running = await processes()
    except Exception:
        return None
    if not running:
        return None
    # Escaped: a command line is whatever the program chose (``exec -a $'\e[2J'``, a newline making a
    # fake line of an MCP host's log); the note goes to a terminal or a log as text.
    named = ", ".join(f"{plain_text(p.command).plain} (pid {p.pid})" for p in running[:8])
    more = f", and {len(running) - 8} more" if len(running) > 8 else ""
    return (
        f"ending {len(running)} process(es) still running in the workspace's sandbox with this session: "
        f"{named}{more}"
    )
