"""Task helpers for teardown: finish it despite cancellation, or run it in the background (on the
caller's loop for a coroutine, on a thread of its own for blocking work); blocking work awaited off
the event loop (:func:`offload`: a lane of threads per sandbox or mirror, never the loop's shared
pool); a call on the event loop that owns what it touches (:func:`on_loop`)."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = [
    "after_lane",
    "finish_in_thread",
    "in_background",
    "in_thread",
    "offload",
    "on_loop",
    "run_to_completion",
]

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


async def finish_in_thread(work: Callable[[], _T], lane: object = None) -> _T:
    """``work`` off the loop (:func:`offload` on ``lane``), awaited to its end even if the caller is
    cancelled meanwhile (the cancellation is re-raised then): blocking work on shared state (a
    mirror's watch and state) that must not go on alone while what runs after the cancellation uses
    that state."""
    return await run_to_completion(offload(lane, work))


# Blocking work of a sandbox (its freeze and thaw, its mirror's walks, reads and writes) once went to
# the event loop's default executor (``asyncio.to_thread``): a few threads every workspace of the
# process shares (a pool worker's host: 16 for all its loops). A few hostile sandboxes whose work
# blocks (a thaw while the group forks, a walk of a huge tree) held every one of them, and every
# other workspace's next step waited behind theirs. Now each owner (``lane``: a mirror, a live
# sandbox) has a lane: its calls one at a time, in order, on a thread that lives while it has work
# (and ``_LINGER`` after), so an owner holds one thread at most and nobody queues behind another's
# work; a call with no owner (teardown, a start's one-off) runs on a thread of its own.
_LINGER = 0.05  # seconds a lane's thread waits for its next call (a sync's steps come back to back)
_LANES: dict[int, _Lane] = {}  # by ``id`` of the owner, while its lane has a thread
_LANES_LOCK = threading.Lock()


def _forget_lanes() -> None:
    """In a forked child: none of the parent's lane threads is there to run what its lanes hold."""
    global _LANES_LOCK, _STARTER
    _LANES_LOCK = threading.Lock()
    _LANES.clear()
    _STARTER = _Starter()


os.register_at_fork(after_in_child=_forget_lanes)


class _Lane:
    """The calls of one owner, run in order on one thread at a time (see above)."""

    def __init__(self, key: int | None) -> None:
        self.key = key
        self.calls: collections.deque[tuple[Callable[[], None], Callable[[BaseException], None]]] = (
            collections.deque()
        )
        self.more = threading.Condition(_LANES_LOCK)
        self.running = False

    def add(self, call: Callable[[], None], fail: Callable[[BaseException], None]) -> None:
        """Queue ``call`` (``_LANES_LOCK`` held); a thread is started for the lane when it has none,
        by the starter (``fail``: the call's error when none can be)."""
        self.calls.append((call, fail))
        if self.running:
            self.more.notify()
            return
        _STARTER.start(self)
        self.running = True

    def unstarted(self, error: BaseException) -> None:
        """No thread could be started for the lane (RuntimeError: can't start new thread): each call
        it holds fails with ``error``."""
        with _LANES_LOCK:
            failed = list(self.calls)
            self.calls.clear()
            self.running = False
            if self.key is not None and _LANES.get(self.key) is self:
                del _LANES[self.key]
        for _, fail in failed:
            fail(error)

    def drain(self) -> None:
        while True:
            with _LANES_LOCK:
                if not self.calls and self.key is not None:
                    self.more.wait(_LINGER)
                if not self.calls:
                    self.running = False
                    if self.key is not None and _LANES.get(self.key) is self:
                        del _LANES[self.key]
                    return
                call, _ = self.calls.popleft()
            call()


class _Starter:
    """Starts the lanes' threads, on a thread of its own: ``Thread.start`` waits until the new thread
    runs, which takes its turn of the GIL and of a CPU, and it ran on the event loop (every workspace
    of the process), ``_LANES_LOCK`` held: a plan's sort holding the GIL, and a loaded host, made a
    start take 0.3-0.6 s (p90 at load 15 with a thread sorting 300,000 strings; 15-70 ms with one
    busy in Python), the loop waiting through it at every lane's first call after ``_LINGER``."""

    def __init__(self) -> None:
        self.lanes: collections.deque[_Lane] = collections.deque()
        self.ready = threading.Condition(threading.Lock())
        self.thread: threading.Thread | None = None

    def start(self, lane: _Lane) -> None:
        with self.ready:
            self.lanes.append(lane)
            self.ready.notify()
            if self.thread is None:  # once a process (the one start that waits)
                self.thread = threading.Thread(target=self._run, name="computer: lane starter", daemon=True)
                self.thread.start()

    def _run(self) -> None:
        while True:
            with self.ready:
                while not self.lanes:
                    self.ready.wait()
                lane = self.lanes.popleft()
            try:
                threading.Thread(target=lane.drain, name="computer: lane", daemon=False).start()
            except BaseException as exc:  # handed to the lane's callers
                lane.unstarted(exc)


_STARTER = _Starter()


async def offload(lane: object, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)`` on ``lane``'s thread (``None``: a thread of its own), awaited (with
    the caller's context variables, as ``asyncio.to_thread``). A cancelled caller stops waiting; the
    call still runs to its end, and the lane's later calls after it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()
    bound = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(result)
        elif isinstance(error, StopIteration):  # a future refuses it (it would end a coroutine)
            future.set_exception(RuntimeError(f"{fn!r} raised StopIteration"))
        else:
            future.set_exception(error)

    def call() -> None:
        result, error = None, None
        try:
            result = bound()
        except BaseException as exc:  # handed to the caller, as to_thread does
            error = exc
        handed(result, error)

    def handed(result: Any, error: BaseException | None) -> None:
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop has ended: nobody waits
            pass

    _queue(lane, call, functools.partial(handed, None))
    return await future


def _queue(lane: object, call: Callable[[], None], fail: Callable[[BaseException], None]) -> None:
    """``call`` queued on ``lane`` (``None``: a thread of its own); ``fail``: its error when no thread
    can be started for it."""
    key = None if lane is None else id(lane)
    with _LANES_LOCK:
        queue = _LANES.get(key) if key is not None else None
        if queue is None:
            queue = _Lane(key)
            if key is not None:
                _LANES[key] = queue
        queue.add(call, fail)


def after_lane(lane: object, work: Callable[[], object], what: str) -> None:
    """Blocking ``work`` queued on ``lane`` after the calls queued there before it, without waiting
    (no loop needed: a ``finally`` of a cancelled or closed generator); its failure is logged as
    ``what`` failing. For a resource a cancelled :func:`offload` call may still use: a file closed on
    the loop while its read ran on the lane (the read failing, or worse, the descriptor's number
    reused by another open meanwhile)."""

    def failed(exc: BaseException) -> None:  # in ``work``, or no thread could be started for it
        log.warning("%s failed: %r", what, exc)

    def call() -> None:
        try:
            work()
        except Exception as exc:
            failed(exc)

    _queue(lane, call, failed)


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
