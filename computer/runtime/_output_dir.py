"""The directory saved and background logs go to (``/.computer/output``) as a directory of its own.

A python program's ``workspace`` calls reached that path (refused now: ``_protected.call_guard``),
and the owner's API still does: a file put there, or a link a program made in its mirror (``ln -s
/workspace/src lnk``) renamed there. Before, a file stopped every
log from being saved (a saved log "not-saved" with no reason, a live sandbox's background logs
retried at every tick and lost at its end), and a link led the logs, and ``prune_logs``'s removals,
to where it pointed: the user's own ``*.log`` files in ``/workspace/src`` were removed as old logs.
Now whatever is there in place of a directory is moved aside to ``<dir>.moved-<hex>`` (kept, under
a name that says what happened), the directory is made again, and a warning says so; pruning never
lists or removes anything through a link.
"""

from __future__ import annotations

import errno
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from ._protected import OWN

__all__ = ["DIRECTORY", "FsCall", "fs_caller", "make_output_dir", "own_caller", "planted"]

log = logging.getLogger("computer.runtime")

# An ``ExecContext.fs_call``-shaped caller: an fs operation by name and its arguments.
FsCall = Callable[[str, dict[str, Any]], Awaitable[Any]]

DIRECTORY = "a directory"


def fs_caller(fs: Any) -> FsCall:
    """``fs``'s methods as an :data:`FsCall` (the runtime's own store)."""

    async def call(op: str, args: dict[str, Any]) -> Any:
        return await getattr(fs, op)(**args)

    return call


def own_caller(ctx: Any) -> FsCall:
    """``ctx.fs_call`` as the runtime's own calls (``_protected.OWN``): they may change the logs'
    directory, which a program's calls may not."""

    async def call(op: str, args: dict[str, Any]) -> Any:
        return await ctx.fs_call(OWN + op, args)

    return call


async def planted(call: FsCall, directory: str) -> str | None:
    """What is at ``directory``: :data:`DIRECTORY`, None when nothing is, else what is there in its
    place ("a symlink to '/workspace/src'", "a file"). Nothing is followed at its last segment."""
    try:
        target = await call("readlink", {"path": directory})
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # missing (ENOENT), or below a file (ENOTDIR): nothing there
            return None
    else:
        return f"a symlink to {target!r}"
    try:
        st = await call("stat", {"path": directory})
    except FileNotFoundError:
        return None
    is_dir = st["is_directory"] if isinstance(st, dict) else st.is_directory
    return DIRECTORY if is_dir else "a file"


async def make_output_dir(call: FsCall, directory: str) -> str | None:
    """Make ``directory`` a directory of its own (with its parents): what is there in its place is
    moved aside first. Returns what was said of it (also logged), None when nothing was in the way."""
    there = await planted(call, directory)
    if there == DIRECTORY:
        return None
    note = None
    if there is not None:
        aside = f"{directory}.moved-{secrets.token_hex(4)}"
        await call("rename", {"src": directory, "dst": aside})
        note = f"{directory} was {there}, not a directory: moved to {aside}, and the directory made again"
        log.warning("%s", note)
    await call("mkdir", {"path": directory, "recursive": True})
    return note
