"""``get_workspace``: open a client from a workspace name, an owner handle or a ``WorkspaceHost`` handle."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from types import TracebackType
from typing import Any

from ray.exceptions import RayActorError

from ..actors import WorkspaceUnavailableError, ensure_ray, managed_name, workspace_actor
from ..actors.naming import check_name
from ._connection import Connection
from ._workspace import WorkspaceClient

__all__ = ["WorkspaceOpening", "get_workspace"]


class WorkspaceOpening(Coroutine[Any, Any, WorkspaceClient]):
    """What ``get_workspace`` returns: await it for a client, or use it as ``async with``; it is also
    a coroutine, so synchronous code can write ``ws = asyncio.run(get_workspace(name))`` (that
    raised "a coroutine was expected") and ``asyncio.create_task`` takes it."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self._client: WorkspaceClient | None = None
        self._driven: Generator[Any, None, WorkspaceClient] | None = None  # when run as a coroutine

    def __await__(self) -> Generator[Any, None, WorkspaceClient]:
        return _open(self._target).__await__()

    def _steps(self) -> Generator[Any, None, WorkspaceClient]:
        if self._driven is None:  # made at the first step: an unused opening leaves no unawaited coroutine
            self._driven = self.__await__()
        return self._driven

    def send(self, value: Any) -> Any:
        return self._steps().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        return self._steps().throw(typ, val, tb)

    def close(self) -> None:
        if self._driven is not None:
            self._driven.close()

    async def __aenter__(self) -> WorkspaceClient:
        self._client = await _open(self._target)
        return self._client

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._client is not None:
            await self._client.close()


def get_workspace(target: Any) -> WorkspaceOpening:
    """A client of workspace ``target``: a name (its owner is created on first use), an owner handle
    from :func:`computer.workspace_actor`, or the handle of a user actor subclassing ``WorkspaceHost``.

    Works from the driver, from Ray tasks and from other actors (it needs a running event loop).
    """
    if not isinstance(target, str) and not hasattr(target, "describe"):
        raise TypeError(
            f"get_workspace expects a workspace name or an actor handle, not {type(target).__name__}"
        )
    return WorkspaceOpening(target)


async def _open(target: Any) -> WorkspaceClient:
    if isinstance(target, str):
        name = check_name(target)
        ensure_ray()
        handle = await asyncio.to_thread(workspace_actor, name)
        conn = Connection(handle, name=name, managed=True)
    else:
        conn = Connection(target, name=None, managed=False)
    try:
        info = await conn.request("describe", retry_safe=True)
    except WorkspaceUnavailableError as exc:
        if isinstance(target, str) or not isinstance(exc.__cause__, RayActorError):
            raise
        # The handle's process is gone. A managed owner's (``workspace_actor``'s handle, passed to
        # workers, its owner hibernated and exited) is woken by name, as ``get_workspace(name)`` does;
        # before, it failed "its owner died". A user's ``WorkspaceHost`` actor is not ours to re-create.
        named = await asyncio.to_thread(managed_name, target)
        if named is None:
            raise
        return await _open(named)
    conn.learn(info)
    return WorkspaceClient(conn, info)
