"""``OwnerExecContext``: a pool worker's :class:`~computer.runtime.ExecContext`, one Ray call per operation.

Each operation is forwarded whole to the owner actor of the workspace (see
:class:`~computer.actors._pool_callbacks.PoolCallbacks`), so a shell run costs two calls (push, pull)
and a python ``workspace`` call one. fs errors come back as the owner raised them (same class, errno,
path).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..runtime._backend import SyncLimits, SyncPull, SyncPush
from ..runtime._codec import decode_sync, encode_sync
from ..storage.types import BatchResult
from ._wire import Reply, unwrap

__all__ = ["OwnerClosingError", "OwnerExecContext"]


class OwnerClosingError(RuntimeError):
    """The owner is closing (hibernating or taken over) and did not run the operation."""


class OwnerExecContext:
    """Forwards a backend's workspace calls to ``owner`` (an owner actor handle)."""

    def __init__(self, owner: Any, workspace_id: str) -> None:
        self._owner = owner
        self._workspace_id = workspace_id

    @property
    def workspace_id(self) -> str:
        return self._workspace_id

    async def _call(self, method: str, *args: Any) -> Any:
        reply: Reply = await getattr(self._owner, method).remote(*args)
        if reply[0] == "moved":
            raise OwnerClosingError(f"the owner of workspace {reply[1]['name']} is closing")
        return unwrap(reply)

    async def fs_call(self, op: str, args: dict[str, Any]) -> Any:
        return await self._call("pool_fs_call", op, args)

    async def sync_push(self, mirror_rev: int | None, root: str, limits: SyncLimits) -> SyncPush:
        data = await self._call("pool_sync_push", mirror_rev, root, dataclasses.asdict(limits))
        return decode_sync(SyncPush, data)

    async def sync_pull(self, pull: SyncPull, base_rev: int) -> BatchResult:
        result: BatchResult = await self._call("pool_sync_pull", encode_sync(pull), base_rev)
        return result

    async def share(self, path: str, expires_after: float) -> str:
        return str(await self._call("pool_share", path, expires_after))
