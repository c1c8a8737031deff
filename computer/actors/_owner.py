"""``OwnerActor``: the managed owner of one workspace (the durable object), with hibernation.

Created by :func:`computer.workspace_actor` as the detached named actor
``computer:ws:<data dir hash>:<name>`` (see :func:`~computer.actors.naming.actor_name`). When
nothing has used it for ``hibernate_after`` seconds (no call, stream, upload, held lock or running
execution), it stops answering (calls get MOVED, so clients re-resolve), closes its workspace, marks
itself hibernating in the directory and exits; the file stays, and the next call re-creates the owner.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from ..config import Settings
from ._host import WorkspaceHost
from .wire import moved

__all__ = ["CONTROL_GROUP", "CONTROL_METHODS", "CONTROL_SLOTS", "PROBE_GROUP", "OwnerActor"]

log = logging.getLogger(__name__)

# The concurrency group ``workspace_actor`` gives a managed owner for its clients' probes (its own
# thread, loop and slot): a probe of the default group waits for one of the owner's
# ``max_concurrency`` slots, all of which calls that wait (lock requests, streams, runs) may hold,
# and such a busy owner looked stopped (see ``computer/client/_connection.py``).
PROBE_GROUP = "probe"
# The concurrency group for the lock calls that never wait (release, renew, cancel): a lock holder's
# release queued behind the lock requests it would wake when they held every slot of the default
# group, until its lease ran out (``tests/reliability/test_saturated_owner.py``). The calls run on the
# owner's own loop all the same (a group has a loop and thread of its own: they hop over).
CONTROL_GROUP = "control"
CONTROL_SLOTS = 64
CONTROL_METHODS = frozenset({"lock_release", "lock_renew", "lock_cancel", "lock_release_holder"})

T = TypeVar("T")


class OwnerActor(WorkspaceHost):
    """A :class:`WorkspaceHost` that clients may re-create by name, and that hibernates when idle."""

    managed = True

    def __init__(
        self,
        name: str,
        config: Settings | dict[str, Any] | None = None,
        *,
        probe_group: str | None = None,
        control_group: str | None = None,
    ) -> None:
        super().__init__(name, config=config)
        self.probe_group = probe_group  # created with it (``PROBE_GROUP``): clients probe there
        self.control_group = control_group  # and ``CONTROL_GROUP``: clients release locks there
        self._own_loop: asyncio.AbstractEventLoop | None = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._own_loop = loop
        self._background.append(loop.create_task(self._hibernate_when_idle()))

    async def _on_own_loop(self, call: Awaitable[T]) -> T:
        """Await ``call`` on the owner's loop (a call of ``CONTROL_GROUP`` arrives on that group's)."""
        own = self._own_loop
        if own is None or own is asyncio.get_running_loop():
            return await call
        try:
            handed = asyncio.run_coroutine_threadsafe(_awaited(call), own)
        except RuntimeError:  # its loop closed: the owner is exiting and did not run the call
            close = getattr(call, "close", None)
            if close is not None:
                close()  # never awaited: no warning
            return moved(self.name, True)  # type: ignore[return-value]
        return await asyncio.wrap_future(handed)

    async def lock_cancel(self, holder: str) -> Any:
        return await self._on_own_loop(super().lock_cancel(holder))

    async def lock_renew(self, lease_id: str) -> Any:
        return await self._on_own_loop(super().lock_renew(lease_id))

    async def lock_release(self, lease_id: str) -> Any:
        return await self._on_own_loop(super().lock_release(lease_id))

    async def lock_release_holder(self, holder: str) -> Any:
        return await self._on_own_loop(super().lock_release_holder(holder))

    async def _hibernate_when_idle(self) -> None:
        after = self.config.hibernate_after
        interval = min(max(after / 4.0, 0.05), 5.0)
        while not self._closing:
            await asyncio.sleep(interval)
            if self._busy() or time.time() - self._last_active < after:
                continue
            log.info("workspace %s idle for %.1f s: hibernating", self.name, after)
            await self._leave(hibernating=True)
            return

    async def _on_fenced(self) -> None:
        await self._leave(hibernating=False, release=False)

    async def _leave(self, *, hibernating: bool, release: bool = True) -> None:
        """Close and exit the actor process (the name becomes free for the next owner)."""
        import ray

        await self._close_quietly(hibernating=hibernating, release=release)
        # exit_actor must run inside an actor task, not a background coroutine: ask ourselves.
        ray.get_runtime_context().current_actor._exit.remote()

    async def _close_quietly(self, *, hibernating: bool, release: bool) -> None:
        """Close the workspace, releasing the lease unless fenced (a newer owner holds it); log failures."""
        try:
            if release:
                await self._shutdown(hibernating=hibernating)
            else:
                self._closing = True
                await self.workspace.close()
        except Exception:
            log.exception("closing workspace %s failed", self.name)

    async def _exit(self) -> None:
        import ray

        ray.actor.exit_actor()  # type: ignore[no-untyped-call]


async def _awaited(call: Awaitable[T]) -> T:
    return await call
