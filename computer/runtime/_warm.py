"""The shell backend's warm sandboxes: started ahead for a mirror's next run, so a run after a pause
(an agent's model turn) finds one ready. A warm sandbox is a standby with its assets bridge directory
(a sandbox per call) or a live sandbox's init already running (``Launched``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from pathlib import Path

from ._assets_bridge import AssetsBridge
from ._live_launch import Launched
from ._mirror import Mirror
from ._sandbox import Standby, in_background, run_to_completion

__all__ = [
    "PREPARE_DELAY",
    "STANDBYS_BACK_TO_BACK",
    "Prepared",
    "Spares",
    "Warm",
    "discard_prepared",
    "discard_standby",
    "end_standbys",
]

log = logging.getLogger(__name__)


# What a warm sandbox holds: a standby and its bridge directory (a sandbox per call), or a sandbox
# whose init already runs (live sandboxes).
Prepared = tuple[Standby, Path] | Launched


async def discard_prepared(prepared: Prepared) -> None:
    if isinstance(prepared, Launched):
        await prepared.discard()
    else:
        await discard_standby(*prepared)


async def discard_standby(standby: Standby, bridge_dir: Path) -> None:
    await standby.discard()
    await asyncio.to_thread(AssetsBridge.remove_directory, bridge_dir)


# Seconds between the end of a run and the start of its mirror's next standby.
PREPARE_DELAY = 0.002

# Standbys kept for a mirror whose runs come back to back (one otherwise).
STANDBYS_BACK_TO_BACK = 2


class Spares:
    """The standby sandboxes prepared for one mirror, oldest first (the mirror's ``standby``)."""

    def __init__(self) -> None:
        self.items: list[Warm] = []
        # The last run found a standby still starting: runs come back to back.
        self.busy = False

    def pop(self) -> Warm | None:
        """The standby for the next run: the oldest ready one, else the oldest (or None)."""
        if not self.items:
            return None
        chosen = next((w for w in self.items if w.task.done()), self.items[0])
        self.items.remove(chosen)
        # Back to back while a run finds a standby still starting (the one it takes, or the next).
        self.busy = not all(w.task.done() for w in (chosen, *self.items))
        return chosen

    def discard(self, warm: Warm) -> None:
        with contextlib.suppress(ValueError):
            self.items.remove(warm)

    def take_all(self) -> list[Warm]:
        items, self.items = self.items, []
        return items

    def close(self) -> None:
        for warm in self.take_all():
            warm.close()


class Warm:
    """A standby sandbox being prepared in the background for one mirror's next run.

    Taken once by that run (:meth:`take`); otherwise :meth:`close` ends it, from any thread (a mirror
    may be dropped from a worker thread) and on any event loop state.
    """

    def __init__(self, task: asyncio.Future[Prepared]) -> None:
        self.task = task
        self.loop = asyncio.get_running_loop()
        self.taken = False
        self.closed = False

    async def take(self) -> Prepared | None:
        """The prepared sandbox, or None (it failed, died, or belongs to another event loop)."""
        if self.closed or asyncio.get_running_loop() is not self.loop:
            self.close()
            return None
        self.taken = True
        try:
            prepared = await asyncio.shield(self.task)
        except asyncio.CancelledError:
            self.taken = False
            self.close()
            raise
        except Exception as exc:
            # Said aloud: without it every run would silently pay a cold start.
            log.warning("a sandbox started ahead failed to start (this run starts its own): %r", exc)
            return None
        usable = prepared.usable() if isinstance(prepared, Launched) else prepared[0].usable()
        if not usable:
            await run_to_completion(discard_prepared(prepared))
            return None
        return prepared

    def close(self) -> None:
        if self.taken or self.closed:
            return
        self.closed = True
        if self.loop.is_closed():
            self._end_now()
            return
        try:
            self.loop.call_soon_threadsafe(self._end_in_loop)
        except RuntimeError:  # the loop closed meanwhile
            self._end_now()

    async def aclose(self) -> None:
        """End it and wait until it is reaped (in its own event loop)."""
        if self.taken or self.closed:
            return
        if asyncio.get_running_loop() is not self.loop:
            self.close()
            return
        self.closed = True
        await run_to_completion(self._end())

    async def _end(self) -> None:
        try:
            prepared = await self.task
        except BaseException as exc:  # it never started (failed or cancelled): nothing to end
            log.debug("a sandbox started ahead ended before it was ready: %r", exc)
            return
        await discard_prepared(prepared)

    def _end_in_loop(self) -> None:
        in_background(self._end(), "ending a standby sandbox")

    def _end_now(self) -> None:
        if self.task.done() and not self.task.cancelled() and self.task.exception() is None:
            prepared = self.task.result()
            if isinstance(prepared, Launched):
                prepared.discard_now()
            else:
                prepared[0].discard_now()
                AssetsBridge.remove_directory(prepared[1])


def end_standbys(warm: OrderedDict[Warm, Mirror]) -> None:
    for standby in list(warm):
        if not standby.taken:
            standby.closed = True
            standby._end_now()
