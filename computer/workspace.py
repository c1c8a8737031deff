"""The owner object: one durable filesystem plus its runtime and optional assets publisher.

``Workspace`` is the embedded default (everything in-process, no Ray). Inside a cluster the same
object lives in exactly one owner actor (see ``computer.actors``), and other processes reach it through
``computer.get_workspace``.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .storage import FileSystem
from .storage.filesystem import GARBAGE_DELAY

if TYPE_CHECKING:
    from .assets import AssetStore
    from .runtime import Backend, OutputOptions
    from .surface import AssetsSurface

__all__ = ["Workspace"]

log = logging.getLogger(__name__)


class Workspace:
    """One workspace: ``fs`` (SQLite VFS), ``locks``, ``runtime`` (exec backends), ``assets`` and ``audit``.

    ``path=None`` is a private in-memory store; a path is one SQLite file (created when missing).
    ``assets=None`` (or False) means no publisher; ``True`` uses the configured default store; an object
    with a ``share`` coroutine (an ``AssetsSurface``) is used as given, an ``AssetStore`` with the
    configured base URL. ``output`` is the default output policy of every run (``OutputOptions``, a
    dict of its fields to override, ``False``: keep everything in memory; see ``Runtime``).
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        backends: Sequence[Backend] = (),
        assets: bool | AssetsSurface | AssetStore | None = None,
        output: bool | dict[str, Any] | OutputOptions | None = None,
        fence: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        from .config import settings
        from .runtime import Runtime, raise_descriptor_limit

        self.path = path
        if path is not None:
            # Each open file-backed workspace holds 3 descriptors (the file, its WAL and shared memory):
            # under a login shell's ``ulimit -n 1024`` a process refused its 339th (it said EIO) while
            # its hard limit allowed far more; raised as a live sandbox raises it (``_limits.py``).
            raise_descriptor_limit()
        # The garbage collection this workspace scheduled: (its loop, the timer); see _garbage_ready.
        self._garbage: tuple[asyncio.AbstractEventLoop, asyncio.TimerHandle] | None = None
        # fence: the owner's epoch from the directory (a stale owner's writes fail with EROFS);
        # max_bytes: the per-workspace size limit (ENOSPC beyond). Both pass through to storage.
        self.fs = FileSystem.open(
            path, fence=fence, max_bytes=max_bytes, garbage_timer=False, on_garbage=self._garbage_ready
        )
        self.id: str = self.fs.id
        self.locks = self.fs.locks
        # The audit log (SPEC 10): tool calls, exec runs and share links, kept in the same file.
        self.audit = self.fs.audit
        self.audit.configure(max_records=settings().audit_max_records, max_bytes=settings().audit_max_bytes)
        self.audit.writable = self.audit.writable and settings().audit
        self.runtime = Runtime(self, list(backends), output=output)
        self.assets: AssetsSurface | None = None
        if assets is not None and assets is not False:
            from .assets import open_assets

            self.assets = open_assets(assets, self)
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (the dashboard no longer shows the workspace awake here)."""
        return self._closed

    async def close(self) -> None:
        """Stop running executions and close the SQLite file. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.runtime.close()
        if self._garbage is not None:
            self._garbage[1].cancel()
            self._garbage = None
        self.fs.close()  # frees what garbage still waits

    def _garbage_ready(self) -> bool:
        """A batch of freed small chunks is ready (said inside the mutation that made it): collect it in
        a transaction of its own ``GARBAGE_DELAY`` from now, on this event loop, so the mutation does not
        pay for it (a pull removing 1,000 files spent 1.3 ms of its transaction on them). Without a
        running loop: False, the store frees it in the mutation."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._garbage is not None:
            if self._garbage[0] is loop:
                return True  # already scheduled
            self._garbage[1].cancel()  # set on a loop that has ended (asyncio.run) or another one
        self._garbage = (loop, loop.call_later(GARBAGE_DELAY, self._collect_garbage))
        return True

    def _collect_garbage(self) -> None:
        self._garbage = None
        try:
            self.fs.collect_garbage()  # a no-op inside a transaction: the next batch schedules again
        except (sqlite3.Error, OSError) as exc:
            log.warning("freeing unreferenced chunks of %s failed (retried later): %r", self.id, exc)

    async def __aenter__(self) -> Workspace:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Workspace(path={self.path!r}, id={self.id!r})"
