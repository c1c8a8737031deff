"""One contract for every ``AssetStore``: SQLite + files and Redis (against a real redis-server)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path

import pytest

from computer.assets import AssetNotFoundError, AssetStore, RedisAssetStore, SqliteAssetStore
from computer.assets._blobs import key_digest

from .asset_helpers import make_record, pieces, read_all

BIG = bytes(range(256)) * 300  # 76,800 bytes: above the Redis inline limit used in these tests


def blob_files(store: AssetStore) -> list[Path]:
    assert isinstance(store, SqliteAssetStore | RedisAssetStore)
    root = store.blobs.root
    return sorted(p for p in root.iterdir() if p.is_file()) if root.exists() else []


def has_blob(store: AssetStore, key: str) -> bool:
    return any(p.name.endswith("-" + key_digest(key)) for p in blob_files(store))


@pytest.mark.parametrize("data", [b"", b"hello world", BIG], ids=["empty", "small", "big"])
async def test_put_then_get_and_read_return_the_same_bytes(store: AssetStore, data: bytes) -> None:
    record = make_record()
    stored = await store.put(record, pieces(data, size=7 if len(data) < 100 else 4099))
    assert stored.size == len(data)
    assert stored.etag == hashlib.sha256(data).hexdigest()
    assert await store.get(record.key) == stored
    assert await read_all(store, record.key) == data


async def test_get_returns_every_recorded_field(store: AssetStore) -> None:
    record = make_record("ünïcode name.csv", content_type="text/csv", disposition="attachment", prefix="a/b")
    stored = await store.put(record, pieces(b"x,y\n"))
    got = await store.get(record.key)
    assert got is not None
    assert (got.filename, got.content_type, got.disposition, got.prefix) == (
        "ünïcode name.csv",
        "text/csv",
        "attachment",
        "a/b",
    )
    assert (got.source_path, got.workspace_id) == (record.source_path, "ws-test")
    assert got.expires_at == pytest.approx(record.expires_at, abs=1e-3)
    assert got == stored


@pytest.mark.parametrize("data", [b"0123456789", BIG], ids=["inline", "blob"])
async def test_read_returns_exactly_the_requested_range(store: AssetStore, data: bytes) -> None:
    record = make_record()
    await store.put(record, pieces(data, size=1000))
    assert await read_all(store, record.key, offset=3, length=4) == data[3:7]
    assert await read_all(store, record.key, offset=len(data) - 2) == data[-2:]
    assert await read_all(store, record.key, offset=len(data)) == b""
    assert await read_all(store, record.key, offset=1, length=0) == b""
    assert await read_all(store, record.key, offset=5, length=10**9) == data[5:]


async def test_big_read_streams_in_bounded_pieces(store: AssetStore) -> None:
    data = b"z" * (300 * 1024)
    record = make_record()
    await store.put(record, pieces(data, size=100_000))
    sizes = [len(p) async for p in store.read(record.key)]
    assert sum(sizes) == len(data)
    assert len(sizes) > 1 and max(sizes) <= 64 * 1024


async def test_unknown_key_is_none_and_unreadable(store: AssetStore) -> None:
    assert await store.get("0123456789ABCDEFGHJKMNPQRS/nothing.txt") is None
    with pytest.raises(AssetNotFoundError):
        await read_all(store, "0123456789ABCDEFGHJKMNPQRS/nothing.txt")


async def test_key_lookup_is_exact(store: AssetStore) -> None:
    record = make_record(prefix="team")
    await store.put(record, pieces(b"data"))
    asset_id = record.key.split("/")[1]
    for near in ["team", f"team/{asset_id}", f"team/{asset_id}/", record.key.upper(), record.key + "x"]:
        assert await store.get(near) is None, near


async def test_put_of_an_already_expired_record_is_rejected(store: AssetStore) -> None:
    with pytest.raises(ValueError):
        await store.put(make_record(lifetime=-1), pieces(b"late"))


async def test_expired_link_is_gone_and_its_bytes_are_reclaimed_by_sweep(store: AssetStore) -> None:
    short, long = make_record(lifetime=1.0), make_record(lifetime=60.0)
    await store.put(short, pieces(BIG))
    await store.put(long, pieces(BIG))
    assert has_blob(store, short.key) and has_blob(store, long.key)
    deadline = time.monotonic() + 5
    while await store.get(short.key) is not None:
        assert time.monotonic() < deadline, "link outlived its expiry"
        await asyncio.sleep(0.1)
    with pytest.raises(AssetNotFoundError):
        await read_all(store, short.key)
    await store.sweep()
    assert not has_blob(store, short.key)
    assert has_blob(store, long.key)
    assert await read_all(store, long.key) == BIG


async def test_delete_removes_the_link_and_its_bytes(store: AssetStore) -> None:
    record, other = make_record(), make_record()
    await store.put(record, pieces(BIG))
    await store.put(other, pieces(b"small"))
    assert await store.delete(record.key) is True
    assert await store.get(record.key) is None
    with pytest.raises(AssetNotFoundError):
        await read_all(store, record.key)
    assert await store.delete(record.key) is False
    assert await read_all(store, other.key) == b"small"
    assert not has_blob(store, record.key)


async def test_a_failing_upload_leaves_nothing_behind(store: AssetStore) -> None:
    async def broken() -> object:
        yield b"a" * 5000
        raise RuntimeError("source went away")

    record = make_record()
    with pytest.raises(RuntimeError):
        await store.put(record, broken())  # type: ignore[arg-type]
    assert await store.get(record.key) is None
    assert blob_files(store) == []


async def test_two_links_to_the_same_bytes_are_independent(store: AssetStore) -> None:
    first, second = make_record(), make_record()
    await store.put(first, pieces(BIG))
    await store.put(second, pieces(BIG))
    await store.delete(first.key)
    assert await read_all(store, second.key) == BIG


async def test_a_second_store_on_the_same_location_sees_the_links(store: AssetStore, tmp_path: Path) -> None:
    record = make_record()
    await store.put(record, pieces(BIG))
    twin: AssetStore
    if isinstance(store, SqliteAssetStore):
        twin = SqliteAssetStore(store.directory)
    else:
        assert isinstance(store, RedisAssetStore)
        twin = RedisAssetStore(store.url, store.blobs.root, namespace=store.namespace)
    try:
        assert await twin.get(record.key) is not None
        assert await read_all(twin, record.key) == BIG
    finally:
        await twin.close()


async def test_a_reader_that_started_keeps_its_bytes_after_the_link_is_deleted(store: AssetStore) -> None:
    record = make_record()
    await store.put(record, pieces(BIG))
    stream = store.read(record.key)
    first = await anext(stream)
    await store.delete(record.key)
    rest = b"".join([p async for p in stream])
    assert first + rest == BIG
