"""``OutputSpool``: streams a run's full output into a workspace file, with bounded memory.

The bytes travel through a small bounded queue into one streamed ``fs.write_file`` (a single
transaction, committed when the stream ends), so a flood of any size costs a few chunks of memory
and the producer slows down to the speed of the store instead of buffering.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from ._output_dir import fs_caller, make_output_dir

__all__ = ["OutputSpool"]

# Chunks in flight between the producer and the store (each at most 256 KiB).
_QUEUE_CHUNKS = 4


class OutputSpool:
    """One log file being written. ``failed`` is set (and bytes dropped) if the store refuses it."""

    def __init__(self, fs: Any, path: str) -> None:
        self.fs = fs
        self.path = path
        self.failed: str | None = None
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=_QUEUE_CHUNKS)
        self._task: asyncio.Task[None] | None = None

    async def start(self, head: bytes) -> None:
        """Open the file (creating its directory) and write ``head``, the bytes kept so far."""
        parent = self.path.rsplit("/", 1)[0] or "/"
        try:
            await self._own_path()
        except OSError as exc:
            self.failed = f"cannot create {parent}: {exc}"
            return
        self._task = asyncio.create_task(self._write(), name=f"spool {self.path}")
        await self.write(head)

    async def _own_path(self) -> None:
        """Make the log's path its own: its directory a directory (a file or a link a program put there
        moved aside, ``_output_dir``), no link at its name (removed: the name is this run's). A python
        program's ``workspace`` calls can put a link there (a shell run's ``ln -s``, renamed): the log
        was written where it led, the journal's record of another run too (``/.computer/exec``, which
        those calls may not change), read back after a restart as the program printed it."""
        parent = self.path.rsplit("/", 1)[0] or "/"
        await make_output_dir(fs_caller(self.fs), parent)
        try:
            await self.fs.readlink(self.path)
        except OSError:
            return  # no link there
        await self.fs.rm(self.path)

    async def _write(self) -> None:
        await self.fs.write_file(self.path, self._chunks())

    async def _chunks(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self._queue.get()
            if chunk is None:
                # The write resolves its path when the stream ends, with no pause after this look: a
                # link put there while the log streamed is not followed either.
                await self._own_path()
                return
            yield chunk

    async def write(self, data: bytes) -> None:
        """Queue bytes; waits while the queue is full (back-pressure on the program)."""
        task = self._task
        if task is None or self.failed or not data:
            return
        if task.done():
            self._note_failure(task)
            return
        put = asyncio.ensure_future(self._queue.put(data))
        done, _ = await asyncio.wait({put, task}, return_when=asyncio.FIRST_COMPLETED)
        if put not in done:
            put.cancel()
            self._note_failure(task)

    async def close(self) -> bool:
        """Finish the file; True when it was saved whole."""
        task = self._task
        if task is None:
            return False
        if not task.done():
            put = asyncio.ensure_future(self._queue.put(None))
            await asyncio.wait({put, task}, return_when=asyncio.FIRST_COMPLETED)
            if not put.done():
                put.cancel()
        with contextlib.suppress(Exception):  # the task's failure is noted just below
            await asyncio.shield(task)
        self._note_failure(task)
        return self.failed is None

    async def abort(self) -> None:
        """Stop without committing the file."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):  # aborted: the file is not committed anyway
                await task
        self.failed = self.failed or "aborted"

    def _note_failure(self, task: asyncio.Task[None]) -> None:
        if task.done() and not task.cancelled() and task.exception() is not None:
            self.failed = self.failed or f"cannot save {self.path}: {task.exception()}"
