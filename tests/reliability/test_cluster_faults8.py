"""Cluster faults of closing and listing: ``close_owners`` on a dedicated owner (its clients go on at
once, through a new owner), and ``computer ls`` after a Redis restored from a dump taken before a
deletion (the listing agrees with what opening the name does)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray
import redis
from owner_models import kill_owner

import computer
from computer.actors import close_owners
from computer.actors.naming import workspace_file
from computer.actors.raycompat import actor_id
from computer.cli import list_workspaces
from computer.cli._context import GlobalOptions
from computer.client._connection import Connection
from computer.config import Settings
from computer.storage.errors import LockLostError

from .test_cluster_faults4 import _record
from .test_cluster_faults7 import _dump, _restore, _tombstone
from .test_redis_restart import RedisProcess


async def test_a_client_of_a_dedicated_owner_closed_by_close_owners_goes_on_through_a_new_owner(
    ray_session: Any, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``close_owners`` closes a dedicated owner: its lease released, the workspace asleep. A client
    that held it sends its next call: "moved", and it re-resolves. Before, the owner actor stayed up
    after its close (only hibernation made it exit), holding its Ray name and answering every call
    "moved": each re-resolution found that same actor again, until the client's 30 s "moved" deadline
    ended the call with ``WorkspaceUnavailableError`` ("its owner did not come back in time"). Now the
    closed owner exits, as a hibernating one does: the call is answered by a new owner actor."""
    computer.init(data_dir=tmp_path / "data", owners="dedicated")
    reresolves: list[Any] = []
    reresolve = Connection._reresolve

    async def counted(self: Connection, stale: Any, *, backoff: bool = False) -> None:
        reresolves.append(actor_id(stale))
        await reresolve(self, stale, backoff=backoff)

    monkeypatch.setattr(Connection, "_reresolve", counted)
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/kept", b"kept")
            closed = ws.handle
            assert await close_owners([name]) == 1
            assert await ws.fs.read_file("/kept") == b"kept"  # before: unavailable after 30 s
            assert actor_id(ws.handle) != actor_id(closed)  # a new owner answered
            assert reresolves and set(reresolves) == {actor_id(closed)}  # from the closed one only
            with pytest.raises(ray.exceptions.RayActorError):  # the closed owner exited
                await closed.__ray_ready__.remote()
    finally:
        computer.init(data_dir=tmp_path / "data")


async def _listed(config: Settings, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The names ``computer ls`` lists for ``config``'s data directory and Redis (the command's own
    settings, from the environment), the test's settings put back after."""
    monkeypatch.setenv("COMPUTER_REDIS_URL", str(config.redis_url))
    monkeypatch.setenv("COMPUTER_SHARED_DATA_DIR", "1" if config.shared_data_dir else "0")
    try:
        rows = await asyncio.to_thread(list_workspaces, GlobalOptions(data_dir=config.data_dir))
        return {row.name for row in rows}
    finally:
        computer.init(**config.model_dump(include=_PUT_BACK))


_PUT_BACK = {"data_dir", "redis_url", "lock_lease", "owners", "shared_data_dir"}


async def _deleted_then_restored(config: Settings, server: RedisProcess, names: list[str]) -> None:
    """Each of ``names`` written, Redis dumped, each deleted, Redis restarted from the dump: their
    records are back, older than their deletions' tombstones."""
    for name in names:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/old", b"old")
    dump = _dump(server)
    for name in names:
        await computer.delete_workspace(name)
        assert _tombstone(config, name) is not None
    _restore(server, dump)
    for name in names:
        record = _record(config, name)
        assert record is not None and record.epoch < _tombstone(config, name)[2]


async def test_ls_leaves_out_a_deleted_workspace_whose_record_a_restored_dump_brought_back(
    on_redis: Settings, own_redis: RedisProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workspace deleted after a dump, the dump restored: its record is back, naming a file the
    deletion removed, and opening the name makes a new, empty workspace (its tombstone). ``computer ls``
    agrees: the name is not listed (before, it was, "asleep", size "elsewhere"), nor offered to
    ``computer rm``; a kept neighbour is listed; once opened anew, the name is listed again."""
    config = on_redis
    gone, kept = (f"rel-ls-{what}-{uuid.uuid4().hex[:8]}" for what in ("gone", "kept"))
    async with computer.get_workspace(kept) as ws:
        await ws.fs.write_file("/kept", b"kept")
    await _deleted_then_restored(config, own_redis, [gone])
    listed = await _listed(config, monkeypatch)
    assert kept in listed and gone not in listed
    async with computer.get_workspace(gone) as ws:
        assert await ws.fs.ls("/") == []  # new, as the listing said
        await ws.fs.write_file("/new", b"new")
    assert {gone, kept} <= await _listed(config, monkeypatch)
    for name in (gone, kept):
        await computer.delete_workspace(name)


@pytest.fixture(params=["dedicated", "hosted"])
def on_shared_redis(
    request: pytest.FixtureRequest, ray_session: Any, own_redis: RedisProcess, tmp_path: Path
) -> Any:
    """``on_redis`` with ``shared_data_dir``: every node sees the data directory (no head file registry)."""
    yield computer.init(
        data_dir=tmp_path / "data",
        redis_url=own_redis.url,
        lock_lease=5.0,
        owners=request.param,
        shared_data_dir=True,
    )
    computer.init(data_dir=tmp_path / "data")


async def test_with_a_shared_data_dir_a_deleted_workspace_is_new_again_after_a_restored_dump(
    on_shared_redis: Settings, own_redis: RedisProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``shared_data_dir`` with Redis: no head file registry, and before, no tombstone either, so a
    Redis restored from a dump taken before a deletion made the name ``WorkspaceUnavailableError``
    ("its file ... is missing") until ``delete_workspace(force=True)``. The tombstone is now kept in
    the shared data directory (``placements.sqlite``, table ``deleted``): the name opens new and
    empty, as without a shared data directory, ``computer ls`` leaves the stale record out, and the
    new life's lease drops the tombstone (a later loss of its file is "unavailable" again)."""
    config = on_shared_redis
    name = f"rel-shared-{uuid.uuid4().hex[:8]}"
    await _deleted_then_restored(config, own_redis, [name])
    assert name not in await _listed(config, monkeypatch)
    async with computer.get_workspace(name) as ws:
        with pytest.raises(FileNotFoundError):
            await ws.fs.read_file("/old")
        await ws.fs.write_file("/new", b"new")
    assert _tombstone(config, name) is None  # the new life's lease dropped it
    assert name in await _listed(config, monkeypatch)
    await computer.delete_workspace(name)


async def test_a_lock_held_when_its_owners_process_is_sigkilled_and_redis_restarts_empty_fences_its_holder(
    on_redis: Settings, own_redis: RedisProcess
) -> None:
    """Locks survive their owner as fencing: A holds the counter's lock and has read 0; the process
    owning the workspace (its dedicated actor, or its owner host) is SIGKILLed and Redis restarts
    empty before anyone calls again (the directory forgets the lease and its epoch). B takes the lock
    from the owner that comes back and increments; A's write computed from 0 is refused
    ``LockLostError`` (the new owner's epoch is above the file's, whatever Redis counts from), A's
    late release does not free B's lock, and the counter holds the one increment."""
    name = f"rel-lockkill-{uuid.uuid4().hex[:8]}"
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        await a.fs.write_file("/counter", b"0")
        held = a.locks.hold(["/counter"])
        await held.__aenter__()
        seen = int(await a.fs.read_file("/counter"))
        before = await a.handle.stats.remote()
        os.kill(int(before["pid"]), signal.SIGKILL)
        own_redis.stop()
        own_redis.start()  # empty: not persistent
        async with b.locks.hold(["/counter"]):
            value = int(await b.fs.read_file("/counter"))
            with pytest.raises(LockLostError):
                await a.fs.write_file("/counter", str(seen + 1).encode())
            with contextlib.suppress(LockLostError):
                await held.__aexit__(None, None, None)  # A's late release
            await b.fs.write_file("/counter", str(value + 1).encode())  # B's lock still honoured
            after = await b.handle.stats.remote()
        assert after["epoch"] > before["epoch"] and after["pid"] != before["pid"]
        assert await a.fs.read_file("/counter") == b"1"
    await computer.delete_workspace(name)


async def _waiting_at_the_owner(ws: Any, count: int) -> None:
    """Until the owner of ``ws`` has ``count`` lock requests waiting (bounded: 30 s)."""
    deadline = asyncio.get_running_loop().time() + 30.0
    while (await ws.handle.stats.remote())["locks_waiting"] < count:
        assert asyncio.get_running_loop().time() < deadline, "the lock request never reached the owner"
        await asyncio.sleep(0.05)


async def test_a_lock_request_waiting_when_the_owners_process_is_sigkilled_and_redis_restarts_is_granted(
    on_redis: Settings, own_redis: RedisProcess
) -> None:
    """A holds the lock, B's request waits at the owner; the owner's process is SIGKILLed and Redis
    restarts empty. B's wait, cut by the death, goes on at the owner that comes back and is granted
    there (its table empty: A's lease died with the process) within a generous bound, never left
    hanging; A's write is refused ``LockLostError``."""
    name = f"rel-lockwait-{uuid.uuid4().hex[:8]}"
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        await a.fs.write_file("/counter", b"0")
        held = a.locks.hold(["/counter"])
        await held.__aenter__()
        refused: list[BaseException] = []

        async def b_holds() -> None:
            async with b.locks.hold(["/counter"]):
                try:  # A's write while B holds the lock
                    await a.fs.write_file("/counter", b"1")
                except LockLostError as exc:
                    refused.append(exc)
                await b.fs.write_file("/counter", b"2")

        waiting = asyncio.ensure_future(b_holds())
        await _waiting_at_the_owner(a, 1)
        before = await a.handle.stats.remote()
        os.kill(int(before["pid"]), signal.SIGKILL)
        own_redis.stop()
        own_redis.start()
        await asyncio.wait_for(waiting, 60)  # granted at the owner that came back
        assert len(refused) == 1
        with contextlib.suppress(LockLostError):
            await held.__aexit__(None, None, None)
        assert await a.fs.read_file("/counter") == b"2"
        assert (await a.handle.stats.remote())["epoch"] > before["epoch"]
    await computer.delete_workspace(name)


async def _refused_with_the_data_directory_replaced(
    config: Settings, tmp_path: Path, *, forget: RedisProcess | None
) -> OSError:
    """A workspace written and asleep, Redis flushed when ``forget`` is given, the data directory
    replaced by an empty one (a tmpfs over it, a mount lost): what opening the workspace raises (it
    must fail), nothing created under its name; then the data directory put back, the workspace opens
    whole and is deleted."""
    name = f"rel-tmpfs-{uuid.uuid4().hex[:8]}"
    data, hidden = config.data_dir, tmp_path / "hidden-data"
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/x", b"1")
        await kill_owner(ws.handle)  # asleep: no owner holds the file nor writes its record back
    if forget is not None:
        redis.Redis.from_url(forget.url).flushall()
    data.rename(hidden)
    data.mkdir()  # the empty directory now mounted over it
    try:
        with pytest.raises(OSError) as refused:
            async with computer.get_workspace(name) as ws:
                await ws.fs.read_file("/x")
        assert not workspace_file(config, name).exists()  # never made anew, empty
    finally:
        shutil.rmtree(data)
        hidden.rename(data)
    async with computer.get_workspace(name) as ws:
        assert await ws.fs.read_file("/x") == b"1"
    await computer.delete_workspace(name)
    return refused.value


async def test_a_data_directory_replaced_by_an_empty_one_never_opens_a_known_workspace_empty(
    on_redis: Settings, tmp_path: Path
) -> None:
    """Placement never invents an empty workspace: the whole data directory of this (only) node
    replaced by an empty one while the workspace sleeps (a tmpfs mounted over it, a disk not mounted),
    Redis keeping its record. Opening it is refused (``WorkspaceUnavailableError`` naming the missing
    file, or ESTALE "not mounted": the head's file registry lives there too), nothing is created under
    its name; with the data directory back, the workspace opens whole."""
    config = on_redis
    refused = await _refused_with_the_data_directory_replaced(config, tmp_path, forget=None)
    # EAGAIN naming the missing file, or ESTALE: the head's file registry, in that data directory, made
    # anew under a running cluster (``directory/_identity.py``), "not mounted"
    assert refused.errno in (errno.EAGAIN, errno.ESTALE), refused
    assert "missing" in str(refused) or "not mounted" in str(refused), refused


async def test_a_shared_data_directory_replaced_after_redis_forgot_never_opens_a_workspace_empty(
    on_shared_redis: Settings, own_redis: RedisProcess, tmp_path: Path
) -> None:
    """``shared_data_dir`` with Redis: a workspace sleeps, Redis forgets it (``FLUSHALL``) and the shared
    data directory is replaced by an empty one on this node (its mount lost, a tmpfs over it). No record
    and no file registry tell the name from a new one; before, the owner made a new, empty workspace
    under it (and its writes diverged from the real file once the mount came back). Now the owner's
    lease opens the data directory's ``placements.sqlite`` (the tombstones' file, which every owner wake
    opens), whose identity check (``directory/_identity.py``) refuses a file made anew under the running
    cluster: ESTALE "not mounted", and the failed creation removes the empty file it had made. With the
    mount back it opens whole."""
    config = on_shared_redis
    refused = await _refused_with_the_data_directory_replaced(config, tmp_path, forget=own_redis)
    assert refused.errno == errno.ESTALE and "not mounted" in str(refused), refused


async def test_a_client_of_a_hosted_workspace_closed_by_close_owners_goes_on_in_a_new_activation(
    ray_session: Any, tmp_path: Path, name: str
) -> None:
    """The hosted counterpart: ``close_owners`` closes the workspace inside its host (the host stays
    for its others); the client's next call opens it again there, under a new epoch, its file whole."""
    computer.init(data_dir=tmp_path / "data", owners="hosted")
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/kept", b"kept")
            before = await ws.handle.stats.remote()
            assert await close_owners([name]) == 1
            assert await ws.fs.read_file("/kept") == b"kept"
            after = await ws.handle.stats.remote()
            assert after["epoch"] > before["epoch"] and after["pid"] == before["pid"]  # the same host
    finally:
        computer.init(data_dir=tmp_path / "data")
