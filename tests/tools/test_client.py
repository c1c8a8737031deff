"""Tools over a client: CASE 24 end to end, and locks across processes (CASE 32).

The driver's edit pauses between its read and its write while holding the lock in the owner actor;
a Ray task (another process, another client, another tool set) then writes the same file. The write
must land after the edit, never inside it.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.tools import WorkspaceFileStore, create_edit_tool, create_tools

from .test_scenario import run_case_24

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture
def name(ray_session: Any, tmp_path: Path) -> Iterator[str]:
    computer.init(data_dir=tmp_path / "data")
    workspace = f"tools-{uuid.uuid4().hex[:12]}"
    yield workspace
    from computer.actors import NAMESPACE, actor_name

    try:
        ray_session.kill(ray_session.get_actor(actor_name(workspace), namespace=NAMESPACE))  # type: ignore[attr-defined]
    except ValueError:
        pass


def write_from_another_process(name: str) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with computer.get_workspace(name) as ws:
            tools = create_tools(ws)
            await tools["write"].run({"path": "/signal", "content": "about to write"})
            return await tools["write"].run({"path": "/f.txt", "content": "written\n"})

    return asyncio.run(run())


class GatedStore(WorkspaceFileStore):
    def __init__(self, workspace: Any) -> None:
        super().__init__(workspace)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def read_all(self, path: str) -> bytes | None:
        self.entered.set()
        await self.release.wait()
        return await super().read_all(path)


async def test_write_in_another_process_waits_for_an_edit_through_a_client(
    ray_session: Any, name: str
) -> None:
    ray = ray_session
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/f.txt", "alpha\n")
        store = GatedStore(ws)
        editing = asyncio.ensure_future(
            create_edit_tool(store).run({"path": "/f.txt", "oldText": "alpha", "newText": "beta"})
        )
        await asyncio.wait_for(store.entered.wait(), timeout=30)
        # The test module is not importable on Ray workers: ship the function by value.
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[attr-defined]
        remote = ray.remote(write_from_another_process).remote(name)  # type: ignore[attr-defined]
        deadline = time.monotonic() + 60
        while not await ws.fs.exists("/signal"):
            assert time.monotonic() < deadline, "the other process never started"
            ready, _ = await asyncio.to_thread(ray.wait, [remote], timeout=0.05)
            if ready:
                pytest.fail(f"the other process ended early: {ray.get(remote)}")
        # Give the other process time to reach the lock; meanwhile its write must not land.
        for _ in range(10):
            ready, _ = await asyncio.to_thread(ray.wait, [remote], timeout=0.1)
            assert not ready
            assert await ws.fs.read_file("/f.txt") == b"alpha\n"
        store.release.set()
        assert "error" not in await editing
        written = await asyncio.to_thread(ray.get, remote, timeout=60)
        assert written == {"path": "/f.txt", "bytesWritten": 8}
        assert await ws.fs.read_file("/f.txt") == b"written\n"


async def test_case_24_through_a_client(name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await run_case_24(create_tools(ws))
