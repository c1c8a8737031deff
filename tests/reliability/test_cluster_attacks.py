"""Attacks with real Ray processes on the rules "placement never invents an empty workspace" and "locks
survive their owner" (issue 25): first calls of a new name racing from several worker processes, and
an owner killed (SIGKILL) while a lock is held and other clients wait for it."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray
from owner_models import owner_process, process_pid

import computer
from computer.actors.naming import workspace_file
from computer.storage.errors import LockLostError


@ray.remote(num_cpus=0, max_retries=0)
def _first_call(name: str, index: int) -> str:
    async def go() -> str:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file(f"/w{index}", b"%d" % index)
            return str(ws._conn.owner_id)

    return asyncio.run(go())


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
async def test_racing_first_calls_of_a_new_name_make_one_workspace(
    ray_session: Any, tmp_path: Path, name: str, owners: str
) -> None:
    config = computer.init(data_dir=tmp_path / "data", owners=owners, shell_pool_size=0, python_pool_size=0)
    try:
        racers = 6
        owner_ids = await asyncio.gather(*[_first_call.remote(name, i) for i in range(racers)])
        assert len(set(owner_ids)) == 1  # one owner served them all
        async with computer.get_workspace(name) as ws:
            assert sorted(await ws.fs.ls("/")) == sorted(f"/w{i}" for i in range(racers))
        path = workspace_file(config, name)
        assert [p.name for p in path.parent.iterdir() if p.name == path.name] == [path.name]
    finally:
        computer.init(data_dir=tmp_path / "data")


async def _increment_under_lock(ws: Any) -> int:
    async with ws.locks.hold(["/counter"]):
        value = int(await ws.fs.read_file("/counter"))
        await ws.fs.write_file("/counter", b"%d" % (value + 1))
        return value


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
async def test_an_owner_killed_while_a_lock_is_held_and_waited_for_fences_the_holder(
    ray_session: Any, tmp_path: Path, name: str, owners: str
) -> None:
    computer.init(data_dir=tmp_path / "data", owners=owners, shell_pool_size=0, python_pool_size=0)
    try:
        async with computer.get_workspace(name) as holder:
            await holder.fs.write_file("/counter", b"0")
            for i in range(20):  # acknowledged before the kill: kept
                await holder.fs.write_file(f"/before-{i}", uuid.uuid4().hex.encode())
            before = {f"/before-{i}": await holder.fs.read_file(f"/before-{i}") for i in range(20)}
            waiters = [await computer.get_workspace(name) for _ in range(3)]
            pid = await process_pid(owner_process(holder._conn.handle))
            async with asyncio.timeout(120):
                hold = holder.locks.hold(["/counter"])
                await hold.__aenter__()
                seen = int(await holder.fs.read_file("/counter"))
                queued = [asyncio.ensure_future(_increment_under_lock(w)) for w in waiters]
                done, _ = await asyncio.wait(queued, timeout=0.5)
                assert not done
                os.kill(
                    pid, signal.SIGKILL
                )  # Ray restarts it (or the next call makes one): an empty lock table
                values = sorted(await asyncio.gather(*queued))
                assert values == [0, 1, 2]  # the waiters, one at a time, on the new owner
                with pytest.raises(LockLostError):  # the holder's stale write is refused
                    await holder.fs.write_file("/counter", b"%d" % (seen + 1))
                await hold.__aexit__(None, None, None)  # a release of a lease the new owner never had
                assert await holder.fs.read_file("/counter") == b"3"
                for path, data in before.items():
                    assert await holder.fs.read_file(path) == data
            for w in waiters:
                await w.close()
    finally:
        computer.init(data_dir=tmp_path / "data")
