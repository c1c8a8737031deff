"""Cluster faults of the directory's history across a deletion: a Redis snapshot taken before a
workspace was deleted and made anew (its record of a higher epoch than the new file's owner), restored
under the new owner."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
from owner_models import kill_owner

import computer
from computer.actors import take_lease
from computer.actors._restore import restore_lost_lease
from computer.actors.directory import RedisDirectory, WorkspaceRecord
from computer.config import Settings
from computer.storage import FileSystem

from .test_cluster_faults4 import _record, _still_held, _the_same_owner_served
from .test_redis_restart import RedisProcess


def _snapshot_record(url: str, name: str, epoch: int, *, expires: float, state: str = "active") -> None:
    """Put back what an old snapshot held for ``name``: its first life's record, on another node."""
    old = WorkspaceRecord(
        name,
        "f" * 56,
        "old-owner",
        epoch,
        expires,
        0.0,
        state,
        0,
        "elsewhere/10.9.9.9",  # type: ignore[arg-type]
    )
    redis.Redis.from_url(url).set(f"computer:dir:ws:{name}", msgpack.packb(old.to_wire()))


def test_a_record_of_a_higher_epoch_is_written_over_only_once_its_lease_is_over(
    own_redis: RedisProcess, tmp_path: Path
) -> None:
    """The new file's owner (epoch 1) finds a record of epoch 5: the deleted workspace's, from a snapshot.
    Its lease over (hibernated, or live when the snapshot was taken and run out since), nobody can be
    opening the file with it: the owner writes its own back. A live one may be a takeover on its way to
    the file (its fence comes next): the owner leaves, as before. A file fenced above the owner's epoch
    is a takeover whatever the record says. Before, every higher epoch read as a takeover."""
    directory = RedisDirectory(own_redis.url)
    path = tmp_path / "ws.sqlite"
    FileSystem.open(str(path), garbage_timer=False).close()
    owner, epoch = take_lease(directory, "ws", path, node="n1", host=None, ttl=30.0)
    FileSystem.open(str(path), fence=epoch, garbage_timer=False).close()
    assert epoch == 1

    def write_back() -> bool:
        return restore_lost_lease(
            directory,
            "ws",
            path,
            node="n1",
            host=None,
            owner_id=owner,
            epoch=epoch,
            ttl=30.0,
            last_active=None,
        )

    try:
        for state, expires in (("hibernating", 0.0), ("active", time.time() - 5.0)):
            _snapshot_record(own_redis.url, "ws", 5, expires=expires, state=state)
            assert write_back(), state
            record = directory.get("ws")
            assert record is not None and (record.owner, record.epoch, record.node) == (owner, 1, "n1")
            assert record.lease_live()
            assert directory.renew_lease("ws", owner, 1, 30.0)
        _snapshot_record(own_redis.url, "ws", 5, expires=time.time() + 60.0)  # live: maybe a takeover
        assert not write_back()
        assert directory.get("ws").owner == "old-owner"  # type: ignore[union-attr]
        _snapshot_record(own_redis.url, "ws", 5, expires=0.0, state="hibernating")
        FileSystem.open(str(path), fence=6, garbage_timer=False).close()  # a newer owner opened the file
        assert not write_back()
        assert directory.get("ws").owner == "old-owner"  # type: ignore[union-attr]
    finally:
        directory.close()


async def test_a_snapshot_from_before_a_deletion_does_not_take_the_new_workspace_over(
    on_redis: Settings, own_redis: RedisProcess, record_property: Any
) -> None:
    """A workspace lived twice (epoch 2); Redis's state was saved after its owner's lease ran out (its
    record copied, as a dump holds it). It was deleted and made anew (epoch 1), a client holds a lock
    there, and Redis comes back from that dump: the name's record says epoch 2, on another life's owner.
    The owner's file is the new one at epoch 1, nobody fenced it: the owner writes its own record back
    and serves on, its lock table with it. Before, its next renewal read the higher epoch as a
    takeover: the owner left and the holder's lock was lost (``LockLostError``)."""
    name = f"rel-snap-{uuid.uuid4().hex[:10]}"
    config = on_redis
    client = redis.Redis.from_url(own_redis.url)
    for _ in range(2):
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/old", b"old")
            await kill_owner(ws.handle)
    deadline = time.monotonic() + 30
    while _record(config, name).lease_live() and time.monotonic() < deadline:  # noqa: ASYNC110 - a bounded poll
        await asyncio.sleep(0.1)  # the killed owner's lease running out (lock_lease 1.5 s): bounded
    key = f"computer:dir:ws:{name}"
    snapshot = client.get(key)
    assert snapshot is not None and _record(config, name).epoch == 2
    await computer.delete_workspace(name)
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        await a.fs.write_file("/counter", b"0")
        before = await a.handle.stats.remote()
        assert before["epoch"] == 1
        async with a.locks.hold(["/counter"]):
            seen = int(await a.fs.read_file("/counter"))
            mine = _record(config, name)
            client.set(key, snapshot)  # Redis back from the old dump
            deadline = time.monotonic() + 30
            while _record(config, name).epoch == 2 and time.monotonic() < deadline:  # noqa: ASYNC110 - a bounded poll
                await asyncio.sleep(0.1)  # the owner's next renewal rounds (every 0.5 s): bounded
            record = _record(config, name)
            assert (record.owner, record.epoch, record.node) == (mine.owner, 1, mine.node)
            waiting = await _still_held(a, b, seen)
        await _the_same_owner_served(a, before, waiting)
        assert await b.fs.read_file("/counter") == b"1"
        with pytest.raises(FileNotFoundError):
            await b.fs.read_file("/old")
    record_property("snapshots_from_before_a_deletion", 1)
