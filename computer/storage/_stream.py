"""A ranged, snapshot-consistent read of one file, one chunk at a time."""

from __future__ import annotations

import weakref
from collections.abc import Callable

from ._chunks import CHUNK_SIZE
from ._chunkstore import ChunkStore

__all__ = ["ChunkStream"]


class ChunkStream:
    """Async iterator over the bytes ``[offset, offset + length)`` of a file version.

    The chunk list is taken and pinned when the stream is created, so an overwrite or removal
    meanwhile changes nothing it yields; the pins go when it is exhausted, closed or collected.
    An error found when opening (missing file…) is raised by the first ``__anext__``.
    """

    def __init__(
        self,
        store: ChunkStore,
        chunks: list[tuple[int, int]],
        offset: int,
        end: int,
        on_done: Callable[[], None],
        error: BaseException | None = None,
    ) -> None:
        self._store = store
        self._chunks = chunks  # (index, chunk id) overlapping the range, in order
        self._offset = offset
        self._end = end
        self._pos = 0
        self._error = error
        self._on_done = on_done
        ids = [cid for _, cid in chunks]
        store.pin(ids)
        # Unpin even if the caller drops the stream without closing it; the sweep happens later.
        self._finalizer = weakref.finalize(self, store.unpin, ids)

    def __aiter__(self) -> ChunkStream:
        return self

    async def __anext__(self) -> bytes:
        if self._error is not None:
            err, self._error = self._error, None
            self._release()
            raise err
        while self._pos < len(self._chunks):
            index, cid = self._chunks[self._pos]
            self._pos += 1
            start = index * CHUNK_SIZE
            try:
                # Only the requested range of the chunk is read (and copied).
                data = self._store.read(cid, max(self._offset - start, 0), self._end - start)
            except BaseException:
                self._release()
                raise
            if data:
                return data
        self._release()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._pos = len(self._chunks)
        self._error = None
        self._release()

    def _release(self) -> None:
        if self._finalizer.alive:
            self._finalizer()
            self._on_done()
