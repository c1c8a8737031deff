"""Task helpers for teardown: finish it despite cancellation, or run it in the background (on the
caller's loop for a coroutine, on a thread of its own for blocking work); a call on the event loop
that owns what it touches (:func:`on_loop`)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["finish_in_thread", "in_background", "in_thread", "on_loop", "run_to_completion"]

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


async def finish_in_thread(work: Callable[[], _T]) -> _T:
    """``work`` in a worker thread, awaited to its end even if the caller is cancelled meanwhile (the
    cancellation is re-raised then): blocking work on shared state (a mirror's watch and state) that
    must not go on alone while what runs after the cancellation uses that state."""
    return await run_to_completion(asyncio.to_thread(work))


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


def in_thread(work: Callable[[], object], what: str, *, daemon: bool = False) -> None:
    """Run blocking teardown ``work`` on a thread of its own, without waiting; its failure is logged
    as ``what`` failing.

    Not ``in_background(asyncio.to_thread(...))``: that task belongs to the caller's loop, and a loop
    closed before the thread is done (a test's, a command's) leaves it pending: "Task was destroyed
    but it is pending" at exit, for work that had finished. A thread needs no loop. ``daemon``: work
    that may block for good (feeding a pipe nobody reads) must not hold the interpreter's exit;
    bounded clean-up (directories, cgroups) is waited for at exit, so it is not left half done.
    """

    def run() -> None:
        try:
            work()
        except Exception as exc:
            log.warning("%s failed: %r", what, exc)

    threading.Thread(target=run, name=f"computer: {what}"[:60], daemon=daemon).start()


async def on_loop(
    loop: asyncio.AbstractEventLoop, call: Callable[[], Awaitable[_T]], ended: Callable[[], BaseException]
) -> _T:
    """``call()`` on ``loop``: this one, or one running in another thread, awaited there (a future of
    another loop cannot be awaited here: "attached to a different loop"); ``ended()`` is raised when
    that loop runs no more (one ``asyncio.run`` per call)."""
    if loop is asyncio.get_running_loop():
        return await call()
    if not loop.is_running():
        raise ended()

    async def there() -> _T:
        return await call()

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(there(), loop))
