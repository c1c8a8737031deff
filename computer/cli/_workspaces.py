"""Opening one workspace for a CLI command: in this process, or through the cluster named."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from . import _gc
from ._context import CliError, GlobalOptions, local_settings, ray_session

__all__ = ["made_here", "new_workspace_note", "open_workspace"]


def made_here(options: GlobalOptions, name: str) -> bool:
    """Whether this command, working in process, makes workspace ``name`` (it has no file yet).

    Decision: a workspace is made on first use by any command, and a misspelt name (``note`` for
    ``notes``) answered a read with "No such file", as if files were lost: ``tool`` and ``shell -c``
    then say on stderr that the workspace is new (``new_workspace_note``). Through a cluster
    (``--address``) never: whether the owner made the file is not known here."""
    if not options.local:
        return False
    from ..actors.naming import workspace_file

    try:
        return not workspace_file(local_settings(options), name).exists()
    except Exception:  # a bad name or settings: opening the workspace says what is wrong
        return False


def new_workspace_note(name: str) -> str:
    """The stderr line of a command that made workspace ``name`` and read from it (or failed)."""
    import shlex

    return (
        f"computer: workspace {name!r} is new: this command made it, empty (`computer ls` lists "
        f"the others; `computer rm {shlex.quote(name)}` removes it)"
    )


@asynccontextmanager
async def open_workspace(
    options: GlobalOptions,
    name: str,
    *,
    backends: bool | tuple[str, ...] = True,
    assets: bool = True,
    live: bool = True,
) -> AsyncIterator[Any]:
    """The workspace ``name`` for one command (created on first use).

    No cluster named: its owner is this process (see ``_inprocess``); ``backends`` and ``assets`` say
    whether the command needs the exec backends (all, or only those named) and the share-link
    publisher (both cost start-up time), ``live`` whether its backends keep live sandboxes (not for one run). A cluster named: a
    client of its owner actor there, with whatever that owner offers.
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 in argv: the stores cannot hold the name
        raise CliError(f"cannot open workspace {name!r}: workspace name is not valid UTF-8", code=2) from None
    if options.local:
        from ._inprocess import in_process_workspace

        async with in_process_workspace(
            local_settings(options), name, backends=backends, assets=assets, live=live
        ) as workspace:
            _gc.resume()
            yield workspace
        return

    import computer

    async with ray_session(options):
        try:
            client = await computer.get_workspace(name)
        except OSError as exc:  # a bad name (EINVAL) or an unreachable owner (EAGAIN)
            raise CliError(f"cannot open workspace {name!r}: {exc.strerror or exc}") from None
        _gc.resume()
        try:
            yield client
        finally:
            await client.close()
