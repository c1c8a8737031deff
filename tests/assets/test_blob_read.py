"""A blob read cancelled mid-piece (a client gone during a download) leaves that piece's read running
on the handle's lane: the handle must be closed there, after the read, never from the loop under it
(the read failed mid-way, or its descriptor's number went to another open first). Observed with
events, never with timings."""

from __future__ import annotations

import asyncio
import threading

from computer.assets._blobs import BlobDirectory

PATIENCE = 30.0  # seconds a waiting step may take before the test gives up (a bound, not a timing)


class _SlowHandle:
    """A blob handle whose read blocks until ``release``; records how it was closed."""

    def __init__(self) -> None:
        self.reading = threading.Event()
        self.release = threading.Event()
        self.closed = threading.Event()
        self.in_read = False
        self.closed_during_read = False
        self.closed_on: int | None = None

    def seek(self, offset: int) -> int:
        return offset

    def read(self, size: int) -> bytes:
        self.in_read = True
        self.reading.set()
        try:
            self.release.wait(PATIENCE)
            return b"x" * size
        finally:
            self.in_read = False

    def close(self) -> None:
        self.closed_during_read = self.in_read
        self.closed_on = threading.get_ident()
        self.closed.set()


async def test_a_cancelled_read_closes_its_handle_after_the_read_on_the_lane() -> None:
    handle = _SlowHandle()

    async def download() -> None:
        async for _ in BlobDirectory.read(handle, 0, 10):  # type: ignore[arg-type]
            pass

    task = asyncio.ensure_future(download())
    try:
        assert await asyncio.to_thread(handle.reading.wait, PATIENCE), "the read never started"
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not handle.closed_during_read, "the handle was closed while its read still ran"
    finally:
        handle.release.set()
    assert await asyncio.to_thread(handle.closed.wait, PATIENCE), "the handle was never closed"
    assert not handle.closed_during_read
    assert handle.closed_on != threading.get_ident(), "closed on the event loop's thread"
