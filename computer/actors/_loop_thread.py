"""An event loop on a thread of its own: where one hosted workspace runs everything it does (issue 20).

An owner host's loop only dispatches; each workspace it owns runs on a :class:`LoopThread`, so one
workspace's long operation blocks only its own loop. Every call crosses from the host's loop to the
workspace's and back, so that crossing is on the path of every small operation through a client:
:meth:`LoopThread.run` hands the coroutine over with one ``call_soon_threadsafe`` each way and a plain
task and future on either side, instead of ``run_coroutine_threadsafe`` + ``wrap_future`` (a
``concurrent.futures.Future`` chained to both loops, with its locks and callbacks): measured on the
2-core machine under load, ~50 µs per call instead of ~100 µs.

A small call need not cross at all. The loop thread holds its *gate* (a lock) whenever it runs
anything, and lets go of it only while it waits for events (:class:`_GatedSelector`). When no call
handed over is still going there and the gate is free, :meth:`LoopThread.run` with ``inline`` runs
the call's first step right on the caller's thread, holding the gate, with this loop set as the
running loop: whatever the call creates (futures, timers, tasks) belongs to this loop, and nothing of
the workspace runs on its own thread meanwhile (it waits for the gate). That is exactly what running
the call as a task here, while the loop waits for events, would do, minus two thread wake-ups. A call
that suspends (it should not: the caller picks calls that run to the end in one step) goes on here as
a task. The caller decides what is small (``inline``, asked under the gate): the workspace's order is
kept because a call arriving while another one handed over is still going crosses too, behind it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import selectors
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["LoopClosedError", "LoopThread", "SharedThreadPool"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class LoopClosedError(Exception):
    """The workspace's loop stopped before (or while) a call ran there: the workspace left the host."""


def _nothing() -> None:
    """Wakes a loop up (see :meth:`LoopThread._step_inline`)."""


class _Call:
    """One call crossing to the loop thread: the caller's future, and the task running it there."""

    __slots__ = ("caller", "future", "resumed", "task", "withdrawn")

    def __init__(
        self, caller: asyncio.AbstractEventLoop, future: asyncio.Future[Any], *, resumed: bool = False
    ) -> None:
        self.caller = caller
        self.future = future
        self.resumed = resumed  # its first step ran inline: it is already going, only not here yet
        self.task: asyncio.Task[Any] | None = None
        self.withdrawn = False  # the caller was cancelled before the task started

    def settle(self, outcome: asyncio.Task[Any] | BaseException) -> None:
        """On the caller's loop: pass the task's outcome (or ``outcome`` itself) on, unless cancelled."""
        if self.future.done():
            return
        if isinstance(outcome, BaseException):
            self.future.set_exception(outcome)
        elif outcome.cancelled():
            self.future.cancel()
        elif (exc := outcome.exception()) is not None:
            self.future.set_exception(exc)
        else:
            self.future.set_result(outcome.result())

    def send(self, outcome: asyncio.Task[Any] | BaseException) -> None:
        """From any thread: :meth:`settle` on the caller's loop (a closed caller loop awaits nothing)."""
        with contextlib.suppress(RuntimeError):
            self.caller.call_soon_threadsafe(self.settle, outcome)


class _GatedSelector(selectors.DefaultSelector):
    """The loop's selector: the loop thread gives its gate up only while it waits for events."""

    def __init__(self, gate: threading.Lock) -> None:
        super().__init__()
        self._gate = gate

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self._gate.release()
        try:
            return super().select(timeout)
        finally:
            self._gate.acquire()


async def _go_on(coro: Coroutine[Any, Any, T], waiting: Any, context: contextvars.Context) -> T:
    """Run the rest of ``coro``, whose first step ran inline and left it waiting on ``waiting`` (what
    it yielded: a future of this loop, or None for a bare yield), as its own task would have: a
    cancellation cancels what it waits for, or is thrown into it when that cannot be cancelled."""
    while True:
        error: asyncio.CancelledError | None = None
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                waiting._asyncio_future_blocking = False
                await asyncio.wait((waiting,))
        except asyncio.CancelledError as cancelled:
            if waiting is None or not waiting.cancel():  # as Task.cancel
                error = cancelled
        try:
            if error is None:
                waiting = context.run(coro.send, None)
            else:
                waiting = context.run(coro.throw, error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


class SharedThreadPool(concurrent.futures.ThreadPoolExecutor):
    """A thread pool that many loops share as their default executor (``to_thread``).

    A loop's ``close()`` (and ``shutdown_default_executor()``) shuts its default executor down: with a
    plain pool, the first hosted workspace to leave would end ``to_thread`` for every other workspace
    of the host ("cannot schedule new futures after shutdown"). Here ``shutdown`` is a no-op; the
    owner of the pool ends it with :meth:`close`.
    """

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """A loop that used this pool closed: the pool goes on for the others."""

    def close(self, wait: bool = False) -> None:
        super().shutdown(wait=wait)


class LoopThread:
    """An event loop running on a daemon thread of its own until :meth:`stop`."""

    def __init__(self, label: str, executor: SharedThreadPool) -> None:
        self.closed = False
        self._pending: set[_Call] = set()
        self.inlined = 0  # calls run inline on a caller's thread (for tests and benchmarks)
        # Held by the loop thread except while it waits for events; a caller running a call inline
        # holds it meanwhile (see the module's docstring).
        self.gate = threading.Lock()
        self.gate.acquire()  # the thread's from the start: nothing runs inline before it waits
        self.loop: asyncio.AbstractEventLoop = asyncio.SelectorEventLoop(_GatedSelector(self.gate))
        self.loop.set_default_executor(executor)  # to_thread: the host's shared pool, not one per loop
        self.thread = threading.Thread(target=self._main, name=f"ws:{label}"[:60], daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
            # Stopped: end what the workspace left behind (its background tasks were cancelled on close).
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.wait(pending, timeout=5.0))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        except Exception:
            log.exception("a workspace loop failed while stopping")
        finally:
            self.closed = True  # before the gate is free: no caller runs a call inline any more
            self.loop.close()
            with contextlib.suppress(RuntimeError):  # held from the last wait for events
                self.gate.release()
            for call in list(self._pending):  # started too late, or cut: never left waiting
                call.send(LoopClosedError())

    def _start(self, call: _Call, coro: Awaitable[Any]) -> None:
        """On this loop: run ``coro`` as a task whose end settles ``call`` on the caller's loop."""
        if self.closed or (call.withdrawn and not call.resumed):  # never started: it never runs
            if asyncio.iscoroutine(coro):
                coro.close()
            call.send(LoopClosedError() if self.closed else asyncio.CancelledError())
            return
        task = asyncio.ensure_future(coro)
        task.add_done_callback(lambda done: self._finish(call, done))
        if call.resumed:
            # Its first step ran inline and it waits on something: a cancellation must reach it
            # there (its ``except``/``finally`` run), as it reaches a task waiting. A task cancelled
            # before its first step never enters its coroutine: the caller's cancellation (already
            # asked, or asked later) applies only once the task has stepped into its wait.
            self.loop.call_soon(self._stepped, call, task)
        else:
            call.task = task

    @staticmethod
    def _stepped(call: _Call, task: asyncio.Task[Any]) -> None:
        call.task = task
        if call.withdrawn:
            task.cancel()

    def _finish(self, call: _Call, task: asyncio.Task[Any]) -> None:
        self._pending.discard(call)
        # A task cancelled because this loop stopped (not by its caller) means the workspace left.
        call.send(LoopClosedError() if task.cancelled() and self.closed else task)

    async def run(self, coro: Awaitable[T], *, inline: Callable[[], bool] | None = None) -> T:
        """Run ``coro`` on this loop and await its result from another loop (cancellation follows);
        :class:`LoopClosedError` once the loop stopped.

        ``inline``: when this loop is idle (no call handed over is going, the gate is free) and
        ``inline()`` (asked holding the gate) says so, ``coro``'s first step runs right here instead.
        """
        if self.closed:
            if asyncio.iscoroutine(coro):
                coro.close()
            raise LoopClosedError()
        resumed = False
        if (
            inline is not None
            and not self._pending
            and asyncio.iscoroutine(coro)
            and self.gate.acquire(False)
        ):
            stepped = self._step_inline(coro, inline)
            if stepped is not None:
                done, outcome = stepped
                if done:
                    return outcome  # type: ignore[no-any-return]
                coro, resumed = outcome, True  # suspended: the rest goes on there, as a task
        caller = asyncio.get_running_loop()
        call = _Call(caller, caller.create_future(), resumed=resumed)
        self._pending.add(call)
        try:
            self.loop.call_soon_threadsafe(self._start, call, coro)
        except RuntimeError:  # the loop was closed meanwhile
            self._pending.discard(call)
            if asyncio.iscoroutine(coro):
                coro.close()
            raise LoopClosedError() from None
        try:
            result: T = await call.future
            return result
        except asyncio.CancelledError:
            # Our caller was cancelled (not the task there, which a stopping loop ends with a
            # LoopClosedError): cancel the task too, or never start it.
            if call.task is None or not call.task.done():
                self._withdraw(call)
            raise

    def _step_inline(
        self, coro: Coroutine[Any, Any, T], inline: Callable[[], bool]
    ) -> tuple[bool, Any] | None:
        """Holding the gate: run ``coro``'s first step here if ``inline()``; None when it did not
        run, ``(True, result)`` when it ended (its error is raised), else ``(False, the rest)``."""
        loop = self.loop
        ready, timers = len(loop._ready), len(loop._scheduled)  # type: ignore[attr-defined]
        caller = asyncio.events._get_running_loop()
        context = contextvars.Context()  # as a new task of the loop thread: nothing of the caller's
        try:
            if loop.get_debug() or not inline():  # asyncio's debug mode refuses calls from other threads
                return None
            self.inlined += 1
            asyncio.events._set_running_loop(loop)
            try:
                waiting = context.run(coro.send, None)
            except StopIteration as stop:
                return True, stop.value
            finally:
                asyncio.events._set_running_loop(caller)
        finally:
            # It may have scheduled something on the loop (a timer, a task): the loop thread, waiting
            # for events with the timeout it computed before, must look again.
            if len(loop._ready) != ready or len(loop._scheduled) != timers:  # type: ignore[attr-defined]
                loop.call_soon_threadsafe(_nothing)
            self.gate.release()
        return False, _go_on(coro, waiting, context)

    def _withdraw(self, call: _Call) -> None:
        """The caller gave up: cancel the task there (or never start it)."""
        call.withdrawn = True
        self._pending.discard(call)

        def cancel() -> None:
            if call.task is not None:
                call.task.cancel()

        with contextlib.suppress(RuntimeError):  # the loop closed: nothing runs there any more
            self.loop.call_soon_threadsafe(cancel)

    def stop(self) -> None:
        self.closed = True
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            pass  # already closed
