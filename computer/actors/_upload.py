"""A chunked upload: the client sends pieces one call at a time, the owner streams them into one write."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["Upload"]


class Upload:
    """Feeds pieces to ``fs.write_file(path, <async iterable>)`` as they arrive; committed at the end.

    The write runs as a task over a small queue, so the owner holds a few pieces at most, never the file.
    """

    def __init__(self, fs: Any, path: str, mode: int | None, *, fence: list[Any] | None = None) -> None:
        self.path = path
        self.fence = fence or []  # the caller's lock fences, checked again at commit
        self.touched = time.monotonic()
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=4)
        self._task = asyncio.ensure_future(self._write(fs, mode))

    async def _write(self, fs: Any, mode: int | None) -> None:
        try:
            await fs.write_file(self.path, self._pieces(), mode=mode)
        except OSError as exc:
            if exc.filename is None:  # every fs error names its path (a full disk's ENOSPC too)
                exc.filename = self.path
            raise

    async def _pieces(self) -> AsyncIterator[bytes]:
        while (piece := await self._queue.get()) is not None:
            yield piece

    async def _send(self, piece: bytes | None) -> None:
        self.touched = time.monotonic()
        if self._task.done():
            self._task.result()  # raises the write's error (e.g. ENOENT parent)
            raise RuntimeError(f"upload to {self.path} already finished")
        put = asyncio.ensure_future(self._queue.put(piece))
        await asyncio.wait({put, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not put.done():
            put.cancel()
            self._task.result()

    async def put(self, piece: bytes) -> None:
        """Queue one piece; raises as soon as the write has failed."""
        await self._send(piece)

    async def commit(self) -> None:
        """End the data and wait for the write's transaction."""
        await self._send(None)
        await self._task

    async def abort(self) -> None:
        """Cancel the write: nothing of it becomes visible."""
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):  # the write's own failure or cancellation is the point
            pass
