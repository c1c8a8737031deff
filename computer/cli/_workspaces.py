"""Opening one workspace for a CLI command, with clear errors and a clean exit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ._context import CliError, GlobalOptions, ray_session

__all__ = ["open_workspace"]


@asynccontextmanager
async def open_workspace(options: GlobalOptions, name: str) -> AsyncIterator[Any]:
    """A client of workspace ``name`` over Ray (its owner is created on first use).

    When Ray was started by this command, the owner is closed before Ray stops, so the directory
    records the workspace as closed rather than as an owner that vanished.
    """
    import computer

    async with ray_session(options):
        try:
            client = await computer.get_workspace(name)
        except OSError as exc:  # a bad name (EINVAL) or an unreachable owner (EAGAIN)
            raise CliError(f"cannot open workspace {name!r}: {exc.strerror or exc}") from None
        try:
            yield client
        finally:
            await client.close()
            if options.local:
                await client.handle.close_workspace.remote()
