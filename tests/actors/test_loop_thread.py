"""A hosted workspace's loop thread (issue 20, no Ray): the loops of one owner host share one thread
pool (a workspace leaving the host, its loop closed, must not end ``to_thread`` for the others), and a
call handed over from the host's loop comes back with its result, its error or its cancellation."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from computer.actors._loop_thread import LoopClosedError, LoopThread, SharedThreadPool


async def test_a_closed_workspace_loop_leaves_the_shared_pool_working() -> None:
    pool = SharedThreadPool(2, thread_name_prefix="test-io")
    first, second = LoopThread("first", pool), LoopThread("second", pool)
    try:

        async def in_thread() -> str:
            return await asyncio.to_thread(lambda: threading.current_thread().name)

        assert (await first.run(in_thread())).startswith("test-io")
        first.stop()
        first.thread.join(timeout=10)
        assert not first.thread.is_alive()
        # The first loop's close() shut its default executor down: the pool must go on.
        assert (await second.run(in_thread())).startswith("test-io")
    finally:
        second.stop()
        second.thread.join(timeout=10)
        pool.close()


# -- the hand-over of a call from the host's loop to the workspace's loop thread and back ------------


@pytest.fixture
def thread() -> Iterator[LoopThread]:
    pool = SharedThreadPool(2, thread_name_prefix="test-io")
    running = LoopThread("test", pool)
    yield running
    running.stop()
    running.thread.join(10)
    pool.close()


async def test_a_call_runs_on_the_loop_thread_and_returns_or_raises(thread: LoopThread) -> None:
    async def where() -> str:
        return threading.current_thread().name

    async def fails() -> None:
        raise FileNotFoundError(2, "no such file", "/x")

    assert await thread.run(where()) == "ws:test"
    with pytest.raises(FileNotFoundError) as info:
        await thread.run(fails())
    assert info.value.filename == "/x"
    results = await asyncio.gather(*[thread.run(asyncio.sleep(0.01, result=i)) for i in range(50)])
    assert results == list(range(50))


async def test_an_async_generator_steps_across(thread: LoopThread) -> None:
    async def pieces() -> AsyncIterator[int]:
        for i in range(3):
            yield i

    source = pieces()
    got = [await thread.run(source.__anext__()) for _ in range(3)]
    with pytest.raises(StopAsyncIteration):
        await thread.run(source.__anext__())
    assert got == [0, 1, 2]


async def _a_cancelled_call_sees_it_there(thread: LoopThread, inline: Callable[[], bool] | None) -> None:
    """A long call through ``thread``, its caller cancelled while it waits: the call sees the
    cancellation there (its ``except`` runs), and the loop goes on serving."""
    started, cancelled = threading.Event(), threading.Event()

    async def long() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    call = asyncio.ensure_future(thread.run(long(), inline=inline))
    await asyncio.to_thread(started.wait, 10)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await asyncio.to_thread(cancelled.wait, 10)
    assert await thread.run(asyncio.sleep(0, result="still serving")) == "still serving"


@pytest.mark.parametrize("inline", [None, lambda: True], ids=["handed-over", "inline-then-waits"])
async def test_a_cancelled_caller_cancels_the_call_there(
    thread: LoopThread, inline: Callable[[], bool] | None
) -> None:
    """Handed over, or run inline until it waits and then gone on there as a task: the same."""
    await _a_cancelled_call_sees_it_there(thread, inline)


async def test_a_call_stepped_inline_then_withdrawn_before_it_goes_on_there_sees_the_cancel() -> None:
    """The race CI hit under load: the caller is cancelled after the first step ran inline and before
    the rest started as a task on the loop thread. The coroutine is already going (it waits on a
    timer of that loop): it must see the cancellation, not be dropped without its ``except``."""
    withdrawn = threading.Event()

    class Late(LoopThread):
        def _start(self, call: Any, coro: Any) -> None:
            withdrawn.wait(10)  # the loop thread is slow to start it: the caller gives up first
            super()._start(call, coro)

        def _withdraw(self, call: Any) -> None:
            super()._withdraw(call)
            withdrawn.set()

    pool = SharedThreadPool(2, thread_name_prefix="test-io")
    late = Late("late", pool)
    try:
        await _a_cancelled_call_sees_it_there(late, lambda: True)
        assert late.inlined == 1 and withdrawn.is_set()
    finally:
        late.stop()
        late.thread.join(10)
        pool.close()


async def test_a_stopped_loop_ends_waiting_and_later_calls_with_loop_closed(thread: LoopThread) -> None:
    started = threading.Event()

    async def long() -> None:
        started.set()
        await asyncio.sleep(60)

    call = asyncio.ensure_future(thread.run(long()))
    await asyncio.to_thread(started.wait, 10)
    thread.stop()
    with pytest.raises(LoopClosedError):
        await asyncio.wait_for(call, 10)
    with pytest.raises(LoopClosedError):
        await thread.run(asyncio.sleep(0))


# -- small calls run inline on the caller's thread when the loop is idle -----------------------------


async def test_an_inline_call_runs_here_as_if_on_the_loop(thread: LoopThread) -> None:
    asked: list[str] = []

    async def where() -> tuple[str, bool]:
        return threading.current_thread().name, asyncio.get_running_loop() is thread.loop

    def small() -> bool:
        asked.append(threading.current_thread().name)
        return True

    caller = threading.current_thread().name
    assert await thread.run(where(), inline=small) == (caller, True)  # here, with its loop running
    assert asked == [caller] and thread.inlined == 1
    assert await thread.run(where(), inline=lambda: False) == ("ws:test", True)  # not small: crosses
    assert asyncio.get_running_loop() is not thread.loop  # the caller's loop is back

    async def fails() -> None:
        raise FileNotFoundError(2, "no such file", "/x")

    with pytest.raises(FileNotFoundError):
        await thread.run(fails(), inline=lambda: True)


async def test_a_call_arriving_while_another_is_going_there_queues_behind_it(thread: LoopThread) -> None:
    release = threading.Event()
    order: list[str] = []

    async def long() -> None:
        await asyncio.to_thread(release.wait, 10)
        order.append("long")

    async def small() -> str:
        order.append("small")
        return threading.current_thread().name

    first = asyncio.ensure_future(thread.run(long()))
    await asyncio.sleep(0.05)
    second = asyncio.ensure_future(thread.run(small(), inline=lambda: True))
    await asyncio.sleep(0.05)
    # A dedicated owner's loop would interleave the two at the long call's await: so does this one,
    # but on the loop thread, never on the caller's next to a call still going there.
    assert await second == "ws:test"
    assert thread.inlined == 0
    release.set()
    await first
    assert order == ["small", "long"]


async def test_the_loop_thread_runs_nothing_while_a_call_runs_inline(thread: LoopThread) -> None:
    ticks = 0

    def tick() -> None:
        nonlocal ticks
        ticks += 1
        thread.loop.call_later(0.001, tick)

    thread.loop.call_soon_threadsafe(tick)
    await asyncio.sleep(0.05)

    async def holds() -> int:
        before = ticks
        # Blocking on purpose: it lets the GIL go, so only the gate keeps the loop thread out.
        time.sleep(0.1)  # noqa: ASYNC251
        return ticks - before

    assert await thread.run(holds(), inline=lambda: True) == 0
    assert thread.inlined == 1
    before = ticks
    await asyncio.sleep(0.1)
    assert ticks > before  # and it goes on after


async def test_what_an_inline_call_leaves_on_the_loop_runs_there(thread: LoopThread) -> None:
    fired = threading.Event()
    where: list[str] = []

    async def schedules() -> None:
        def later() -> None:
            where.append(threading.current_thread().name)
            fired.set()

        asyncio.get_running_loop().call_later(0.01, later)

    await thread.run(schedules(), inline=lambda: True)
    assert await asyncio.to_thread(fired.wait, 10)
    assert where == ["ws:test"]


async def test_an_inline_call_that_waits_goes_on_there(thread: LoopThread) -> None:
    async def waits() -> tuple[str, str]:
        first = threading.current_thread().name
        await asyncio.sleep(0.01)
        return first, threading.current_thread().name

    caller = threading.current_thread().name
    assert await thread.run(waits(), inline=lambda: True) == (caller, "ws:test")
    assert await thread.run(asyncio.sleep(0, result="next"), inline=lambda: True) == "next"
