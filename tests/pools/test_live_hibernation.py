"""A live sandbox on a pool worker ends with its workspace's hibernation (issue 18): the continuous
sync of a background process nobody calls does not count as use of the workspace, so the owner still
hibernates after ``hibernate_after``, the process is killed, and what it wrote stays."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from owner_models import owner_awake

import computer

from .pool_helpers import processes_with, unique_sleep, wait_until


async def test_a_background_process_alone_does_not_keep_its_workspace_awake(
    ray_session: Any, tmp_path: Path, name: str
) -> None:
    conf = computer.init(data_dir=tmp_path / "data", hibernate_after=1.0, shell_pool_size=1)
    try:
        marker = unique_sleep()
        async with computer.get_workspace(name) as ws:
            started = await (await ws.runtime.exec(f"echo up > up.txt; setsid sleep {marker} &")).result()
            assert started.status == "completed", started.error
            await wait_until(lambda: bool(processes_with(f"sleep {marker}")))
        # The live sandbox pushes to the owner every ~100 ms while its process runs; before, each of
        # those calls counted as use and the owner never hibernated (until `live_lifetime`, an hour).
        deadline = asyncio.get_running_loop().time() + 30.0
        # Bounded (30 s for a 1 s hibernate_after); polled: hibernation is seen in the directory, it
        # sends nothing this test could await.
        while await owner_awake(name, conf):
            assert asyncio.get_running_loop().time() < deadline, "the owner never hibernated"
            await asyncio.sleep(0.1)
        await wait_until(lambda: not processes_with(f"sleep {marker}"), within=30)
        async with computer.get_workspace(name) as ws:
            assert await ws.fs.read_file("/workspace/up.txt") == b"up\n"
    finally:
        computer.init(data_dir=tmp_path / "data")
