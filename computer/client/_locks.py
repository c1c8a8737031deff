"""The client's view of the owner's lock table: leases held for this client, renewed in the background.

Fencing: every lease comes with its fencing token. While a ``hold`` block runs, the token is in a
context variable of the task, and every mutating call that task makes through the same connection
presents it; the owner refuses the call with ``LockLostError`` (ENOLCK) once the lease is gone (it
expired, or the owner restarted and its volatile lock table with it), so a holder never writes after
losing its lock, even when it has not noticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar

from ..actors import lock_process
from ..storage.errors import fs_error
from ..storage.locks import own_hold
from ._connection import Connection

__all__ = ["ClientLocks", "fences_for"]

log = logging.getLogger(__name__)

# The leases the current task holds: (connection, fencing token, paths), innermost last.
_HELD: ContextVar[tuple[tuple[Connection, int, tuple[str, ...]], ...]] = ContextVar(
    "computer_held", default=()
)


def fences_for(connection: Connection) -> list[tuple[int, list[str]]]:
    """The fences (token, paths) the current task must present on a mutating call through ``connection``."""
    return [(token, list(paths)) for conn, token, paths in _HELD.get() if conn is connection]


class ClientLocks:
    """``hold`` = one acquire round trip, a background renewal every third of the lease, one release.

    Every lease is held in the owner's table under this client's id, so a client that dies without
    releasing loses its leases when they expire (``lock_lease`` seconds), and ``close`` drops them all.
    """

    def __init__(self, connection: Connection, holder: str) -> None:
        self._conn = connection
        self.holder = holder
        self._renewers: set[asyncio.Task[None]] = set()
        self._outstanding: set[str] = set()  # leases taken and not yet released for sure
        self._cleanups: set[asyncio.Future[bool]] = set()  # withdrawals and releases a cancel must not stop
        self._asking: set[str] = set()  # requests sent and not answered yet
        self._closed_on: set[str] = set()  # those of them ``close`` withdrew: never held

    @contextlib.asynccontextmanager
    async def hold(self, paths: Sequence[str], *, subtree: bool = False) -> AsyncIterator[None]:
        """Hold ``paths`` (all or none) for the block; a hold that conflicts with one its own task
        already has on this workspace is ``EDEADLK`` at once (``storage.locks.own_hold``)."""
        wanted = [paths] if isinstance(paths, str) else list(paths)
        with own_hold(self, wanted, subtree):
            async with self._hold(wanted, subtree):
                yield

    @contextlib.asynccontextmanager
    async def _hold(self, wanted: list[str], subtree: bool) -> AsyncIterator[None]:
        # One holder per request, under this client's: a cancelled wait can be withdrawn exactly. It names
        # this process (when the request is made, not when the module was imported), so the owner drops
        # the request if the process dies while it waits.
        request = f"{self.holder}#{uuid.uuid4().hex[:12]}:{lock_process()}"
        self._asking.add(request)
        try:
            lease_id, ttl, token = await self._conn.request(
                "lock_acquire",
                request,
                wanted,
                subtree,
                retry_safe=True,
                waits=True,  # on the owner's wait group: waiters never hold the slots of ordinary calls
                on_cancel=lambda _: self._withdraw(request),
            )
        except OSError as err:
            if err.errno == errno.ECANCELED and request in self._closed_on:
                # The owner heard of the close first and refused the request (``_lock_requests.py``).
                raise fs_error(
                    errno.ENOLCK,
                    wanted[0] if wanted else None,
                    "lock request withdrawn: its client was closed",
                ) from None
            raise
        finally:
            self._asking.discard(request)
            closed = request in self._closed_on
            self._closed_on.discard(request)
        if closed:
            # ``close`` ran while this waited: granted after it, the lease was renewed for as long as
            # the process lived, every other client locked out. Let it go, and say so.
            await self._release(lease_id)
            raise fs_error(
                errno.ENOLCK, wanted[0] if wanted else None, "lock request withdrawn: its client was closed"
            )
        self._outstanding.add(lease_id)
        renewer = asyncio.create_task(self._renew(lease_id, float(ttl)))
        self._renewers.add(renewer)
        outer = _HELD.get()
        _HELD.set((*outer, (self._conn, int(token), tuple(wanted))))
        try:
            yield
        finally:
            _HELD.set(outer)
            renewer.cancel()
            self._renewers.discard(renewer)
            await self._release(lease_id)

    async def _release(self, lease_id: str) -> None:
        """Release ``lease_id``, also when the caller is cancelled meanwhile (a timeout, a task group
        shutting down, as it leaves the block). Before, the cancellation cancelled the release call in
        Ray, and the lease, its renewal stopped, locked every other worker out until it expired
        (``lock_lease``, 30 s)."""
        if await self._send_anyway("lock_release", lease_id, "could not release lock lease"):
            self._outstanding.discard(lease_id)

    def _withdraw(self, request: str) -> None:
        """The caller stopped waiting: the owner drops the request, or releases what it granted."""
        self._start_anyway("lock_cancel", request, "could not withdraw lock request")

    def _start_anyway(self, method: str, arg: str, failed: str) -> asyncio.Future[bool]:
        """Send ``method(arg)`` in a task of its own that no cancellation of the caller stops (kept in
        ``_cleanups`` until it ends); the task's result says whether the owner answered. The owner
        being gone is logged with ``failed``: its lock table, and what the call was about, died with
        it."""

        async def send() -> bool:
            try:
                await self._conn.request(method, arg, retry_safe=True)
            except Exception:
                log.warning("%s %s", failed, arg, exc_info=True)
                return False
            return True

        task = asyncio.ensure_future(send())
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        return task

    async def _send_anyway(self, method: str, arg: str, failed: str) -> bool:
        """:meth:`_start_anyway`, awaited: a cancellation of the caller still ends the caller, while
        the call goes on."""
        return await asyncio.shield(self._start_anyway(method, arg, failed))

    async def _renew(self, lease_id: str, ttl: float) -> None:
        while True:
            await asyncio.sleep(ttl / 3.0)
            try:
                kept = await self._conn.request("lock_renew", lease_id, retry_safe=True)
            except Exception:
                log.warning("renewing lock lease %s failed", lease_id, exc_info=True)
                continue
            if not kept:
                log.warning("lock lease %s was lost (expired or its owner restarted)", lease_id)
                return

    async def close(self) -> None:
        """Stop renewing and release every lease of this client."""
        for task in list(self._renewers):
            task.cancel()
        self._renewers.clear()
        self._closed_on |= self._asking  # requests still waiting: withdrawn below, never held
        if not self._outstanding and not self._asking:
            return  # nothing to release: do not wake a hibernating owner for nothing
        self._outstanding.clear()
        # Sent whatever happens to the caller: a close cancelled as its release was on its way (a
        # task group shutting down) left every lease of this client, their renewal stopped, to lock
        # every other worker out until they expired (``lock_lease``, 30 s).
        await self._send_anyway("lock_release_holder", self.holder, "could not release the locks of")
