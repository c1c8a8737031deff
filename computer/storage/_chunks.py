"""File content as chunks: fixed 512 KiB pieces, addressed by SHA-256, lz4-compressed when that helps."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import lz4.block

__all__ = ["CHUNK_SIZE", "Buffer", "ChunkCutter", "chunk_hash", "decode_chunk", "encode_chunk"]

CHUNK_SIZE = 512 * 1024


# Chunk bytes as handed around while writing: a memoryview slices a large piece without copying.
Buffer = bytes | memoryview

# Before compressing a whole chunk, compress this much of it: incompressible data (media, archives,
# random) is then stored raw after compressing only a sample.
_SAMPLE = 64 * 1024


def chunk_hash(data: Buffer) -> bytes:
    """The content address of a chunk (SHA-256: hardware-accelerated, faster than BLAKE2 here)."""
    return hashlib.sha256(data).digest()


def encode_chunk(data: Buffer) -> tuple[Buffer, bool]:
    """``(stored bytes, compressed?)``: lz4 only when it shrinks the chunk by at least 1/16."""
    if len(data) < 64:
        return data, False
    if len(data) > 2 * _SAMPLE:
        sample = data[:_SAMPLE]
        if len(lz4.block.compress(sample, store_size=False)) > _SAMPLE - _SAMPLE // 16:
            return data, False
    packed = lz4.block.compress(data, store_size=False)
    if len(packed) <= len(data) - len(data) // 16:
        return packed, True
    return data, False


def decode_chunk(stored: bytes, compressed: int, size: int) -> bytes:
    """The original bytes of a stored chunk."""
    if compressed:
        out: bytes = lz4.block.decompress(stored, uncompressed_size=size)
        return out
    return stored


class ChunkCutter:
    """Re-cuts pieces of any size into CHUNK_SIZE chunks, holding at most one partial chunk."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.total = 0

    def feed(self, piece: bytes) -> Iterator[Buffer]:
        """Yield every chunk completed by ``piece`` (views into ``piece``: use each before the next)."""
        self.total += len(piece)
        view = memoryview(piece)
        if self._buf:
            need = CHUNK_SIZE - len(self._buf)
            self._buf += view[:need]
            view = view[need:]
            if len(self._buf) < CHUNK_SIZE:
                return
            out = bytes(self._buf)
            self._buf.clear()
            yield out
        while len(view) >= CHUNK_SIZE:
            yield view[:CHUNK_SIZE]
            view = view[CHUNK_SIZE:]
        if len(view):
            self._buf += view

    @property
    def aligned(self) -> bool:
        """True when no partial chunk is held: the next byte starts a chunk."""
        return not self._buf

    def skip(self, size: int) -> None:
        """Count ``size`` bytes of a whole chunk used as it is (only when :attr:`aligned`)."""
        assert not self._buf, "skip() only between chunks"
        self.total += size

    def finish(self) -> bytes | None:
        """The last, partial chunk (None when the content ended on a chunk boundary or was empty)."""
        if not self._buf:
            return None
        out = bytes(self._buf)
        self._buf.clear()
        return out
