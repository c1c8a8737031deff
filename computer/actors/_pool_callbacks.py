"""``PoolCallbacks``: the owner RPCs a pool worker calls while it runs one of the owner's executions.

They are the owner-side half of :class:`~computer.actors._pool_context.OwnerExecContext`: each is one
whole :class:`~computer.runtime.ExecContext` operation, answered by the workspace runtime's own
(local) context next to the SQLite file. Like every owner RPC they answer with a
:mod:`~computer.actors.wire` reply and never raise; sync payloads travel lz4-compressed msgpack.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..runtime import SyncLimits, SyncPull, decode_sync, encode_sync
from .wire import Reply

if TYPE_CHECKING:
    from ..runtime import ExecContext
    from ..workspace import Workspace

__all__ = ["PoolCallbacks", "owner_token", "unboxed"]


def unboxed(value: Any) -> Any:
    """A call's argument as the owner's code takes it: a buffer a worker sent out of band
    (``_pool_context.boxed``; Ray hands it over as its own read-only buffer type) as a
    ``memoryview`` of it, in a dict's values and a list's pieces too; anything else as it came."""
    if isinstance(value, dict):
        return {k: unboxed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unboxed(v) for v in value]
    if value is None or isinstance(value, str | bytes | bytearray | memoryview | int | float | tuple):
        return value
    try:
        return memoryview(value)
    except TypeError:
        return value


def owner_token() -> str:
    """Who this owner process is; a restarted owner (same actor, new process) has another token."""
    import ray

    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"
    return f"{node}:{os.getpid()}"


class PoolCallbacks:
    """Mixin of :class:`~computer.actors.WorkspaceHost`: ``fs_call``, ``sync_push``, ``sync_pull``, ``share``.

    Each is served by the host's ``_serve`` (counted in the host's ``rpcs``, errors as replies), like
    every other owner RPC, but the file and sync calls are served while the owner closes too (until
    its file is closed): the close ends the workspace's live sandboxes, and what their processes
    wrote last is pulled then (answered "moved", it was lost: a hosted workspace hibernating under
    a background writer lost its last 1.4 s of writes). The sync calls count as use only while a run is
    in progress: a live sandbox's background processes alone do not keep the workspace awake.
    """

    if TYPE_CHECKING:
        workspace: Workspace

        async def _serve(
            self, work: Callable[[], Awaitable[Any]], *, background: bool = False, closing: bool = False
        ) -> Reply: ...

    async def pool_ping(self) -> str:
        """The :func:`owner_token` of this process: a worker checks its runs' owner is still there."""
        return owner_token()

    def _exec_context(self) -> ExecContext:
        return self.workspace.runtime.context

    async def pool_fs_call(self, op: str, args: dict[str, Any]) -> Reply:
        """One fs operation of the python backend's ``workspace`` module; results as plain values."""
        return await self._serve(lambda: self._exec_context().fs_call(op, unboxed(args)), closing=True)

    async def pool_sync_push(self, mirror_rev: int | None, root: str, limits: dict[str, Any]) -> Reply:
        """What a shell mirror at ``mirror_rev`` needs (``limits``: the fields of a ``SyncLimits``), encoded."""

        async def push() -> bytes:
            return encode_sync(await self._exec_context().sync_push(mirror_rev, root, SyncLimits(**limits)))

        return await self._serve(push, background=True, closing=True)

    async def pool_sync_pull(self, pull: bytes, base_rev: int) -> Reply:
        """Apply a run's changes (an encoded :class:`SyncPull`) in one transaction; a ``BatchResult``."""
        return await self._serve(
            lambda: self._exec_context().sync_pull(decode_sync(SyncPull, unboxed(pull)), base_rev),
            background=True,
            closing=True,
        )

    async def pool_share(self, path: str, expires_after: float) -> Reply:
        """Publish a workspace file for a running program; its URL."""
        return await self._serve(lambda: self._exec_context().share(path, expires_after))
