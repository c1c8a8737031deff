"""``OwnerExecContext``: a pool worker's :class:`~computer.runtime.ExecContext`, one Ray call per operation.

Each operation is forwarded whole to the owner actor of the workspace (see
:class:`~computer.actors._pool_callbacks.PoolCallbacks`), so a shell run costs at most two calls (push,
pull) and a python ``workspace`` call one. fs errors come back as the owner raised them (same class,
errno, path).

A run may arrive with a :class:`Prefetched` push: the owner computed it for the mirror revision this
worker reported after its last run of the workspace. When the mirror the run took is at exactly that
revision (same root, same limits), ``sync_push`` answers with it and the push call is saved; otherwise
it asks the owner as usual. The owner learns each mirror's revision from the run's deferred pull (see
:class:`~computer.runtime._backend.DeferringContext`), which it applies itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Any

from ..runtime import PullResult, SyncLimits, SyncPull, SyncPush, decode_sync, encode_sync
from .wire import Reply, unwrap

__all__ = ["MirrorSynced", "OwnerClosingError", "OwnerExecContext", "Prefetched"]


@dataclass(frozen=True, slots=True)
class MirrorSynced:
    """Where a run left its worker's mirror: at ``rev`` of the workspace below ``root``, under ``limits``."""

    rev: int
    root: str
    limits: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Prefetched:
    """A push the owner computed ahead: what a mirror at ``mirror`` needs, encoded."""

    mirror: MirrorSynced
    push: bytes


class OwnerClosingError(RuntimeError):
    """The owner is closing (hibernating or taken over) and did not run the operation."""


class OwnerExecContext:
    """Forwards a backend's workspace calls to ``owner`` (an owner actor handle)."""

    def __init__(
        self,
        owner: Any,
        workspace_id: str,
        prefetched: Prefetched | None = None,
        outcomes: dict[str, tuple[int, list[str]]] | None = None,
        *,
        announced: bool = True,
    ) -> None:
        self._owner = owner
        # Calls wait until the run was announced to the dispatcher (see ``PoolWorker.run``); a call
        # that waits sets ``wanted``, which makes the worker announce the run.
        self._announced = asyncio.Event()
        self.wanted = asyncio.Event()
        if announced:
            self._announced.set()
        self._workspace_id = workspace_id
        self._prefetched = prefetched
        self.prefetch_used = False
        self.calls = 0  # calls made back to the owner
        # Runs of this worker whose pulls the owner applied: run id -> (rev, skipped). With it the
        # shell hands its pull to the owner in the exit event (see ``DeferringContext``).
        self._outcomes = outcomes
        self.defers_pull = outcomes is not None

    def pull_outcome(self, run: str) -> tuple[int, list[str]] | None:
        return self._outcomes.get(run) if self._outcomes else None

    @property
    def workspace_id(self) -> str:
        return self._workspace_id

    @property
    def announced(self) -> bool:
        return self._announced.is_set()

    def announce(self) -> None:
        """The dispatcher was told the run started: calls to the owner may go out now."""
        self._announced.set()

    async def _call(self, method: str, *args: Any) -> Any:
        if not self._announced.is_set():
            self.wanted.set()
            await self._announced.wait()
        self.calls += 1
        reply: Reply = await getattr(self._owner, method).remote(*args)
        if reply[0] == "moved":
            raise OwnerClosingError(f"the owner of workspace {reply[1]['name']} is closing")
        return unwrap(reply)

    async def fs_call(self, op: str, args: dict[str, Any]) -> Any:
        return await self._call("pool_fs_call", op, args)

    async def sync_push(self, mirror_rev: int | None, root: str, limits: SyncLimits) -> SyncPush:
        wanted = dataclasses.asdict(limits)
        ahead, self._prefetched = self._prefetched, None  # good for the first push only
        if (
            ahead is not None
            and mirror_rev is not None
            and ahead.mirror == MirrorSynced(mirror_rev, root, wanted)
        ):
            self.prefetch_used = True
            return decode_sync(SyncPush, ahead.push)
        data = await self._call("pool_sync_push", mirror_rev, root, wanted)
        return decode_sync(SyncPush, data)

    async def sync_pull(self, pull: SyncPull, base_rev: int) -> PullResult:
        result: PullResult = await self._call("pool_sync_pull", encode_sync(pull), base_rev)
        return result

    async def share(self, path: str, expires_after: float) -> str:
        return str(await self._call("pool_share", path, expires_after))
