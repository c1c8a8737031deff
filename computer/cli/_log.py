"""``computer log NAME``: a workspace's audit log (tool calls, exec runs, share links) as a table or JSON.

Where it reads: with no cluster named, the workspace's file itself, read-only, beside whatever owner
holds it (awake in a cluster, in another command, or asleep): nothing is woken, taken over or
written. With ``--address``/``RAY_ADDRESS``, through a client of its owner in that cluster.
``--follow`` keeps printing records as they are written (a read-only file is polled every 0.5 s;
through a client, see ``computer.client``); a read-only follow ends (exit 1, with a message) once
the workspace's file is deleted or replaced by a new workspace of that name. ``--json`` prints one JSON object per line (JSON Lines),
so a follow can be piped.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..storage import AuditRecord
from ._context import CliError, GlobalOptions, local_settings
from .display import caller_text, plain_text

__all__ = ["format_row", "open_log", "show_log"]

_COLUMNS = ("id", "time (UTC)", "kind", "tool", "status", "ms", "caller", "what")


@asynccontextmanager
async def open_log(options: GlobalOptions, name: str) -> AsyncIterator[tuple[Any, Path | None]]:
    """The audit log of workspace ``name``: of its file read-only, or of a client in the cluster
    named; with the file's path when it is read directly (``None`` through a cluster)."""
    if not options.local:
        from ._workspaces import open_workspace

        async with open_workspace(options, name, backends=False, assets=False) as workspace:
            yield workspace.audit, None
        return
    from ..actors.naming import workspace_file
    from ..storage import FileSystem

    config = local_settings(options)
    try:
        path = workspace_file(config, name)
    except OSError as exc:
        raise CliError(f"cannot open workspace {name!r}: {exc.strerror}", code=2) from None
    if not path.exists():
        raise CliError(f"no workspace {name!r} in {config.data_dir} (`computer ls` lists them)")
    try:
        fs = FileSystem.open(str(path), readonly=True)
    except OSError as exc:
        raise CliError(f"cannot read workspace {name!r}: {exc.strerror or exc}") from None
    try:
        yield fs.audit, path
    finally:
        fs.close()


async def _removed(path: Path, poll: float = 0.5) -> None:
    """Return once ``path`` no longer names the file it names now (deleted, or a new file made in
    its place). The follower holds the old file open, so its inode number is not reused meanwhile."""
    first = os.stat(path)
    while True:
        await asyncio.sleep(poll)
        try:
            now = os.stat(path)
        except FileNotFoundError:
            return
        if (now.st_dev, now.st_ino) != (first.st_dev, first.st_ino):
            return


def json_line(record: AuditRecord) -> str:
    """One record as a JSON line: UTF-8 as it is, or ASCII escapes when it holds a lone surrogate (a
    model's broken emoji escape, kept as given): printing it raised, a traceback for ``--json``."""
    line = json.dumps(record.to_json(), ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(record.to_json(), ensure_ascii=True)
    return line


async def show_log(
    options: GlobalOptions,
    name: str,
    *,
    follow: bool,
    as_json: bool,
    tool: str | None,
    errors: bool,
    limit: int,
    console: Console,
) -> None:
    """Print the newest ``limit`` matching records, then (``follow``) every new one until interrupted."""
    status = "error" if errors else None
    async with open_log(options, name) as (audit, path):
        try:
            records: list[AuditRecord] = await audit.query(tool=tool, status=status, limit=limit)
        except (ValueError, TypeError) as exc:
            raise CliError(str(exc), code=2) from None
        if as_json:
            for record in records:
                print(json_line(record), flush=True)
        elif not follow and not records and (tool is not None or status is not None):
            await _say_none_matched(audit, name, tool, errors, console)
        elif not follow:
            _print_table(records, name, console)
        else:
            for record in records:
                console.print(format_row(record), soft_wrap=True)
        if not follow:
            return
        # None matched (`limit` > 0): the follow starts at the first record, not at the newest one
        # read apart: a record committed between the query and that read was shown by neither.
        since = records[-1].id if records else (0 if limit > 0 else None)

        async def print_new() -> None:
            async for record in audit.follow(since=since, tool=tool, status=status):
                if as_json:
                    print(json_line(record), flush=True)
                else:
                    console.print(format_row(record), soft_wrap=True)

        if path is None:
            await print_new()
            return
        # Decision: a deleted workspace ends the follow instead of polling its unlinked file forever;
        # a workspace made again under the name is a new log, which `computer log -f` shows afresh.
        following = asyncio.ensure_future(print_new())
        watching = asyncio.ensure_future(_removed(path))
        try:
            done, _ = await asyncio.wait({following, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (following, watching):
                task.cancel()
            await asyncio.gather(following, watching, return_exceptions=True)
        if following in done:
            following.result()  # the log closed, or a failure reading it
            return
        raise CliError(f"workspace {name!r} was deleted; stopped following its log")


async def _say_none_matched(audit: Any, name: str, tool: str | None, errors: bool, console: Console) -> None:
    """No record matched ``--tool``/``--errors``: say so, with what the log holds. Decision: it said
    "no audit records for NAME (yet)" of a log full of records, so a misspelt ``--tool`` (or the
    tool's name for an exec run, whose records name the backend: ``--tool shell``) looked like an
    empty log."""
    every: list[AuditRecord] = await audit.query(limit=10_000)
    given = ([f"--tool {tool}"] if tool is not None else []) + (["--errors"] if errors else [])
    line = Text("no audit records of ") + plain_text(name) + Text(" match ") + plain_text(" ".join(given))
    if not every:
        line += Text(" (its log is empty)")
    else:
        tools = sorted({record.tool for record in every if record.tool})
        line += (
            Text(f" (its log holds {len(every)} record(s); their tools: ")
            + plain_text(", ".join(tools))
            + ")"
        )
    console.print(line, highlight=False, soft_wrap=True)


def _print_table(records: list[AuditRecord], name: str, console: Console) -> None:
    if not records:
        console.print(Text("no audit records for ") + plain_text(name) + Text(" (yet)"), highlight=False)
        return
    table = Table(title=f"audit log of {name}: {len(records)} record(s), oldest first")
    for column in _COLUMNS:
        # The short columns keep one line each on a narrow terminal; caller and what take the rest.
        table.add_column(
            column,
            justify="right" if column in ("id", "ms") else "left",
            overflow="fold",
            no_wrap=column not in ("caller", "what"),
        )
    for record in records:
        table.add_row(*_cells(record))
    console.print(table)


def _cells(record: AuditRecord) -> list[Text | str]:
    status = Text(record.status, style="green" if record.status == "ok" else "bold red")
    duration = "" if record.duration_ms is None else f"{record.duration_ms:.1f}"
    return [
        str(record.id),
        record.time.strftime("%m-%d %H:%M:%S"),
        record.kind,
        # What a model or a program chose (a tool name, an agent name, a path, a command) is shown
        # escaped: a file named with ESC [2J cleared the terminal, and "[bold]" was rich markup.
        plain_text(record.tool or ""),
        status,
        duration,
        plain_text(caller_text(record.caller)),
        plain_text(record.summary()),
    ]


def format_row(record: AuditRecord) -> Text:
    """One record as one line (``--follow``)."""
    line = Text()
    for i, cell in enumerate(_cells(record)):
        if i:
            line.append("  ")
        line.append(cell if isinstance(cell, Text) else Text(cell))
    return line
