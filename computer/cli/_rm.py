"""``computer rm NAME... [--prefix P] [--yes] [--force]``: delete workspaces (``computer.delete_workspace``).

It lists what it is about to delete and asks first (``--yes`` skips the question; without a terminal
to ask on, ``--yes`` is required). With no cluster named it works on the data directory in this
process; a workspace awake on a cluster is then refused (its owner cannot be stopped from here) unless
``--force``; ``--force`` also deletes a file that is not a readable workspace store (a corrupt or
foreign file: no share links can be found for it). With ``--address`` (or ``RAY_ADDRESS``) it joins the cluster and stops awake owners.
"""

from __future__ import annotations

import asyncio
import errno
import sys
from collections.abc import Sequence

import typer
from rich.console import Console
from rich.text import Text

from ._context import CliError, GlobalOptions, local_settings, ray_session
from ._ls import WorkspaceRow, list_workspaces
from .display import plain_text, size_text

__all__ = ["remove_workspaces"]


def remove_workspaces(
    options: GlobalOptions,
    names: Sequence[str],
    *,
    prefix: str | None,
    yes: bool,
    force: bool,
    console: Console,
) -> int:
    """0 when every workspace named was deleted, 1 when one could not be, 2 for bad usage."""
    if not names and prefix is None:
        raise CliError("name the workspaces to delete, or give --prefix P (e.g. --prefix demo-)", code=2)
    if prefix == "":
        raise CliError("--prefix must not be empty (it would match every workspace)", code=2)
    rows = {row.name: row for row in list_workspaces(options)}
    targets = list(dict.fromkeys([*names, *(n for n in rows if prefix is not None and n.startswith(prefix))]))
    missing = [n for n in names if n not in rows]
    for name in missing:
        console.print(
            f"no workspace named {name!r} (`computer ls` lists them)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    targets = [n for n in targets if n in rows]
    if not targets:
        if prefix is not None and not names:
            console.print(
                f"no workspace starts with {prefix!r}", markup=False, highlight=False, soft_wrap=True
            )
            return 0
        return 1
    _show(console, [rows[n] for n in targets])
    if not yes:
        if not sys.stdin.isatty():
            raise CliError("not deleting without confirmation: pass --yes", code=2)
        if not typer.confirm(f"Delete {len(targets)} workspace(s)?", default=False):
            console.print("nothing deleted")
            return 1
    failed = asyncio.run(_delete_all(options, targets, force=force, console=console, rows=rows))
    return 1 if failed or missing else 0


def _show(console: Console, rows: list[WorkspaceRow]) -> None:
    for row in rows:
        size = "elsewhere" if row.size is None else size_text(row.size)
        state = f"awake {row.where}" if row.where else row.state
        console.print(
            Text("  ") + plain_text(row.name) + Text(f"  ({state}, {size})"), highlight=False, soft_wrap=True
        )


async def _delete_all(
    options: GlobalOptions,
    names: list[str],
    *,
    force: bool,
    console: Console,
    rows: dict[str, WorkspaceRow] | None = None,
) -> int:
    from ..actors import delete_workspace

    async def each() -> int:
        failed = 0
        for name in names:
            try:
                done = await delete_workspace(name, force=force)
            except OSError as exc:
                if exc.errno == errno.EIO and force and options.local:
                    size = await asyncio.to_thread(_remove_unreadable, options, name)
                    console.print(
                        Text("deleted ")
                        + plain_text(name)
                        + Text(
                            f" ({size_text(size)}; its file was not a readable workspace, "
                            "so no share links were looked for)"
                        ),
                        highlight=False,
                        soft_wrap=True,
                    )
                    continue
                failed += 1
                hint = ""
                row = (rows or {}).get(name)
                if exc.errno == errno.EBUSY and row is not None and (row.node or "").startswith("process:"):
                    # Another command like this one (shell, mcp, tool) owns it, with no cluster: the
                    # owner's own words ("connect to its cluster first", "--address joins its
                    # cluster") pointed at a cluster there is none of.
                    console.print(
                        Text("not deleted: ")
                        + plain_text(name)
                        + Text(f": another command holds it (awake {row.where}): end that command, or ")
                        + Text("--force deletes it anyway (that command's writes are then refused)"),
                        highlight=False,
                        soft_wrap=True,
                    )
                    continue
                if exc.errno == errno.EBUSY:
                    hint = " (--force deletes it anyway"
                    hint += "; --address joins its cluster)" if options.local else ")"
                elif exc.errno == errno.EIO and options.local:
                    hint = " (--force deletes the file anyway)"
                reason = plain_text(f"{exc.strerror or exc}")  # an OSError's text may quote the name too
                console.print(
                    Text("not deleted: ") + plain_text(name) + Text(": ") + reason + Text(hint),
                    highlight=False,
                    soft_wrap=True,
                )
                continue
            details = [size_text(done.bytes), f"{done.links} share link(s)"]
            if done.owner_stopped:
                details.append("owner stopped")
            console.print(
                Text("deleted ") + plain_text(name) + Text(f" ({', '.join(details)})"),
                highlight=False,
                soft_wrap=True,
            )
        return failed

    if options.local:
        local_settings(options)  # delete_workspace reads the active settings: this data directory
        return await each()
    async with ray_session(options):
        return await each()


def _remove_unreadable(options: GlobalOptions, name: str) -> int:
    """Delete workspace ``name`` whose file cannot be opened as a workspace store: its files and its
    directory record (also the "deleting" lease a failed deletion left). Its share links are keyed by
    the id stored in the file, which cannot be read, so they stay (their files are gone: a link
    answers 404). Returns the bytes removed.

    Decision: ``delete_workspace`` raises the file's stored epoch before removing it, so that an owner
    still running has its writes refused; a file SQLite cannot open has no owner to fence (none could
    open it either), so this takes the lease, removes the files and the record, and fences nothing.
    """
    from ..actors import remove_workspace_files, take_lease
    from ..actors.directory import DELETING, open_directory
    from ..actors.naming import workspace_file

    config = local_settings(options)
    directory = open_directory(config)
    try:
        owner_id, _ = take_lease(
            directory, name, workspace_file(config, name), node=DELETING, host=None, ttl=60.0
        )
        size = remove_workspace_files(config, name)
        directory.remove(name, owner_id)
    finally:
        directory.close()
    return size
