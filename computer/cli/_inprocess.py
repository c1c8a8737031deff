"""A workspace owned by the command's own process: no Ray, answers in a fraction of a second.

With no cluster named (no ``--address``, no ``RAY_ADDRESS``) ``tool``, ``shell``, ``ls``, ``log`` and
``mcp`` open the workspace's file here, as an owner like any other: they take the directory lease
(a new fencing epoch, above every epoch the file has seen) and open the file with it. A cluster owner
created later takes the lease over with a higher epoch, and from that moment this process's writes
are refused (EROFS); its lease renewal fails and it says so on stderr. At the end the lease is
released (the workspace is asleep, ``closed`` in the directory).

A workspace whose lease another owner holds (awake on a Ray node, or in another command's process)
is not taken over: the command stops with a message saying where it is awake and how to reach it. A
command's process that was killed before it released the lease holds nothing: its lease is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import sys
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ._context import CliError, data_dir_error

if TYPE_CHECKING:
    from ..actors.directory import Directory
    from ..config import Settings
    from ..runtime import Backend
    from ..surface import AssetsSurface
    from ..workspace import Workspace

__all__ = ["SharePublisher", "background_advice", "in_process_workspace"]

log = logging.getLogger(__name__)

BACKENDS = ("shell", "python")  # the exec backends of a workspace opened in process, in this order
# Which of them to build: all (True), none (False), or those named (in BACKENDS' order).
Backends = bool | tuple[str, ...]


@contextlib.asynccontextmanager
async def in_process_workspace(
    config: Settings, name: str, *, backends: Backends, assets: bool, live: bool = True
) -> AsyncIterator[Workspace]:
    """Own workspace ``name`` in this process for the duration of the block.

    ``backends``: configure the ``shell`` and ``python`` exec backends (True), none (False), or only
    those named (building them costs ~0.2 s each, so a command that runs no exec goes without, and
    one shell run without python); ``assets``: the share-link publisher.
    ``live``: the backends' live sandboxes (runs share one sandbox whose processes outlive a run).
    Decision: a command that runs one exec and ends (``tool NAME exec``, ``shell -c``) goes without
    (``live=False``, a sandbox per run): what a live sandbox adds, processes that outlive the run,
    ends with the command anyway, and starting and ending one cost ~0.15 s more than a sandbox per run.
    Such a workspace serves that one run, so its backends start nothing ahead for a next one (the
    shell's standby sandbox, the python backend's next guest: each was started after the run and
    discarded unused at the close, ~40 ms).
    Not done: staging the python backend's interpreter (~0.2 s of links) in a thread from the moment
    the backend is built rather than at the run's spawn. It overlapped with the command's own Python
    work, which holds the GIL: both went slower, the command no sooner (11 runs each, median).
    """
    import sqlite3

    from ..actors import awake, awake_where, owner_file, process_node, take_lease
    from ..actors.directory import open_directory
    from ..actors.naming import workspace_file

    try:
        path = workspace_file(config, name)
    except OSError as exc:
        raise CliError(f"cannot open workspace {name!r}: {exc.strerror}", code=2) from None
    try:
        directory = open_directory(config)
    except (OSError, sqlite3.Error) as exc:  # a data directory that is a file, /proc, not writable
        raise data_dir_error(config.data_dir, exc) from None
    try:
        record = directory.get(name)
        if record is not None and awake(record):
            if (record.node or "").startswith("process:"):  # another command like this one, no cluster
                reach = "wait until that command ends (it releases the workspace)"
            else:
                reach = (
                    "reach it through its cluster (--address HOST:PORT, or RAY_ADDRESS), or wait until "
                    "it is asleep (`computer ls` shows which)"
                )
            raise CliError(
                f"workspace {name!r} is awake {awake_where(record)}: another owner holds it; {reach}"
            )
        ttl = config.lock_lease
        try:
            # A known workspace whose file is missing is an error, never a new empty one (as for an
            # owner of a cluster); a new name's file is made before its record.
            owner_file(directory, name, path, host=None)
            owner_id, epoch = take_lease(directory, name, path, node=process_node(), host=None, ttl=ttl)
        except OSError as exc:
            raise CliError(f"cannot open workspace {name!r}: {exc}") from None
        try:
            workspace = _open(config, name, str(path), epoch, backends=backends, assets=assets, live=live)
        except BaseException as exc:
            directory.release_lease(name, owner_id, epoch)
            if isinstance(exc, OSError):
                raise CliError(f"cannot open workspace {name!r}: {exc}") from None
            raise
        renewal = asyncio.create_task(_keep_lease(directory, name, owner_id, epoch, ttl))
        try:
            yield workspace
        finally:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal
            try:
                await workspace.close()
            finally:
                directory.release_lease(name, owner_id, epoch)
    finally:
        directory.close()


def _open(
    config: Settings, name: str, path: str, epoch: int, *, backends: Backends, assets: bool, live: bool
) -> Workspace:
    from ..workspace import Workspace

    names = BACKENDS if backends is True else () if backends is False else backends
    chosen: list[Backend] = []
    if "shell" in names:
        from ..runtime import ShellBackend

        if live:
            chosen.append(ShellBackend(live=live))
        else:
            shell = ShellBackend(live=False, warm_sandboxes=0)
            # A run that leaves a server running in the background says it ended with the command
            # (``runtime/_leftovers``), and this says how to keep one.
            shell.background_advice = background_advice(name)
            chosen.append(shell)
    if "python" in names:
        from ..runtime import PythonBackend

        python = PythonBackend(live=live) if live else PythonBackend(live=False, warm_guests=0)
        python.background_advice = "" if live else background_advice(name, "python")  # as the shell's
        chosen.append(python)
    workspace = Workspace(path, backends=chosen, fence=epoch, max_bytes=config.max_workspace_bytes)
    if assets:
        workspace.assets = SharePublisher(workspace)
    return workspace


def background_advice(name: str, backend: str = "shell") -> str:
    """How a user of this command keeps a background process of ``backend``'s runs running between
    calls. Decision: ``computer shell`` is advised for the shell backend only: its prompt runs every
    command on the shell backend, so a python run's process could not be kept there (the advice
    named it for both); an MCP session's exec takes ``backend`` and its ``processes`` tool lists
    either backend's, as ``computer ps --backend`` does on a cluster."""
    quoted = shlex.quote(name)
    if backend == "shell":
        return (
            f"to keep one running between calls, make them in one process (`computer shell {quoted}`, "
            f"`computer mcp {quoted} --processes`) or through a cluster (--address), where it stays up "
            f"(`computer ps {quoted}`)"
        )
    return (
        f"to keep one running between calls, make them in one process (`computer mcp {quoted} "
        f"--processes`, exec with backend {backend}; `computer shell` runs the shell backend only) or "
        f"through a cluster (--address), where it stays up (`computer ps {quoted} --backend {backend}`)"
    )


class SharePublisher:
    """The workspace's share-link publisher (``Workspace(assets=True)``'s), made at its first use.

    Decision: ``computer.assets`` loads the Redis client whether or not Redis is configured, ~0.2 s
    of CPU, which ``mcp`` paid before it could answer ``initialize`` although most sessions never
    share a link, and ``tool NAME TOOL --help`` for a publisher it never calls. The first ``share``
    pays it instead, with the same store and base URL."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._assets: AssetsSurface | None = None

    async def share(
        self,
        path: str,
        *,
        expires_after: float = 3600.0,
        prefix: str | None = None,
        content_type: str | None = None,
        filename: str | None = None,
        disposition: str = "inline",
    ) -> str:
        if self._assets is None:
            from ..assets import open_assets

            self._assets = open_assets(True, self._workspace)
        return await self._assets.share(
            path,
            expires_after=expires_after,
            prefix=prefix,
            content_type=content_type,
            filename=filename,
            disposition=disposition,
        )


async def _keep_lease(directory: Directory, name: str, owner_id: str, epoch: int, ttl: float) -> None:
    """Renew the lease every third of its term; say once on stderr when another owner took it over."""
    while True:
        await asyncio.sleep(max(ttl / 3.0, 0.05))
        try:
            kept = await asyncio.to_thread(
                directory.renew_lease, name, owner_id, epoch, ttl, last_active=time.time()
            )
        except Exception as exc:  # the directory is unreachable for now: the next renewal retries
            log.warning("renewing the lease of workspace %s failed: %s", name, exc)
            continue
        if not kept:
            print(
                f"computer: workspace {name!r} was taken over by another owner (a cluster owner opened it); "
                "this command's writes are refused from now on",
                file=sys.stderr,
            )
            return
