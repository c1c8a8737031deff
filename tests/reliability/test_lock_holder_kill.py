"""A client killed (SIGKILL of its worker process) while it holds a lock: the lease expires and the
next writer proceeds; what the dead client wrote before dying stays, nothing else changes."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import ray
from owner_models import owner_process

import computer
from computer.tools import create_tools

LEASE = 5.0  # long enough that a starved (but live) holder still renews in time


@ray.remote(num_cpus=0, max_restarts=0)
class LockHolder:
    """An agent process that takes a lock through its client and then never lets go."""

    async def hold(self, name: str) -> int:
        self.ws = await computer.get_workspace(name)
        await self.ws.fs.write_file("/shared.txt", "written by the holder\n")
        self.held = self.ws.locks.hold(["/shared.txt"])  # kept referenced: never exited
        await self.held.__aenter__()
        return os.getpid()


async def test_locks_of_a_sigkilled_client_expire_and_the_next_writer_proceeds(
    ray_session: Any, tmp_path: Path, record_property: Any
) -> None:
    name = f"rel-locks-{os.getpid()}-{time.monotonic_ns()}"
    computer.init(data_dir=tmp_path / "data", lock_lease=LEASE)
    holder = LockHolder.remote()  # type: ignore[attr-defined]
    try:
        pid = await holder.hold.remote(name)
        async with computer.get_workspace(name) as ws:
            tools = create_tools(ws)
            write = asyncio.ensure_future(
                tools["write"].run({"path": "/shared.txt", "content": "next writer\n"})
            )
            done, _ = await asyncio.wait({write}, timeout=0.5)
            assert not done  # the live holder's lease blocks the tool's write
            os.kill(pid, signal.SIGKILL)
            start = time.monotonic()
            result = await asyncio.wait_for(write, 6 * LEASE)
            waited = time.monotonic() - start
            assert result == {"path": "/shared.txt", "bytesWritten": 12}
            assert await ws.fs.read_text("/shared.txt") == "next writer\n"
            assert (await ws.handle.stats.remote())["inflight"] == 0
        record_property("lock_expiry_seconds", round(waited, 2))
    finally:
        ray.kill(holder)
        try:
            ray.kill(owner_process(computer.workspace_actor(name)))
        except Exception:
            pass
        computer.init(data_dir=tmp_path / "data")
