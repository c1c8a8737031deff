"""``computer ps NAME`` and ``computer kill NAME PID``: the processes of a workspace's live sandbox.

A live sandbox lives in the process that owns the workspace (an owner actor of a cluster, or the
process of a ``computer shell`` session) and ends with it. So these commands join the cluster named
by ``--address``/``RAY_ADDRESS``; with none, the workspace is opened in this process only to say
where it is awake (or that it is asleep, when nothing of it can be running).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from ._context import CliError, GlobalOptions
from ._workspaces import open_workspace
from .display import plain_text

__all__ = ["kill_process", "list_processes"]

_ASLEEP = (
    "workspace {name!r} is asleep: no live sandbox, nothing of it runs (a live sandbox lives in the "
    "process that owns the workspace: join its cluster with --address or RAY_ADDRESS)"
)


def _known(options: GlobalOptions, name: str) -> None:
    """Refuse a name no workspace has (opening it made one, empty, listed by ``computer ls``)."""
    from ._ls import list_workspaces

    if not any(row.name == name for row in list_workspaces(options, prefix=name)):
        raise CliError(f"no workspace named {name!r} (`computer ls` lists them)", code=1)


async def list_processes(options: GlobalOptions, name: str, backend: str | None, console: Console) -> int:
    await asyncio.to_thread(_known, options, name)  # the directory's client runs a loop of its own
    async with open_workspace(options, name, backends=False, assets=False) as workspace:
        if options.local:
            console.print(_ASLEEP.format(name=name), markup=False, highlight=False)
            return 0
        try:
            found = await workspace.runtime.processes(backend=backend)
        except ValueError as exc:  # an unknown backend: the message lists the configured ones
            raise CliError(str(exc), code=2) from None
        except (RuntimeError, TimeoutError, OSError) as exc:  # the sandbox or its owner ended meanwhile
            raise CliError(f"cannot list the processes of {name!r}: {exc}", code=1) from None
    if not found:
        console.print(f"no processes: workspace {name!r} has no live sandbox running anything", markup=False)
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
    await asyncio.to_thread(_known, options, name)
    async with open_workspace(options, name, backends=False, assets=False) as workspace:
        if options.local:
            raise CliError(_ASLEEP.format(name=name), code=1)
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
