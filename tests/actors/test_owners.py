"""One owner per workspace, reachable from the driver, tasks and other actors, surviving a kill."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest
import ray
from owner_models import death_recorded, epoch, kill_owner, owner_process

import computer
from computer.actors import WorkspaceUnavailableError, actor_name
from computer.config import Settings


@ray.remote(num_cpus=0)
def _resolve_owner(name: str) -> tuple[str, int]:
    handle = computer.workspace_actor(name)

    async def epoch() -> int:
        async with computer.get_workspace(handle) as ws:
            return int((await ws.handle.stats.remote())["epoch"])

    return handle._actor_id.hex(), asyncio.run(epoch())


@ray.remote(num_cpus=0)
def _write_from_task(name: str, path: str, data: bytes) -> bytes:
    async def go() -> bytes:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file(path, data)
            return await ws.fs.read_file(path)

    return asyncio.run(go())


@ray.remote(num_cpus=0)
class _Agent:
    async def write_and_list(self, name: str, path: str, data: bytes) -> list[str]:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file(path, data)
            return await ws.fs.ls("/")


async def _until_dead(handle: object) -> None:
    """Wait (bounded) until a killed actor answers no more: ``ray.kill`` takes effect asynchronously."""
    for _ in range(200):
        try:
            await handle.stats.remote()  # type: ignore[attr-defined]
        except ray.exceptions.RayActorError:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the killed actor still answers")


async def test_six_racing_workers_get_one_owner(cluster: Settings, name: str) -> None:
    results = await asyncio.gather(*[_resolve_owner.remote(name) for _ in range(6)])
    assert len({actor_id for actor_id, _ in results}) == 1
    assert {epoch for _, epoch in results} == {1}


async def test_client_in_a_ray_task(cluster: Settings, name: str) -> None:
    assert await _write_from_task.remote(name, "/from-task", b"task") == b"task"
    async with computer.get_workspace(name) as ws:
        assert await ws.fs.read_file("/from-task") == b"task"


async def test_client_in_another_actor(cluster: Settings, name: str) -> None:
    agent = _Agent.remote()  # type: ignore[attr-defined]
    try:
        assert await agent.write_and_list.remote(name, "/from-actor", b"actor") == ["/from-actor"]
        async with computer.get_workspace(name) as ws:
            assert await ws.fs.read_file("/from-actor") == b"actor"
    finally:
        ray.kill(agent)


async def test_killed_owner_loses_no_acknowledged_write_and_comes_back(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/data")
        for i in range(20):
            await ws.fs.write_file(f"/data/{i}", str(i))
        await kill_owner(ws.handle)  # hosted: its host (owners="dedicated": its own actor)
        # An idempotent read through the old client re-resolves the name and retries once.
        assert await ws.fs.read_text("/data/19") == "19"
        assert await epoch(ws) == 2  # a new owner
    async with computer.get_workspace(name) as again:
        assert sorted(await again.fs.ls("/data"), key=lambda p: int(p.rsplit("/", 1)[1])) == [
            f"/data/{i}" for i in range(20)
        ]
        assert (await again.handle.stats.remote())["epoch"] == 2


async def test_a_mutation_sent_after_its_owner_died_goes_to_the_new_owner(
    cluster: Settings, name: str
) -> None:
    """Issue 25: the owner died before the write was sent, so the write never ran there: the client
    re-resolves and sends it to the new owner (it used to fail with EAGAIN)."""
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/f", b"1")
        await kill_owner(ws.handle)
        await death_recorded(ws.handle)  # dated before the next call is sent, past the margin
        await ws.fs.write_file("/f", b"2")
        assert await ws.fs.read_file("/f") == b"2"
        assert await epoch(ws) == 2  # the new owner ran it


async def test_workspace_actor_is_created_on_first_use_and_reused(cluster: Settings, name: str) -> None:
    first = computer.workspace_actor(name)
    second = computer.workspace_actor(name)
    assert first._actor_id == second._actor_id


@ray.remote
class NotesActor(computer.WorkspaceHost):
    """A user's own actor that owns a workspace and adds a method of its own."""

    def __init__(self, name: str) -> None:
        super().__init__(name)

    async def note(self, text: str) -> int:
        await self.workspace.fs.write_file("/note.txt", text)
        return int((await self.workspace.fs.stat("/note.txt")).size)


async def test_workspace_host_subclass_is_reachable_by_get_workspace(cluster: Settings, name: str) -> None:
    host = NotesActor.remote(name)  # type: ignore[attr-defined]
    try:
        assert await host.note.remote("from the host") == 13
        async with computer.get_workspace(host) as ws:
            assert await ws.fs.read_text("/note.txt") == "from the host"
            await ws.fs.write_file("/from-client", b"c")
            assert ws.name == name
        assert (cluster.workspaces_dir / f"{name}.sqlite").exists()
    finally:
        ray.kill(host)


async def test_stale_owner_cannot_write_after_a_newer_one_took_over(cluster: Settings, name: str) -> None:
    old = NotesActor.remote(name)  # type: ignore[attr-defined]
    new = None
    try:
        async with computer.get_workspace(old) as stale:
            await stale.fs.write_file("/before", b"ok")
            new = NotesActor.remote(name)  # type: ignore[attr-defined]  # takes the lease over with a higher epoch
            async with computer.get_workspace(new) as current:
                assert await current.fs.read_file("/before") == b"ok"
                with pytest.raises(OSError) as info:
                    await stale.fs.write_file("/after", b"zombie")
                assert info.value.errno == errno.EROFS
                await current.fs.write_file("/after", b"owner")
                assert await current.fs.read_file("/after") == b"owner"
    finally:
        ray.kill(old)
        if new is not None:
            ray.kill(new)


async def test_dead_host_handle_raises_unavailable_without_recreating(cluster: Settings, name: str) -> None:
    host = NotesActor.remote(name)  # type: ignore[attr-defined]
    async with computer.get_workspace(host) as ws:
        await ws.fs.write_file("/x", b"1")
        ray.kill(host)
        await _until_dead(host)  # the kill takes effect asynchronously: a call may still get through
        with pytest.raises(WorkspaceUnavailableError):
            await ws.fs.read_file("/x")


async def test_two_data_directories_get_their_own_owner_for_one_name(
    ray_session: object, tmp_path: Path, name: str
) -> None:
    handles = []
    try:
        for data_dir in ("one", "two"):
            computer.init(data_dir=tmp_path / data_dir)
            async with computer.get_workspace(name) as ws:
                assert not await ws.fs.exists("/who")  # nothing leaks in from the other directory
                await ws.fs.write_file("/who", data_dir)
                handles.append(ws.handle)
        assert handles[0]._actor_id != handles[1]._actor_id
        one, two = (Settings(data_dir=tmp_path / d) for d in ("one", "two"))
        assert actor_name(name, one) != actor_name(name, two)
        for data_dir in ("one", "two"):
            computer.init(data_dir=tmp_path / data_dir)
            async with computer.get_workspace(name) as ws:
                assert await ws.fs.read_text("/who") == data_dir
                assert (await ws.handle.stats.remote())["epoch"] == 1
    finally:
        for handle in handles:
            ray.kill(owner_process(handle))


def test_an_owner_whose_pid_is_dead_is_taken_for_gone_only_where_that_pid_was_recorded() -> None:
    """``awake`` (what ``computer ls`` and ``delete_workspace`` go by) takes a live lease for over
    when its owner's recorded pid is dead here, but only when the record was made in this machine and
    pid namespace (its place: boot id and pid namespace). A container sharing the host's name
    (``--net=host``) or a cloned machine records pids of its own: by the hostname alone, its live owner
    was taken for gone (a deletion could go on under it). Records older than places keep the hostname
    rule."""
    import os
    import socket
    import subprocess
    import time

    from computer.actors._lease import awake, awake_where, owner_id, owner_process, place, process_node
    from computer.actors.directory import WorkspaceRecord

    dead = subprocess.Popen(["true"])
    dead.wait()
    here, other, host = place(), "0" * 12, socket.gethostname()
    assert len(here) == 12 and process_node() == f"process:{os.getpid()}@{host}~{here}"
    actor, pid = owner_process(owner_id("computer:host:h1")) or ("", 0)
    assert (actor, pid) == ("computer:host:h1", os.getpid())

    def record(node: str, owner: str | None = None) -> WorkspaceRecord:
        return WorkspaceRecord(
            "w", node, owner, 1, time.time() + 60, time.time(), "active", host=f"{host}/1.2.3.4"
        )

    assert not awake(record(f"process:{dead.pid}@{host}~{here}"))  # dead here: over
    assert awake(record(f"process:{dead.pid}@{host}~{other}"))  # another place: cannot tell
    assert not awake(record(f"process:{dead.pid}@{host}"))  # older record: the hostname rule
    assert awake(record(f"process:{os.getpid()}@{host}~{here}"))
    assert awake_where(record(f"process:{dead.pid}@{host}~{here}")) == f"in process {dead.pid} on {host}"
    node = "a" * 56
    assert not awake(record(node, f"computer:host:h1#{dead.pid}~{here}/x"))
    assert awake(record(node, f"computer:host:h1#{dead.pid}~{other}/x"))
    assert not awake(record(node, f"computer:host:h1#{dead.pid}/x"))  # older id: the hostname rule
