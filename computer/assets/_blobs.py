"""A directory of immutable blob files, named so that a sweep can reclaim them without a database.

A blob is named ``<expires_at_ms>-<digest of the key>``: a sweep deletes every blob whose embedded
expiry has passed, unfinished temporary files older than an hour, and blobs whose record is gone.
Writers stage into a temporary file and rename it into place, so a reader never sees half a blob.

Blocking file work runs on lanes (:func:`computer.runtime.offload`: a writer's or a reader's calls in
order on a thread of its own while it has work), never on the event loop's default executor: in an
owner host that pool's threads serve every workspace of the process, and a few large shares on a slow
disk held all of them, so a neighbour's share, and the host's lease renewals, queued behind theirs.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import BinaryIO

from ..runtime import after_lane, offload

__all__ = ["BlobDirectory", "BlobWriter", "key_digest"]

READ_PIECE = 64 * 1024
_TMP_PREFIX = ".tmp-"
_TMP_MAX_AGE = 3600.0  # an unfinished upload older than this was abandoned by a crashed writer
_ORPHAN_GRACE = 60.0  # a blob may exist briefly before its record is written


def key_digest(key: str) -> str:
    """A fixed-length, filesystem- and Redis-safe name for ``key``."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40]


class BlobWriter:
    """One staged blob: ``write`` pieces, then ``commit`` (rename into place) or ``abort``."""

    def __init__(self, directory: BlobDirectory, handle: BinaryIO, tmp: Path) -> None:
        self._directory = directory
        self._handle = handle
        self._tmp = tmp

    async def write(self, piece: bytes) -> None:
        await offload(self, self._handle.write, piece)

    async def commit(self, name: str) -> None:
        def finish() -> None:
            self._handle.close()
            os.replace(self._tmp, self._directory.root / name)

        await offload(self, finish)  # after the writes queued on this writer's lane

    async def abort(self) -> None:
        def discard() -> None:
            self._handle.close()
            self._tmp.unlink(missing_ok=True)

        await offload(self, discard)


class BlobDirectory:
    """Blob files under ``root`` (created on first use)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @staticmethod
    def name_for(key: str, expires_at_ms: int) -> str:
        return f"{expires_at_ms}-{key_digest(key)}"

    async def create(self) -> BlobWriter:
        def open_tmp() -> tuple[BinaryIO, Path]:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self.root / f"{_TMP_PREFIX}{secrets.token_hex(8)}"
            return open(tmp, "xb"), tmp

        handle, tmp = await offload(None, open_tmp)
        return BlobWriter(self, handle, tmp)

    async def open(self, name: str) -> BinaryIO:
        """Open a blob for reading (``FileNotFoundError`` when it is gone)."""
        return await offload(None, open, self.root / name, "rb")

    @staticmethod
    async def read(handle: BinaryIO, offset: int, length: int | None) -> AsyncIterator[bytes]:
        """Yield ``length`` bytes (or up to EOF) from ``offset`` of an open blob, then close it."""
        try:
            await offload(handle, handle.seek, offset)
            left = length
            while left is None or left > 0:
                want = READ_PIECE if left is None else min(READ_PIECE, left)
                piece = await offload(handle, handle.read, want)
                if not piece:
                    return
                if left is not None:
                    left -= len(piece)
                yield piece
        finally:
            # On the lane, after the read: a cancelled read still runs there (closed from the loop, it
            # failed mid-read, or its descriptor's number went to another open first).
            after_lane(handle, handle.close, "closing a blob")

    async def remove(self, name: str) -> None:
        await offload(None, (self.root / name).unlink, missing_ok=True)

    async def sweep(self, now: float, is_live: Callable[[str], Awaitable[bool]] | None = None) -> int:
        """Remove expired blobs, abandoned temporaries and (with ``is_live``) orphans; count removed."""

        def scan() -> list[tuple[str, float]]:
            try:
                with os.scandir(self.root) as entries:
                    return [(e.name, e.stat().st_mtime) for e in entries if e.is_file()]
            except FileNotFoundError:
                return []

        removed = 0
        for name, mtime in await offload(None, scan):
            if name.startswith(_TMP_PREFIX):
                if now - mtime > _TMP_MAX_AGE:
                    await self.remove(name)
                    removed += 1
                continue
            expires_ms, _, digest = name.partition("-")
            if not expires_ms.isdigit() or not digest:
                continue  # not ours: leave foreign files alone
            if int(expires_ms) <= now * 1000:
                await self.remove(name)
                removed += 1
            elif is_live is not None and now - mtime > _ORPHAN_GRACE and not await is_live(digest):
                await self.remove(name)
                removed += 1
        return removed
