"""Workspace loops of one owner host share one thread pool (issue 20): a workspace leaving the host
(its loop closed) must not end ``to_thread`` for the others."""

from __future__ import annotations

import asyncio
import threading

from computer.actors._loop_thread import LoopThread, SharedThreadPool


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
