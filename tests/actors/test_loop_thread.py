"""A hosted workspace's loop thread (issue 20, no Ray): the loops of one owner host share one thread
pool (a workspace leaving the host, its loop closed, must not end ``to_thread`` for the others), and a
call handed over from the host's loop comes back with its result, its error or its cancellation."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator

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


async def test_a_cancelled_caller_cancels_the_call_there(thread: LoopThread) -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def long() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    call = asyncio.ensure_future(thread.run(long()))
    await asyncio.to_thread(started.wait, 10)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await asyncio.to_thread(cancelled.wait, 10)
    assert await thread.run(asyncio.sleep(0, result="still serving")) == "still serving"


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
