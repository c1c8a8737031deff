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
from typing import Any

from ..config import Settings
from ._host import WorkspaceHost

__all__ = ["PROBE_GROUP", "OwnerActor"]

log = logging.getLogger(__name__)

# The concurrency group ``workspace_actor`` gives a managed owner for its clients' probes (its own
# thread, loop and slot): a probe of the default group waits for one of the owner's
# ``max_concurrency`` slots, all of which calls that wait (lock requests, streams, runs) may hold,
# and such a busy owner looked stopped (see ``computer/client/_connection.py``).
PROBE_GROUP = "probe"


class OwnerActor(WorkspaceHost):
    """A :class:`WorkspaceHost` that clients may re-create by name, and that hibernates when idle."""

    managed = True

    def __init__(
        self, name: str, config: Settings | dict[str, Any] | None = None, *, probe_group: str | None = None
    ) -> None:
        super().__init__(name, config=config)
        self.probe_group = probe_group  # created with it (``PROBE_GROUP``): clients probe there
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._background.append(loop.create_task(self._hibernate_when_idle()))

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
