"""Cluster faults on placement and locks not covered elsewhere: the directory (Redis) emptied under live
owners while a lock is held; Redis down while a workspace is open; Redis emptied while a workspace slept
and its data directory is not mounted."""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from owner_models import kill_owner

import computer
from computer.actors import WorkspaceUnavailableError, open_directory
from computer.actors.directory import RedisDirectory
from computer.config import Settings

from .test_redis_restart import RedisProcess


def _record(config: Settings, name: str) -> Any:
    directory = open_directory(config)
    try:
        return directory.get(name)
    finally:
        directory.close()


async def _still_held(a: Any, b: Any, seen: int) -> asyncio.Future[Any]:
    """``a`` still holds ``/counter`` (a write as the holder goes through) and ``b`` waits for it:
    ``b``'s wait, to await once ``a`` lets go."""
    await a.fs.write_file("/counter", str(seen + 1).encode())  # still the holder
    waiting = asyncio.ensure_future(b.locks.hold(["/counter"]).__aenter__())
    await asyncio.sleep(0.5)
    assert not waiting.done()  # the lock is still held: b waits
    return waiting


async def _the_same_owner_served(a: Any, before: dict[str, Any], waiting: asyncio.Future[Any]) -> None:
    """``b``'s wait ends once ``a`` let go, and the owner that served is the one of ``before``."""
    await asyncio.wait_for(waiting, 30)
    after = await a.handle.stats.remote()
    assert (after["pid"], after["epoch"]) == (before["pid"], before["epoch"])  # the same owner


async def _written_back(config: Settings, name: str) -> Any:
    """The owner's record of ``name``, once there with a live lease: waited for (bounded) rather than
    looked at once (a renewal late on a loaded machine can leave an instant where the lease ran out)."""
    deadline = time.monotonic() + 30.0
    while (record := _record(config, name)) is None or not record.lease_live():
        assert time.monotonic() < deadline, f"the lease was not written back and renewed: {record}"
        await asyncio.sleep(0.1)
    return record


async def test_a_lock_is_kept_when_redis_is_flushed_under_its_live_owner(
    on_redis: Settings, own_redis: RedisProcess, record_property: Any
) -> None:
    """Redis emptied (``FLUSHALL``) while an owner runs and a client holds a lock: nobody took the
    workspace over, so the owner writes its lease back and keeps serving, its lock table with it.
    Before, its next renewal read the lost record as a takeover: the owner left, and the holder's next
    write was refused ``LockLostError`` with nobody else ever holding the lock."""
    name = f"rel-flush-{uuid.uuid4().hex[:10]}"
    config = on_redis
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        await a.fs.write_file("/counter", b"0")
        before = await a.handle.stats.remote()
        async with a.locks.hold(["/counter"]):
            seen = int(await a.fs.read_file("/counter"))
            redis.Redis.from_url(own_redis.url).flushall()
            assert _record(config, name) is None
            await _written_back(config, name)  # the owner's next renewal round found it lost
            await asyncio.sleep(config.lock_lease)  # three more renewal rounds of owner and holder
            waiting = await _still_held(a, b, seen)
        await _the_same_owner_served(a, before, waiting)
        record = await _written_back(config, name)  # and still renewed
        assert record.epoch == before["epoch"]
        assert name in RedisDirectory(own_redis.url).names()
        assert await b.fs.read_file("/counter") == b"1"
    record_property("redis_flushes", 1)


def test_a_lost_record_is_written_back_only_while_the_file_is_the_owners(
    own_redis: RedisProcess, tmp_path: Path
) -> None:
    """What the owner checks before and after writing its lease back: no record at all, its file there
    with its epoch (a deletion or a newer owner raises it first, a deletion removes the file). Any
    record, another owner's or a deletion's, stays."""
    from computer.actors._restore import restore_lost_lease
    from computer.actors.directory import SqliteDirectory
    from computer.storage import FileSystem

    path = tmp_path / "ws.sqlite"
    FileSystem.open(str(path), fence=3).close()
    directory = RedisDirectory(own_redis.url)

    def restore(epoch: int, on: Any = directory, where: Path = path) -> bool:
        return restore_lost_lease(
            on, "ws", where, node="n", host="h/1", owner_id="o", epoch=epoch, ttl=30.0, last_active=None
        )

    try:
        assert not restore(2)  # the file was fenced by epoch 3: a newer owner, or a deletion
        assert not restore(3, where=tmp_path / "gone.sqlite")  # the file was removed
        assert directory.get("ws") is None and directory.names() == []
        assert restore(3)
        record = directory.get("ws")
        assert record is not None and (record.owner, record.epoch, record.node, record.host) == (
            "o",
            3,
            "n",
            "h/1",
        )
        assert record.lease_live() and record.released_epoch == 0 and directory.names() == ["ws"]
        assert directory.renew_lease("ws", "o", 3, 30.0)  # renewals go on as before
        assert directory.acquire_lease("ws", "n2", "other", 30.0) == 4  # a takeover still takes it
        assert not restore(3)  # never over another owner's record
        assert directory.get("ws").owner == "other"  # type: ignore[union-attr]
        own_redis_client = redis.Redis.from_url(own_redis.url)
        own_redis_client.flushall()

        class FencedMeanwhile(RedisDirectory):
            """A deletion that fences the file as the lease is written back (it finished in between)."""

            def restore_lease(self, *args: Any, **kwargs: Any) -> bool:
                written = super().restore_lease(*args, **kwargs)
                FileSystem.open(str(path), fence=5).close()
                return written

        racing = FencedMeanwhile(own_redis.url)
        try:
            assert not restore(3, on=racing)  # written, then found fenced: its record removed again
            assert directory.get("ws") is None
        finally:
            racing.close()
        sqlite = SqliteDirectory(tmp_path / "directory.sqlite")
        try:
            assert not restore(3, on=sqlite)  # a directory that keeps its records: nothing to restore
        finally:
            sqlite.close()
    finally:
        directory.close()


async def test_a_live_owner_is_reached_by_new_clients_while_redis_is_down(
    on_redis: Settings, own_redis: RedisProcess
) -> None:
    """Redis stopped while a workspace is open: a new client (another worker's ``get_workspace``) reaches
    its live owner and reads and writes, in both owner models. Before, a hosted workspace's placement
    read the directory first and failed ``WorkspaceUnavailableError`` after 30 s (a dedicated owner is
    found by its actor name); placement now asks the nodes after ``DIRECTORY_WAIT``, as for a lost
    record, and the file registry still keeps a file no alive node holds from being made anew."""
    name = f"rel-down-{uuid.uuid4().hex[:10]}"
    async with computer.get_workspace(name) as a:
        await a.fs.write_file("/x", b"1")
        own_redis.stop()
        try:
            async with computer.get_workspace(name) as b:
                assert await b.fs.read_file("/x") == b"1"
                await b.fs.write_file("/y", b"2")
            assert await a.fs.read_file("/y") == b"2"
        finally:
            own_redis.start()


async def test_a_file_missing_on_its_alive_machine_after_redis_forgot_is_unavailable_never_new(
    on_redis: Settings, own_redis: RedisProcess, tmp_path: Path
) -> None:
    """Redis restarted empty while a workspace slept, and its machine is up without its file (its data
    directory not mounted yet): the file registry still says the workspace was there. Before, the
    registry counted only a machine with no alive node: an alive one that did not hold the file was
    taken for a file removed by hand, and a new, empty workspace was made under the old name (the old
    file, mounted again, then held a second, diverging copy). Now it is ``WorkspaceUnavailableError``, as
    for a record whose file is missing, a deletion without ``force`` too; the workspace opens whole once
    its data directory is back, and one lost for good is forgotten by ``delete_workspace(force=True)``."""
    name = f"rel-unmounted-{uuid.uuid4().hex[:10]}"
    config = on_redis
    mounted, unmounted = config.workspaces_dir, tmp_path / "unmounted"

    async def sleep_forgotten_unmounted(ws: Any) -> None:
        await kill_owner(ws.handle)  # asleep: no owner writes its record back
        redis.Redis.from_url(own_redis.url).flushall()
        mounted.rename(unmounted)  # the data directory's disk not mounted

    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/x", b"1")
        await sleep_forgotten_unmounted(ws)
    try:
        with pytest.raises(WorkspaceUnavailableError, match="force"):
            async with computer.get_workspace(name) as ws:
                await ws.fs.read_file("/x")
        with pytest.raises(WorkspaceUnavailableError, match="force"):
            await computer.delete_workspace(name)
        assert not (mounted / f"{name}.sqlite").exists()  # no new file under the old name
    finally:
        shutil.rmtree(mounted, ignore_errors=True)
        unmounted.rename(mounted)
    async with computer.get_workspace(name) as ws:
        assert await ws.fs.read_file("/x") == b"1"
        await sleep_forgotten_unmounted(ws)
    shutil.rmtree(unmounted)  # lost for good
    await computer.delete_workspace(name, force=True)
    async with computer.get_workspace(name) as ws:  # a new workspace of that name
        assert await ws.fs.ls("/") == []


def test_a_host_whose_opening_found_the_directory_unreachable_does_not_ask_it_again(tmp_path: Path) -> None:
    """A new name opened in an owner host while Redis is down fails with the directory's
    ``WorkspaceUnavailableError`` after its wait (30 s); the host then checked the name's creation
    claim, reading the directory again for another 30 s. Now an unavailable workspace is answered at
    once (what the claim check is for, a full disk, is not this)."""
    from types import SimpleNamespace

    from computer.actors._hosts import OwnerHost

    asked: list[str] = []

    class Unreachable:
        def get(self, name: str) -> None:
            asked.append(name)  # the real one waits 30 s here, then raises
            raise failure

    host = SimpleNamespace(config=Settings(data_dir=tmp_path), directory=Unreachable(), node="n")
    failure = WorkspaceUnavailableError("ws", "the directory (Redis at redis://127.0.0.1:1/0) is unreachable")
    assert OwnerHost._release_claim(host, "ws", failure) is None  # type: ignore[arg-type]
    assert asked == []
