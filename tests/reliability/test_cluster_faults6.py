"""Cluster faults of history and clocks: a Redis snapshot taken before a workspace was deleted and made
anew (its record of a higher epoch than the new file's owner), restored under the new owner; the
client's wall clock stepped back while a mutation was under way and its owner died; the owner's wall
clock stepped back after its last call (hibernation)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import msgpack
import pytest
import ray
import redis
from owner_models import kill_owner

import computer
from computer.actors import OutcomeUnknownError, take_lease
from computer.actors._restore import restore_lost_lease
from computer.actors.directory import RedisDirectory, WorkspaceRecord
from computer.config import Settings
from computer.storage import FileSystem

from .test_cluster_faults4 import _record, _still_held, _the_same_owner_served
from .test_cluster_faults5 import _wrote_its_own_back
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
        await asyncio.sleep(0.1)  # the killed owner's lease running out (lock_lease 5 s): bounded
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
            await _wrote_its_own_back(config, name, mine, stale=2)
            waiting = await _still_held(a, b, seen)
        await _the_same_owner_served(a, before, waiting)
        assert await b.fs.read_file("/counter") == b"1"
        with pytest.raises(FileNotFoundError):
            await b.fs.read_file("/old")
    record_property("snapshots_from_before_a_deletion", 1)


class _RunsThenDies:
    """An owner's method that runs the call, then dies before answering (Ray's actor table stamps the
    death with the machine's wall clock, ``died``); ``step`` runs first (the clock stepped back meanwhile).
    A second call is answered "ok": the resend."""

    def __init__(self, step: Any, died: list[float]) -> None:
        self.step, self.died, self.calls = step, died, 0

    def remote(self, *args: Any) -> asyncio.Future[Any]:
        self.calls += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.calls == 1:
            self.step()
            self.died.append(time.time())
            future.set_exception(ray.exceptions.ActorDiedError())
        else:
            future.set_result(("ok", ("run-2", "pool", None)))
        return future


async def test_a_mutation_is_not_sent_again_when_the_clock_stepped_back_under_it(
    monkeypatch: pytest.MonkeyPatch, record_property: Any
) -> None:
    """A client sends ``exec_start`` (no idempotency key), the owner starts the run and dies; meanwhile
    this machine's wall clock was stepped back 3 s (an NTP step correcting a clock ahead). Ray stamps the
    death with the stepped clock, before the send's stamp: the death seems to come before the call. The
    client must not take that for proof the call never ran: "unknown outcome", nothing sent again.
    Before, it sent ``exec_start`` again: the command ran twice. With the clock left alone, an owner dead
    a second before the send is still proof (the call is sent again)."""
    from computer.client import _connection

    real = time.time
    died: list[float] = []

    async def never_released(*args: Any, **kwargs: Any) -> bool:
        return False

    async def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    monkeypatch.setattr(_connection, "actor_death_time", lambda handle: died[-1] if died else None)

    def connection(method: _RunsThenDies) -> Any:
        handle = type("Handle", (), {"exec_start": method, "_actor_id": b"a"})()
        conn = _connection.Connection(handle, name="w", managed=True)
        monkeypatch.setattr(conn, "_released_cleanly", never_released)
        monkeypatch.setattr(conn, "_reresolve", nothing)
        monkeypatch.setattr(conn, "_reresolve_quietly", nothing)
        return conn

    monkeypatch.setattr(time, "time", lambda: real() + 3.0)  # ahead by 3 s when the call is sent
    stepped = _RunsThenDies(lambda: monkeypatch.setattr(time, "time", real), died)
    with pytest.raises(OutcomeUnknownError, match="unknown outcome"):
        await connection(stepped).request("exec_start", "echo once >> log", {}, 1.0, None)
    assert stepped.calls == 1  # never sent again: it may have run
    assert died[-1] < real()

    dead_before = _RunsThenDies(lambda: None, died)
    monkeypatch.setattr(_connection, "actor_death_time", lambda handle: died[-1] - 1.0)  # a second before
    assert await connection(dead_before).request("exec_start", "echo once >> log", {}, 1.0, None) == (
        "run-2",
        "pool",
        None,
    )
    assert dead_before.calls == 2  # the proof still holds with the clock left alone
    record_property("clock_step_s", -3.0)


@pytest.fixture(params=["dedicated", "hosted"])
def hibernating(
    request: pytest.FixtureRequest, ray_session: Any, own_redis: RedisProcess, tmp_path: Path
) -> Any:
    """The session's Ray with ``own_redis`` as the directory (leases on Redis's clock, not the stepped
    one), owners hibernating after 1 s idle, in one owner model; the settings put back after."""
    yield computer.init(
        data_dir=tmp_path / "data", redis_url=own_redis.url, hibernate_after=1.0, owners=request.param
    )
    computer.init(data_dir=tmp_path / "data")


async def test_an_owner_hibernates_when_its_machines_clock_stepped_back(
    hibernating: Settings, record_property: Any
) -> None:
    """The owner's machine's wall clock stepped back an hour (an NTP step correcting a clock ahead)
    after its last call: the owner, idle, hibernates after ``hibernate_after`` (1 s) as before the step.
    Before, idleness was the wall clock's difference with the last call's: negative for an hour, so the
    owner (its process, its live sandboxes, a host's slot) stayed up that hour, idle."""
    from owner_models import awake_owner, owner_process

    def step_clock(_self: Any, by: float) -> None:
        """Run inside the owner's process (``__ray_call__``; defined here, so Ray sends it by value): its
        wall clock stepped by ``by`` seconds from now on (``date -s``, an NTP step), the monotonic clock
        untouched; 0 puts it back."""
        import time as clock

        real = getattr(clock, "_stepped_from", clock.time)
        clock._stepped_from = real  # type: ignore[attr-defined]
        clock.time = real if by == 0 else (lambda: real() + by)

    name = f"rel-step-{uuid.uuid4().hex[:10]}"
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/x", b"1")
        await ws.fs.write_file("/y", b"2")  # the last activity, before the step
        process = owner_process(ws.handle)
        try:
            await process.__ray_call__.remote(step_clock, -3600.0)
            deadline = time.monotonic() + 30
            while await awake_owner(name, hibernating) is not None and time.monotonic() < deadline:  # noqa: ASYNC110 - a bounded poll
                await asyncio.sleep(0.2)  # the owner's hibernation (1 s idle): bounded
            assert await awake_owner(name, hibernating) is None  # it slept
        finally:
            try:
                await process.__ray_call__.remote(step_clock, 0.0)
            except ray.exceptions.RayActorError:
                pass  # exited with its workspace: nothing to put back
        assert await ws.fs.read_file("/y") == b"2"  # woken by the next call, whole
    record_property("clock_step_s", -3600.0)
