"""The workspace, not its store, schedules the batched deletion of freed small chunks (issue 24 item 5):
a batch goes in a transaction of its own ``GARBAGE_DELAY`` after the mutation that made it, on the
running event loop, and closing the workspace ends what it scheduled."""

from __future__ import annotations

import asyncio
import gc
import weakref

import computer
from computer.storage.filesystem import GARBAGE_DELAY


async def _remove_many(ws: computer.Workspace, prefix: str, n: int = 300) -> None:
    files = {f"/g/{prefix}{i}": b"%s %d" % (prefix.encode(), i) for i in range(n)}
    ws.fs.commit_batch(files)
    ws.fs.commit_batch(dict.fromkeys(files))


async def _until_collected(ws: computer.Workspace) -> bool:
    await asyncio.sleep(GARBAGE_DELAY)  # the earliest the batch can go
    for _ in range(100):  # bounded: 5 s more (the timer runs when the event loop gets to it)
        if not ws.fs.garbage_pending:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_batch_of_small_garbage_is_freed_soon_after_the_mutation_not_inside_it() -> None:
    async with computer.Workspace() as ws:
        await _remove_many(ws, "f", 600)
        assert ws.fs.garbage_pending  # not yet: off the removal's transaction
        assert await _until_collected(ws)


def test_garbage_held_when_an_event_loop_ended_is_freed_under_the_next() -> None:
    ws = computer.Workspace()

    async def ended_with_its_timer_set() -> None:
        await _remove_many(ws, "a")

    async def waits() -> bool:
        await _remove_many(ws, "b")
        return await _until_collected(ws)

    try:
        asyncio.run(ended_with_its_timer_set())
        assert ws.fs.garbage_pending
        assert asyncio.run(waits())
    finally:
        asyncio.run(ws.close())


async def test_closing_the_workspace_ends_the_collection_it_scheduled() -> None:
    ws = computer.Workspace()
    await _remove_many(ws, "f")
    assert ws.fs.garbage_pending
    await ws.close()
    assert not ws.fs.garbage_pending  # the close freed it
    gone = weakref.ref(ws)
    del ws
    gc.collect()
    assert gone() is None  # no timer of the loop holds the closed workspace
