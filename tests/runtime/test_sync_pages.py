"""A pull cancelled while a worker thread is inside its pages generator (the race behind a live
sandbox's "sync failed: ValueError('generator already executing')" under load): closing the pages
neither raises nor cuts the step short; the generator is closed once the step is out."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Generator
from typing import Any

from computer.runtime._sync import _Pages


async def test_closing_pages_while_a_thread_steps_them_waits_for_the_step() -> None:
    inside, go_on, closed = threading.Event(), threading.Event(), threading.Event()

    def pages() -> Generator[Any, None, None]:
        try:
            inside.set()
            go_on.wait(10)  # a slow read of a file
            yield "page 1"
            yield "page 2"
        finally:
            closed.set()

    stepped = _Pages(pages())
    step = asyncio.ensure_future(asyncio.to_thread(stepped.next))
    assert await asyncio.to_thread(inside.wait, 10)
    step.cancel()  # the pull is cancelled: the thread stays inside the generator
    stepped.close()  # a plain generator's close() raised "generator already executing" here
    assert not closed.is_set()
    go_on.set()
    assert await asyncio.to_thread(closed.wait, 10)  # closed after the step, on a thread of its own


async def test_pages_not_being_stepped_close_at_once() -> None:
    closed = threading.Event()

    def pages() -> Generator[Any, None, None]:
        try:
            yield "page 1"
        finally:
            closed.set()

    stepped = _Pages(pages())
    assert stepped.next() == "page 1"
    stepped.close()
    assert closed.is_set()
    assert stepped.next() is None
