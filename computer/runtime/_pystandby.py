"""``StandbyGuests``: the python backend's guests started ahead of their runs.

The interpreter's start and the guest's imports are most of a short run (~20 of 25 ms): after a run
without its own environment, the next run's guest is started in the background (a moment later:
the run's result first) and waits for its setup frame on its channel. A run with ``env`` starts its
own (the interpreter reads its locale variables once, at start). One guest is enough: a second does
not help runs back to back (each costs ~20 ms of CPU to start, which is what bounds them, and two
starting at once slowed each other down).

The shell backend has its own counterpart (``Standby`` sandboxes, a stub bash waiting for its
command line); see the python backend's README for what one shared abstraction would need.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import socket
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ._sandbox import SandboxProcess, in_background

__all__ = ["PREPARE_DELAY", "Guest", "StandbyGuests"]

log = logging.getLogger(__name__)

# Seconds between the end of a run and the start of the next run's guest.
PREPARE_DELAY = 0.002


@dataclass
class Guest:
    """A sandboxed interpreter running the guest; it waits for its setup frame on ``host_end``."""

    sp: SandboxProcess
    host_end: socket.socket

    async def discard(self) -> None:
        self.host_end.close()
        await self.sp.discard()  # runs to completion

    def discard_now(self) -> None:
        """Kill and clean up from any thread, or after its event loop is gone."""
        self.host_end.close()
        self.sp.killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.sp.proc.pid, signal.SIGKILL)
        self.sp.cleanup()


class StandbyGuests:
    """Up to ``size`` guests started ahead by ``start``, oldest first; all ended at exit."""

    def __init__(self, start: Callable[[], Awaitable[Guest]], size: int) -> None:
        self.size = size
        self.pending: list[asyncio.Future[Guest]] = []
        self._start = start
        self._go: dict[asyncio.Future[Guest], asyncio.Future[None]] = {}  # a guest's start signal
        # At exit the guests would die with this process (bubblewrap's --die-with-parent), but their
        # cgroups would stay behind: one exit hook ends the guests of every live set.
        _ALL.add(self)

    async def take(self) -> Guest | None:
        """A guest started ahead, on this event loop and still alive (None: there is none)."""
        while self.pending:
            pending = self.pending.pop(0)
            go = self._go.get(pending)
            if go is not None:  # still waiting for its moment: a run is here, start it now
                _signal(go)
            guest = await _started(pending)
            if guest is None:
                continue
            if guest.sp.proc.returncode is None:
                return guest
            in_background(guest.discard(), "ending a guest that died while it waited")
        return None

    def refill(self) -> None:
        """Start guests in the background, :data:`PREPARE_DELAY` from now, up to ``size``."""
        loop = asyncio.get_running_loop()

        async def prepare(go: asyncio.Future[None]) -> Guest:
            await go
            return await self._start()

        while len(self.pending) < self.size:
            go: asyncio.Future[None] = loop.create_future()
            loop.call_later(PREPARE_DELAY, _signal, go)
            pending = asyncio.ensure_future(prepare(go))
            self._go[pending] = go
            pending.add_done_callback(self._go.pop)
            self.pending.append(pending)

    def close_now(self) -> None:
        """End every guest started ahead, from any thread (a mirror dropped in a worker thread): the
        ones still starting are ended when they are ready, on their own event loop."""
        guests, self.pending[:] = list(self.pending), []
        for pending in guests:
            if pending.done():
                _end_now(pending)
                continue
            loop = pending.get_loop()
            try:
                loop.call_soon_threadsafe(pending.add_done_callback, _end_now)
            except RuntimeError:  # its loop is closed: nothing will finish it
                continue

    async def close(self) -> None:
        """End every guest started ahead (the next run starts one again)."""
        guests, self.pending[:] = list(self.pending), []
        for pending in guests:
            guest = await _started(pending)
            if guest is not None:
                await guest.discard()


async def _started(pending: asyncio.Future[Guest]) -> Guest | None:
    """The guest once started; None if its start failed or it belongs to another event loop (that
    one is ended when it is ready). A caller cancelled meanwhile leaves the guest to be ended too."""
    if pending.get_loop() is not asyncio.get_running_loop():
        pending.add_done_callback(_end_now)
        return None
    try:
        return await asyncio.shield(pending)
    except asyncio.CancelledError:
        pending.add_done_callback(_end_now)
        raise
    except Exception as exc:
        # Said aloud: without it every run would silently pay a cold start.
        log.warning("a python guest started ahead failed to start (the run starts its own): %r", exc)
        return None


def _signal(go: asyncio.Future[None]) -> None:
    if not go.done():
        go.set_result(None)


def _end_now(pending: asyncio.Future[Guest]) -> None:
    if not pending.cancelled() and pending.exception() is None:
        pending.result().discard_now()


_ALL: weakref.WeakSet[StandbyGuests] = weakref.WeakSet()


@atexit.register
def _end_all_now() -> None:
    for standby in list(_ALL):
        for pending in standby.pending:
            if pending.done():
                _end_now(pending)
