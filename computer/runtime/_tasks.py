"""Task helpers for teardown: finish it despite cancellation, or run it in the background."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["in_background", "run_to_completion"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


async def run_to_completion(aw: Awaitable[_T]) -> _T:
    """Await ``aw`` to its end even if the caller is cancelled (once or more) meanwhile.

    For teardown that must not be cut short (killing and reaping a process tree, removing its
    cgroups): a cancellation that arrived is re-raised once ``aw`` has finished.
    """
    task = asyncio.ensure_future(aw)
    interrupted = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            interrupted = True
    if interrupted:
        if not task.cancelled() and task.exception() is not None:
            log.warning("teardown failed while cancelled: %r", task.exception())
        raise asyncio.CancelledError
    return task.result()


# Teardown running in the background (a reference keeps each task alive until it is done).
_BACKGROUND: set[asyncio.Future[None]] = set()


def in_background(aw: Awaitable[None], what: str) -> None:
    """Run teardown ``aw`` without waiting for it; its failure is logged as ``what`` failing."""
    task = asyncio.ensure_future(aw)
    _BACKGROUND.add(task)

    def done(task: asyncio.Future[None]) -> None:
        _BACKGROUND.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("%s failed: %r", what, task.exception())

    task.add_done_callback(done)
