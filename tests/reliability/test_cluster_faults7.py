"""Deleted or lost: a Redis restored from a dump taken before a workspace's deletion brings the name's
record back, naming a file the deletion removed. The deletion's tombstone (the head's file registry,
``computer/actors/directory/_registry.py``) says so: the name is new again (SPEC section 9: a workspace
is created on first use), while a file lost behind the system's back is still "unavailable", never made
anew empty. Tombstones are bounded."""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
from owner_models import kill_owner

import computer
from computer.actors import WorkspaceUnavailableError
from computer.actors._delete import workspace_files
from computer.actors.directory import SqliteDirectory, WorkspaceRecord
from computer.actors.directory._registry import REGISTRY_FILE
from computer.actors.naming import workspace_file
from computer.config import Settings

from .test_cluster_faults4 import _record
from .test_redis_restart import RedisProcess


def _dump(server: RedisProcess) -> Path:
    """Redis's state now, as an RDB dump kept aside (``SAVE``, then the file copied)."""
    redis.Redis.from_url(server.url).save()
    kept = server.workdir / f"kept-{uuid.uuid4().hex[:8]}.rdb"
    shutil.copyfile(server.workdir / "dump.rdb", kept)
    return kept


def _restore(server: RedisProcess, dump: Path) -> None:
    """Redis restarted from ``dump`` (it loads ``dump.rdb`` from its directory as it starts)."""
    server.stop()
    shutil.copyfile(dump, server.workdir / "dump.rdb")
    server.start()


def _tombstone(config: Settings, name: str) -> Any:
    registry = SqliteDirectory(config.data_dir / REGISTRY_FILE)  # the head's file: this one node's
    try:
        return registry.deletion_of(name)
    finally:
        registry.close()


def _on_a_gone_machine(url: str, record: WorkspaceRecord) -> None:
    """``record`` rewritten as naming a machine no longer in the cluster (the dump restored after its
    node was replaced): placement cannot send the owner where the file was."""
    gone = WorkspaceRecord(
        record.name,
        "e" * 56,
        record.owner,
        record.epoch,
        record.lease_expires,
        record.last_active,
        record.state,
        record.released_epoch,
        "gone/10.9.9.8",
    )
    redis.Redis.from_url(url).set(f"computer:dir:ws:{record.name}", msgpack.packb(gone.to_wire()))


async def test_a_workspace_deleted_after_a_dump_is_new_again_once_the_dump_is_restored(
    on_redis: Settings, own_redis: RedisProcess, record_property: Any
) -> None:
    """Two workspaces written, Redis dumped, both deleted, Redis restarted from the dump: their records
    are back (epoch 1, naming files that are gone). One's record names its machine (alive), the other's
    a machine no longer there. Both open as new, empty workspaces, as after any deletion, and take
    writes. Before, the first was ``WorkspaceUnavailableError`` "its file ... is missing" (the owner
    took the deletion for a lost file) and the second "which has no alive Ray node" (placement),
    until ``delete_workspace(force=True)``."""
    config = on_redis
    here, gone = (f"rel-tomb-{what}-{uuid.uuid4().hex[:8]}" for what in ("here", "gone"))
    for name in (here, gone):
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/old", b"old")
    dump = _dump(own_redis)
    for name in (here, gone):
        await computer.delete_workspace(name)
        tombstone = _tombstone(config, name)
        assert tombstone is not None and tombstone[2] > 1 and "process" in tombstone[1]
    _restore(own_redis, dump)
    for name in (here, gone):
        record = _record(config, name)
        assert record is not None and record.epoch < _tombstone(config, name)[2]  # the dump's, from before
    _on_a_gone_machine(own_redis.url, _record(config, gone))
    for name in (here, gone):
        async with computer.get_workspace(name) as ws:
            with pytest.raises(FileNotFoundError):
                await ws.fs.read_file("/old")
            await ws.fs.write_file("/new", b"new")
            assert await ws.fs.read_file("/new") == b"new"
        assert _tombstone(config, name) is None  # the new life's lease dropped it
        await computer.delete_workspace(name)
    record_property("deleted_workspaces_restored_from_a_dump", 2)


async def test_a_file_lost_behind_the_systems_back_is_still_unavailable(
    on_redis: Settings, own_redis: RedisProcess
) -> None:
    """A workspace deleted (its tombstone written) and made again, its second life's file then removed
    by hand once its owner is gone: that is a lost file, not a deletion. ``get_workspace`` is
    ``WorkspaceUnavailableError`` naming the missing file, nothing is created under the name; the same
    after Redis comes back from a dump of that second life. ``delete_workspace(force=True)`` forgets it,
    and the name opens new. Without the new life dropping the first deletion's tombstone, its record
    (epoch 1, below the deletion's) read as deleted, and the lost workspace was made anew, empty."""
    config = on_redis
    name = f"rel-lost-{uuid.uuid4().hex[:10]}"
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/first", b"1")
    await computer.delete_workspace(name)
    assert _tombstone(config, name) is not None
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/second", b"2")
        await kill_owner(ws.handle)  # asleep: no owner holds the file
    dump = _dump(own_redis)
    for file in workspace_files(config, name):
        file.unlink()  # behind the system's back
    for restored in (False, True):
        if restored:
            _restore(own_redis, dump)
        with pytest.raises(WorkspaceUnavailableError, match="missing"):
            async with computer.get_workspace(name) as ws:
                await ws.fs.read_file("/second")
        assert not workspace_file(config, name).exists(), restored  # never made anew, empty
    await computer.delete_workspace(name, force=True)
    async with computer.get_workspace(name) as ws:
        assert await ws.fs.ls("/") == []
    await computer.delete_workspace(name)


def test_tombstones_are_bounded_by_age_and_count_and_dropped_by_a_new_life(tmp_path: Path) -> None:
    """Each deletion's write drops tombstones older than the TTL and all but the newest ``kept``; a new
        life's file note drops the name's. One two hours old goes at the next deletion (TTL one hour); 20
    deletions with ``kept`` 5 leave the 5 newest."""
    path = tmp_path / REGISTRY_FILE
    registry = SqliteDirectory(path)
    try:
        registry.note_deleted("aged", 3, "process 1 on box", ttl=3600.0, kept=100)
        with sqlite3.connect(path) as db:
            db.execute("UPDATE deleted SET at = at - 7200 WHERE name = 'aged'")  # two hours ago
        registry.note_deleted("fresh", 3, "process 1 on box", ttl=3600.0, kept=100)
        assert registry.deletion_of("aged") is None  # past the TTL
        assert registry.deletion_of("fresh") is not None and registry.tombstones() == 1
        for i in range(20):
            registry.note_deleted(f"ws-{i:02d}", 2, "process 1 on box", ttl=3600.0, kept=5)
            assert registry.tombstones() <= 5
        assert registry.tombstones() == 5
        kept = [f"ws-{i:02d}" for i in range(20) if registry.deletion_of(f"ws-{i:02d}") is not None]
        assert kept == [f"ws-{i:02d}" for i in range(15, 20)]  # the newest
        registry.note_file("ws-19", "node", "box/127.0.0.1")  # made anew
        assert registry.deletion_of("ws-19") is None and registry.tombstones() == 4
    finally:
        registry.close()
