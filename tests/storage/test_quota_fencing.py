"""Quota (ENOSPC) and owner fencing (EROFS)."""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from computer.storage import BOOKKEEPING_BYTES, BOOKKEEPING_DIR, FileSystem


async def test_write_over_quota_is_enospc_naming_path_and_writes_nothing() -> None:
    fs = FileSystem.open(None, max_bytes=100)
    try:
        await fs.write_file("/a", b"x" * 60)
        rev = fs.rev
        with pytest.raises(OSError) as info:
            await fs.write_file("/b", b"y" * 50)
        assert info.value.errno == errno.ENOSPC
        assert info.value.filename == "/b"
        assert not await fs.exists("/b")
        assert fs.rev == rev
        await fs.write_file("/a", b"z" * 100)  # replacing counts the old size out
        assert fs.stats()["logical_bytes"] == 100
    finally:
        fs.close()


async def test_streamed_write_over_quota_stops_early() -> None:
    fs = FileSystem.open(None, max_bytes=1024 * 1024)
    pulled = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 1
            yield os.urandom(256 * 1024)

    try:
        with pytest.raises(OSError) as info:
            await fs.write_file("/big", endless())
        assert info.value.errno == errno.ENOSPC
        assert pulled <= 8
        assert not await fs.exists("/big")
        assert fs.stats()["chunks"] == 0
    finally:
        fs.close()


async def test_copy_over_quota_is_enospc() -> None:
    fs = FileSystem.open(None, max_bytes=100)
    try:
        await fs.write_file("/a", b"x" * 60)
        with pytest.raises(OSError) as info:
            await fs.copy("/a", "/b")
        assert info.value.errno == errno.ENOSPC
        assert not await fs.exists("/b")
    finally:
        fs.close()


async def test_removal_frees_quota() -> None:
    fs = FileSystem.open(None, max_bytes=100)
    try:
        await fs.mkdir("/d")
        await fs.write_file("/d/a", b"x" * 100)
        await fs.rm("/d", recursive=True)
        await fs.write_file("/b", b"y" * 100)
    finally:
        fs.close()


async def test_bookkeeping_is_accounted_apart_from_the_quota_up_to_its_own_bound() -> None:
    """``/.computer`` (journal records, saved output) does not count against ``max_bytes``: the
    workspace's own files still fill it exactly, and bookkeeping goes on past it, up to
    ``BOOKKEEPING_BYTES`` more. Before, our own records filled a workspace's quota, and at the quota
    its runs failed on them."""
    fs = FileSystem.open(None, max_bytes=1000)
    try:
        await fs.mkdir(f"{BOOKKEEPING_DIR}/exec", recursive=True)
        await fs.write_file(f"{BOOKKEEPING_DIR}/exec/r1.json", b"j" * 600)
        await fs.write_file("/workspace.bin", b"w" * 1000)  # the workspace's own: exactly its limit
        await fs.write_file(f"{BOOKKEEPING_DIR}/exec/r2.json", b"k" * 600)  # past it: bookkeeping
        for path in ("/one-more", "/workspace.bin"):  # the workspace's own are held to it
            with pytest.raises(OSError) as full:
                await fs.write_file(path, b"x" * (1 if path == "/one-more" else 1001))
            assert (full.value.errno, full.value.filename) == (errno.ENOSPC, path)
        with pytest.raises(OSError) as bounded:  # bookkeeping past its own bound, the store past its limit
            await fs.write_file(f"{BOOKKEEPING_DIR}/big", b"b" * (BOOKKEEPING_BYTES - 1000))
        assert bounded.value.errno == errno.ENOSPC and "/.computer" in str(bounded.value)
        await fs.rm(f"{BOOKKEEPING_DIR}/exec/r1.json")
        with pytest.raises(OSError):  # what bookkeeping frees is not the workspace's room
            await fs.write_file("/one-more", b"x")
        assert fs.stats()["logical_bytes"] == 1600
    finally:
        fs.close()


async def test_newer_owner_fences_out_the_old_one(tmp_path: Path) -> None:
    path = str(tmp_path / "ws.sqlite")
    old = FileSystem.open(path, fence=1)
    await old.write_file("/f", b"old owner")
    assert not old.fenced
    new = FileSystem.open(path, fence=2)
    try:
        assert old.fenced and not new.fenced  # what an owner asks once a write was refused
        rev = new.rev
        with pytest.raises(OSError) as info:
            await old.write_file("/f", b"zombie write")
        assert info.value.errno == errno.EROFS
        assert "newer owner" in str(info.value)
        for call in (old.mkdir("/d"), old.rm("/f"), old.rename("/f", "/g"), old.symlink("/f", "/l")):
            with pytest.raises(OSError) as info:
                await call
            assert info.value.errno == errno.EROFS
        with pytest.raises(OSError):
            old.commit_batch({"/x": b"1"})
        assert await new.read_file("/f") == b"old owner"
        assert new.rev == rev
        await new.write_file("/f", b"new owner")
        assert await new.read_file("/f") == b"new owner"
    finally:
        old.close()
        new.close()


async def test_opening_with_an_older_fence_keeps_the_newer_epoch(tmp_path: Path) -> None:
    path = str(tmp_path / "ws.sqlite")
    FileSystem.open(path, fence=5).close()
    stale = FileSystem.open(path, fence=3)
    try:
        with pytest.raises(OSError) as info:
            await stale.write_file("/f", b"")
        assert info.value.errno == errno.EROFS
    finally:
        stale.close()
    current = FileSystem.open(path, fence=5)
    try:
        await current.write_file("/f", b"ok")
    finally:
        current.close()


async def test_a_second_connection_sees_changes_made_by_the_other(tmp_path: Path) -> None:
    path = str(tmp_path / "ws.sqlite")
    a, b = FileSystem.open(path), FileSystem.open(path)
    try:
        await a.mkdir("/d")
        await a.write_file("/d/f", b"from a")
        assert await a.read_file("/d/f") == b"from a"  # now cached by a
        assert await b.read_file("/d/f") == b"from a"
        await b.rename("/d", "/e")
        await b.write_file("/e/g", b"from b")
        with pytest.raises(FileNotFoundError):
            await a.read_file("/d/f")
        assert await a.read_file("/e/f") == b"from a"
        assert a.rev == b.rev
        assert a.stats()["logical_bytes"] == len(b"from a") + len(b"from b")
    finally:
        a.close()
        b.close()


async def test_a_write_right_after_another_connections_commit_sees_it(tmp_path: Path) -> None:
    # write_file/rm/mkdir/symlink check for foreign commits under their write lock, not before
    path = str(tmp_path / "ws.sqlite")
    a, b = FileSystem.open(path), FileSystem.open(path)
    try:
        await a.mkdir("/d")
        await a.write_file("/d/f", b"1")  # /d and /d/f now cached by a
        await b.rename("/d", "/e")
        await b.mkdir("/d")
        await a.write_file("/d/f", b"2")
        assert await b.read_file("/d/f") == b"2"
        assert await b.read_file("/e/f") == b"1"
        await b.rename("/d", "/g")
        with pytest.raises(FileNotFoundError):
            await a.rm("/d/f")
        await a.rm("/d/f", force=True)
        await a.rm("/g/f")
        await a.mkdir("/d")
        await a.symlink("/g", "/d/l")
        assert [e.name for e in await b.readdir("/d")] == ["l"]
        assert not await b.exists("/g/f")
        assert a.rev == b.rev
    finally:
        a.close()
        b.close()


async def test_a_fenced_out_owner_reports_missing_paths_before_its_fence(tmp_path: Path) -> None:
    path = str(tmp_path / "ws.sqlite")
    old = FileSystem.open(path, fence=1)
    await old.mkdir("/d")
    await old.write_file("/d/f", b"x")
    new = FileSystem.open(path, fence=2)
    try:
        await old.rm("/missing", force=True)  # nothing to do: no error, as for any owner
        with pytest.raises(FileNotFoundError):
            await old.rm("/missing")
        with pytest.raises(OSError) as info:
            await old.rm("/d")
        assert info.value.errno == errno.ENOTEMPTY
        with pytest.raises(OSError) as info:
            await old.rm("/d/f")
        assert info.value.errno == errno.EROFS
        assert await new.read_file("/d/f") == b"x"
    finally:
        old.close()
        new.close()
