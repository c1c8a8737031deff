"""When freed small chunks are deleted: in a transaction of their own, after the mutation that freed them.

A mutation that leaves a batch of small unreferenced chunks asks its store's ``later()`` to take the
batch off its transaction (a pull removing 1,000 files spent 1.3 ms of its transaction deleting their
chunk rows). :class:`GarbageTimer` is the default answer: a timer ``GARBAGE_DELAY`` seconds later on
the running event loop. An owner that schedules collection itself (``Workspace``) opens the store
with ``garbage_timer=False`` and calls :func:`flush_garbage` through ``FileSystem.collect_garbage``.

Until the batch goes, its rows stay with zero references: a write of the same bytes takes them back
(the delete only takes rows still at zero), and quotas count logical bytes, never chunk rows.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3

from ._state import Store

__all__ = ["GARBAGE_DELAY", "GarbageTimer", "flush_garbage", "hold"]

log = logging.getLogger(__name__)

# Seconds after a mutation that left a batch of small unreferenced chunks until they are deleted.
GARBAGE_DELAY = 0.1


def flush_garbage(st: Store) -> None:
    """Delete the freed small chunks held for batching now, in a transaction of their own (a no-op
    when nothing waits or inside a transaction: the next batch retries)."""
    if st.chunks.pending and not st.db.in_transaction:
        with st.db.transaction():
            st.chunks.flush()


def hold() -> bool:
    """``later()`` of a store whose owner collects (``garbage_timer=False`` without ``on_garbage``):
    a batch waits for ``collect_garbage``."""
    return True


class GarbageTimer:
    """``later()`` for a store that collects its own garbage: a timer on the running event loop.

    The store is built with :meth:`later` as its hook, then :meth:`bind` names it to the timer.
    """

    def __init__(self) -> None:
        self.store: Store | None = None
        self.name = ""  # the store's id, for the log
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the timer is on

    def bind(self, store: Store, name: str) -> None:
        self.store, self.name = store, name

    def later(self) -> bool:
        """Free the ready batch ``GARBAGE_DELAY`` seconds from now; without an event loop: False (the
        mutation frees it in its own transaction)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._handle is not None:
            if self._loop is loop:
                return True
            self._handle.cancel()  # set on a loop that has ended (asyncio.run) or another one
        self._loop = loop
        self._handle = loop.call_later(GARBAGE_DELAY, self._fire)
        return True

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        st = self.store
        if st is None or st.closed:
            return
        try:
            flush_garbage(st)  # a transaction open across an await: the next batch retries
        except (sqlite3.Error, OSError) as exc:
            log.warning("freeing unreferenced chunks of %s failed (retried later): %r", self.name, exc)
