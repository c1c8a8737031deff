"""Cluster faults of the directory's clock and history: a node whose clock is off by minutes judging a
deletion's lease; Redis flushed between a deletion's lease and its removal; a Redis restored from an
old snapshot (an older epoch, another node's lease) under a live owner."""

from __future__ import annotations

import asyncio
import errno
import time
import uuid
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
from owner_models import kill_owner

import computer
from computer.actors import _delete as delete_module
from computer.actors import take_lease
from computer.actors._restore import restore_lost_lease
from computer.actors.directory import DELETING, RedisDirectory, WorkspaceRecord
from computer.config import Settings
from computer.storage import FileSystem

from .test_cluster_faults4 import _record, _still_held, _the_same_owner_served
from .test_redis_restart import RedisProcess

SKEW = 600.0  # a node's clock ten minutes off


def test_a_deletions_lease_is_judged_by_redis_clock_not_a_skewed_node(
    own_redis: RedisProcess, monkeypatch: pytest.MonkeyPatch, record_property: Any
) -> None:
    """A deletion's lease written by one node and read by another whose clock is ten minutes off (this
    process's ``time.time`` shifted): a node ahead neither takes over the live deletion nor sees it
    over; a dead deletion written by a node ahead is over once its lease ran out by Redis's clock.
    Before, each node judged the expiry by its own clock: the node ahead took the live deletion's lease
    over (its owner then served a file the deletion unlinked), and a deletion written by a node ahead
    refused every owner for ten minutes after it died."""
    real = time.time
    directory = RedisDirectory(own_redis.url)
    try:
        directory.acquire_lease("ws", DELETING, "deletion", 60.0)  # a deletion on a node on time
        monkeypatch.setattr(time, "time", lambda: real() + SKEW)  # this node: ten minutes ahead
        record = directory.get("ws")
        assert record is not None and record.lease_live()  # still being deleted, seen from here
        with pytest.raises(OSError) as refused:
            directory.acquire_lease("ws", "node-ahead", "owner", 30.0)
        assert refused.value.errno == errno.EBUSY
        assert directory.get("ws").owner == "deletion"  # type: ignore[union-attr]

        directory.acquire_lease("dead", DELETING, "deletion", 0.3)  # written ahead; it dies at once
        monkeypatch.setattr(time, "time", real)  # this node: on time again
        time.sleep(0.5)  # the deletion's lease running out is the behaviour under test: time must pass
        record = directory.get("dead")
        assert record is not None and not record.lease_live()
        assert directory.acquire_lease("dead", "node-on-time", "owner", 30.0) == 2  # no EBUSY
    finally:
        directory.close()
    record_property("clock_skew_s", SKEW)


def _settings(tmp_path: Path, url: str) -> Settings:
    return Settings(data_dir=tmp_path / "data", redis_url=url)


def _old_owner(directory: RedisDirectory, path: Path) -> tuple[str, int]:
    """An owner on node ``n1`` that made the workspace's file and wrote ``/old`` into it."""
    owner, epoch = take_lease(directory, "ws", path, node="n1", host=None, ttl=30.0)
    path.parent.mkdir(parents=True, exist_ok=True)
    fs = FileSystem.open(str(path), fence=epoch, garbage_timer=False)
    try:
        asyncio.run(fs.write_file("/old", b"old"))
    finally:
        fs.close()
    return owner, epoch


def _write_back(directory: RedisDirectory, path: Path, owner: str, epoch: int) -> bool:
    """What the owner on ``n1`` does when its renewal finds no record (``_restore.py``)."""
    return restore_lost_lease(
        directory, "ws", path, node="n1", host=None, owner_id=owner, epoch=epoch, ttl=30.0, last_active=None
    )


def test_an_owner_writing_its_lease_back_as_redis_is_flushed_before_the_deletions_fence_leaves_no_record(
    own_redis: RedisProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis flushed after the deletion took its lease and before it fenced the file: the live owner
    finds no record, its file still at its epoch, and writes its lease back. The deletion finds that
    record (an older epoch than its own), takes the lease again and removes everything: no record
    names the gone file. Before, the owner's record stayed, live and active: every later
    ``get_workspace`` of the name was "unavailable" (its file missing, the directory knowing it)."""
    config = _settings(tmp_path, own_redis.url)
    directory = RedisDirectory(own_redis.url)
    path = config.workspaces_dir / "ws.sqlite"
    owner, epoch = _old_owner(directory, path)
    fence = delete_module._fence
    written_back: list[bool] = []

    def flushed_first(where: Path, fenced: int) -> str | None:
        if not written_back:
            redis.Redis.from_url(own_redis.url).flushall()
            written_back.append(_write_back(directory, path, owner, epoch))
        return fence(where, fenced)

    monkeypatch.setattr(delete_module, "_fence", flushed_first)
    try:
        deleted = delete_module._remove(config, directory, "ws", False)
        assert written_back == [True]  # the owner did write its lease back in the window
        assert deleted.bytes > 0 and not path.exists()
        assert directory.get("ws") is None and directory.names() == []
        assert not _write_back(directory, path, owner, epoch)  # its next renewal: the file is gone
        assert directory.get("ws") is None
    finally:
        directory.close()


def test_a_deletion_never_removes_a_file_an_owner_opened_after_redis_was_flushed(
    own_redis: RedisProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis flushed right after the deletion fenced the file: the deletion's record is gone, so a new
    owner takes a lease (an epoch above the fence) and opens the file, acknowledging a write. The
    deletion sees that owner's newer record and refuses (EBUSY), nothing removed: the new owner's write
    is there. Before, the deletion unlinked the file under the new owner, its acknowledged write lost."""
    config = _settings(tmp_path, own_redis.url)
    directory = RedisDirectory(own_redis.url)
    path = config.workspaces_dir / "ws.sqlite"
    _old_owner(directory, path)
    fence = delete_module._fence
    newer: list[tuple[str, int]] = []

    def flushed_after(where: Path, fenced: int) -> str | None:
        workspace_id = fence(where, fenced)
        if not newer:
            redis.Redis.from_url(own_redis.url).flushall()
            newer.append(take_lease(directory, "ws", path, node="n2", host=None, ttl=30.0))
            fs = FileSystem.open(str(path), fence=newer[0][1], garbage_timer=False)
            try:
                asyncio.run(fs.write_file("/new", b"acknowledged"))
            finally:
                fs.close()
        return workspace_id

    monkeypatch.setattr(delete_module, "_fence", flushed_after)
    try:
        with pytest.raises(OSError) as refused:
            delete_module._remove(config, directory, "ws", False)
        assert refused.value.errno == errno.EBUSY
        assert newer and newer[0][1] > 1
        record = directory.get("ws")
        assert record is not None and (record.owner, record.epoch) == newer[0]
        fs = FileSystem.open(str(path), fence=newer[0][1], garbage_timer=False)
        try:
            assert asyncio.run(fs.read_file("/new")) == b"acknowledged"
            assert asyncio.run(fs.read_file("/old")) == b"old"
        finally:
            fs.close()
    finally:
        directory.close()


async def test_a_live_owner_restores_its_record_over_an_old_snapshots(
    on_redis: Settings, own_redis: RedisProcess, record_property: Any
) -> None:
    """Redis restored from an old snapshot under a live owner holding a lock: the workspace's record is
    its first activation's (epoch 1), live, on another node. The owner's file carries epoch 2, so the
    record is stale: the owner writes its own back and serves on, its lock table with it. Before, its
    next renewal read the old record as a takeover: the owner left, and the holder's lock was lost."""
    name = f"rel-stale-{uuid.uuid4().hex[:10]}"
    config = on_redis
    async with computer.get_workspace(name) as first:
        await first.fs.write_file("/counter", b"0")
        await kill_owner(first.handle)  # the first activation ends: the next is epoch 2
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        before = await a.handle.stats.remote()
        assert before["epoch"] == 2
        async with a.locks.hold(["/counter"]):
            seen = int(await a.fs.read_file("/counter"))
            mine = _record(config, name)
            elsewhere = "f" * 56, "elsewhere/10.9.9.9"  # another node's lease, live for ten minutes
            old = WorkspaceRecord(
                name, elsewhere[0], "old-owner", 1, time.time() + 600, 0.0, "active", 0, elsewhere[1]
            )
            client = redis.Redis.from_url(own_redis.url)
            client.set(f"computer:dir:ws:{name}", msgpack.packb(old.to_wire()))
            await _wrote_its_own_back(config, name, mine, stale=1)
            waiting = await _still_held(a, b, seen)
        await _the_same_owner_served(a, before, waiting)
        assert await b.fs.read_file("/counter") == b"1"
    record_property("stale_records", 1)


async def _wrote_its_own_back(config: Settings, name: str, mine: WorkspaceRecord, *, stale: int) -> None:
    """The owner's next renewal rounds (every 0.5 s) write its record ``mine`` over the stale one of epoch
    ``stale``: waited for, bounded."""
    deadline = time.monotonic() + 30
    while _record(config, name).epoch == stale and time.monotonic() < deadline:  # noqa: ASYNC110 - a bounded poll
        await asyncio.sleep(0.1)
    record = _record(config, name)
    assert (record.owner, record.epoch, record.node) == (mine.owner, mine.epoch, mine.node)
