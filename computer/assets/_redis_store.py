"""``RedisAssetStore``: share links as msgpack records in Redis, expiring by themselves (Redis TTL).

A link is two keys that die at the same absolute time (``PXAT``): ``<ns>:m:<digest>`` holds the
msgpack record and, for files up to ``inline_max_bytes``, ``<ns>:d:<digest>`` holds the bytes (read
with ``GETRANGE``). Larger files go to a blob directory (shared storage when several nodes serve
links); their names carry the expiry, so :meth:`RedisAssetStore.sweep` reclaims them once the record
is gone, without a listing of Redis.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import weakref
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import msgpack
import redis.asyncio as aioredis

from ._blobs import READ_PIECE, BlobDirectory, BlobWriter, key_digest
from ._record import AssetRecord
from ._store import AssetNotFoundError

__all__ = ["RedisAssetStore"]

DEFAULT_INLINE_MAX_BYTES = 64 * 1024


class RedisAssetStore:
    """Share links in Redis at ``url``; files above ``inline_max_bytes`` go to ``blob_dir``."""

    def __init__(
        self,
        url: str,
        blob_dir: str | Path,
        *,
        inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES,
        namespace: str = "computer:assets",
        sweep_interval: float = 60.0,
    ) -> None:
        if inline_max_bytes < 0:
            raise ValueError("inline_max_bytes must not be negative")
        self.url = url
        self.blobs = BlobDirectory(blob_dir)
        self.inline_max_bytes = inline_max_bytes
        self.namespace = namespace
        self.sweep_interval = sweep_interval
        self._last_sweep = 0.0
        # redis.asyncio connections belong to the event loop that made them: one client per loop.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = (
            weakref.WeakKeyDictionary()
        )

    def _client(self) -> aioredis.Redis:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = aioredis.Redis.from_url(self.url)
            self._clients[loop] = client
        return client

    def _meta_key(self, digest: str) -> str:
        return f"{self.namespace}:m:{digest}"

    def _data_key(self, digest: str) -> str:
        return f"{self.namespace}:d:{digest}"

    async def put(self, record: AssetRecord, data: AsyncIterable[bytes]) -> AssetRecord:
        if record.expired(time.time()):
            raise ValueError(f"asset {record.key!r} is already expired")
        await self._maybe_sweep()
        sha = hashlib.sha256()
        size = 0
        inline: list[bytes] | None = []
        writer: BlobWriter | None = None
        try:
            async for piece in data:
                if not piece:
                    continue
                sha.update(piece)
                size += len(piece)
                if inline is not None and size <= self.inline_max_bytes:
                    inline.append(piece)
                    continue
                if writer is None:
                    # Over the inline limit: spill what was buffered and stream the rest to a file.
                    writer = await self.blobs.create()
                    for held in inline or ():
                        await writer.write(held)
                    inline = None
                await writer.write(piece)
        except BaseException:
            if writer is not None:
                await writer.abort()
            raise
        stored = replace(record, size=size, etag=sha.hexdigest())
        digest = key_digest(stored.key)
        wire = stored.to_wire()
        wire["blob"] = None
        if writer is not None:
            blob = self.blobs.name_for(stored.key, stored.expires_at_ms)
            await writer.commit(blob)
            wire["blob"] = blob
        try:
            async with self._client().pipeline(transaction=True) as pipe:
                pipe.set(self._meta_key(digest), msgpack.packb(wire), pxat=stored.expires_at_ms, nx=True)
                if inline:
                    pipe.set(self._data_key(digest), b"".join(inline), pxat=stored.expires_at_ms)
                created, *_ = await pipe.execute()
            if not created:
                raise FileExistsError(f"asset key already in use: {stored.key}")
        except BaseException:
            if wire["blob"] is not None:
                await self.blobs.remove(wire["blob"])
            raise
        return stored

    async def _lookup(self, key: str) -> dict[str, Any] | None:
        raw = await self._client().get(self._meta_key(key_digest(key)))
        if raw is None:
            return None
        wire: dict[str, Any] = msgpack.unpackb(raw)
        if wire.get("key") != key or time.time() >= float(wire["expires_at"]):
            return None
        return wire

    async def get(self, key: str) -> AssetRecord | None:
        await self._maybe_sweep()
        wire = await self._lookup(key)
        return None if wire is None else AssetRecord.from_wire(wire)

    async def read(self, key: str, *, offset: int = 0, length: int | None = None) -> AsyncIterator[bytes]:
        if offset < 0 or (length is not None and length < 0):
            raise ValueError("offset and length must not be negative")
        wire = await self._lookup(key)
        if wire is None:
            raise AssetNotFoundError(key)
        size = int(wire["size"])
        end = size if length is None else min(size, offset + length)
        if wire["blob"] is not None:
            try:
                handle = await self.blobs.open(wire["blob"])
            except FileNotFoundError:
                raise AssetNotFoundError(key) from None
            async for piece in self.blobs.read(handle, offset, end - offset if end > offset else 0):
                yield piece
            return
        data_key = self._data_key(key_digest(key))
        position = offset
        while position < end:
            stop = min(end, position + READ_PIECE)
            piece = cast(bytes, await self._client().getrange(data_key, position, stop - 1))
            if len(piece) != stop - position:
                # The link expired between pieces (or before the first): never serve a short body silently.
                raise AssetNotFoundError(key)
            position = stop
            yield piece

    async def delete(self, key: str) -> bool:
        digest = key_digest(key)
        wire = await self._lookup(key)
        removed = await self._client().delete(self._meta_key(digest), self._data_key(digest))
        if wire is not None and wire["blob"] is not None:
            await self.blobs.remove(wire["blob"])
        return wire is not None and bool(removed)

    async def delete_workspace_links(self, workspace_id: str) -> int:
        """Remove every link shared from workspace ``workspace_id`` (its URLs answer 404); how many.

        Records are keyed by link, not by workspace: this scans the namespace's records (every link
        expires within 7 days, so there are only as many as were shared in that time).
        """
        client = self._client()
        removed = 0
        async for meta_key in client.scan_iter(match=f"{self.namespace}:m:*", count=500):
            raw = await client.get(meta_key)
            if raw is None:
                continue
            wire: dict[str, Any] = msgpack.unpackb(raw)
            if wire.get("workspace_id") != workspace_id:
                continue
            digest = key_digest(str(wire["key"]))
            if await client.delete(self._meta_key(digest), self._data_key(digest)):
                removed += 1
            if wire.get("blob") is not None:
                await self.blobs.remove(wire["blob"])
        return removed

    async def sweep(self) -> int:
        """Reclaim blob files whose record expired or is gone (Redis drops the records itself)."""
        now = time.time()
        self._last_sweep = now
        client = self._client()

        async def is_live(digest: str) -> bool:
            return bool(await client.exists(self._meta_key(digest)))

        return await self.blobs.sweep(now, is_live)

    async def _maybe_sweep(self) -> None:
        if time.time() - self._last_sweep >= self.sweep_interval:
            await self.sweep()

    async def close(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        client = self._clients.pop(loop, None)
        if client is not None:
            await client.aclose()

    def __repr__(self) -> str:
        return f"RedisAssetStore({self.url!r}, {str(self.blobs.root)!r})"
