"""Helpers shared by the assets tests: records to put into a store and byte streams."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable

from computer.assets import AssetRecord, AssetStore, new_asset_id


def make_record(
    filename: str = "report.txt",
    *,
    lifetime: float = 60.0,
    content_type: str = "text/plain",
    disposition: str = "inline",
    prefix: str | None = None,
) -> AssetRecord:
    now = time.time()
    asset_id = new_asset_id()
    key = f"{prefix}/{asset_id}/{filename}" if prefix else f"{asset_id}/{filename}"
    return AssetRecord(
        key=key,
        filename=filename,
        content_type=content_type,
        disposition=disposition,
        created_at=now,
        expires_at=now + lifetime,
        source_path=f"/workspace/secret-dir/{filename}",
        workspace_id="ws-test",
        prefix=prefix,
    )


async def pieces(data: bytes | Iterable[bytes], size: int = 4096) -> AsyncIterator[bytes]:
    """``data`` as an async stream of small pieces (or the given pieces)."""
    if isinstance(data, bytes):
        for i in range(0, len(data), size):
            yield data[i : i + size]
    else:
        for piece in data:
            yield piece


async def read_all(store: AssetStore, key: str, *, offset: int = 0, length: int | None = None) -> bytes:
    return b"".join([piece async for piece in store.read(key, offset=offset, length=length)])
