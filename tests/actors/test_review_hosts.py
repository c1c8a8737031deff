"""Review of issue 20's owner hosts: "an idle host with no workspace exits".

A host whose last workspace hibernated lingers a moment (``HOST_LINGER``, at most ``hibernate_after``)
and then exits: its process is gone from the machine (checked in ``/proc``, without any call that could
wake the workspace), and the workspace wakes in a new host with what it had.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import computer
from computer.actors import open_directory
from computer.actors._hosts import HostedHandle


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still exists on this machine (Ray runs the host here)."""
    return os.path.exists(f"/proc/{pid}")


async def test_a_host_whose_last_workspace_hibernated_exits(
    ray_session: Any, tmp_path: Path, name: str
) -> None:
    conf = computer.init(
        data_dir=tmp_path / "hosted",
        owners="hosted",
        owner_hosts_per_node=1,
        hibernate_after=1.0,  # the host lingers min(hibernate_after, HOST_LINGER) = 1 s after
        shell_pool_size=0,
        python_pool_size=0,
    )
    try:
        async with computer.get_workspace(name) as ws:
            assert isinstance(ws.handle, HostedHandle)
            await ws.fs.write_file("/kept", b"before")
            pid = int((await ws.handle.stats.remote())["pid"])
        # No look that the host is still alive here: it exits 3-5 s after the close (hibernation, the
        # linger, a quiet second), and a test process stalled that long on a loaded machine saw it gone
        # (shown with a 5 s sleep here). The wait below fails when the host never exits.

        deadline = time.monotonic() + 60.0  # bounded: hibernation, the linger, then the exit
        while _alive(pid):
            assert time.monotonic() < deadline, "the host holding no workspace did not exit"
            await asyncio.sleep(0.2)
        directory = open_directory(conf)
        try:
            record = directory.get(name)
        finally:
            directory.close()
        assert record is not None and record.state == "hibernating"

        async with computer.get_workspace(name) as again:
            assert await again.fs.read_file("/kept") == b"before"
            assert int((await again.handle.stats.remote())["pid"]) != pid
    finally:
        await computer.delete_workspace(name, force=True)
        computer.init(data_dir=tmp_path / "data")
