"""Calls sent straight to an owner host while it is about to exit: an idle host (its last workspace
hibernated) lingers, then exits; Ray fails every call the process received and had not answered when
it exits. A call that reached the host is served, never cut by the exit (``OwnerHost._exit``)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import computer


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still exists on this machine (Ray runs the host here)."""
    return os.path.exists(f"/proc/{pid}")


async def test_calls_reaching_an_idle_host_as_its_linger_ends_are_answered_and_it_exits_after(
    ray_session: Any, tmp_path: Path, name: str
) -> None:
    """``host_stats`` (``computer status``) sent back to back to a host whose last workspace
    hibernated, across the end of its linger: before, the exit cut the call in flight ("The actor
    died unexpectedly before finishing this task ... INTENDED_USER_EXIT", 2 runs of 2). Now every
    call is answered, and the host exits once the calls stop."""
    import ray

    computer.init(
        data_dir=tmp_path / "hosted",
        owners="hosted",
        owner_hosts_per_node=1,
        hibernate_after=0.5,  # the host lingers min(hibernate_after, HOST_LINGER) = 0.5 s
        shell_pool_size=0,
        python_pool_size=0,
    )
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/kept", b"before")
            pid = int((await ws.handle.stats.remote())["pid"])
            host = ws.handle.host
        answered = 0
        emptied: float | None = None
        # Calls until the workspace hibernated (0.5 s; bounded: 60 s), then for 2.5 s more: across the
        # linger's end (0.5 s) and beyond. Before, the calls went on for a fixed 6 s, and the workspace
        # had to hibernate within the first 4 of them, which a loaded machine could overrun.
        deadline = time.monotonic() + 60.0
        while emptied is None or time.monotonic() < emptied + 2.5:
            assert time.monotonic() < deadline, "the workspace did not hibernate"
            try:
                stats = await asyncio.wait_for(host.host_stats.remote(), 30)
            except ray.exceptions.RayActorError as exc:
                raise AssertionError(f"a call that reached the host died with it after {answered}") from exc
            answered += 1
            if not stats["workspaces"] and emptied is None:
                emptied = time.monotonic()
        deadline = time.monotonic() + 60.0  # bounded: the quiet second, then the exit
        while _alive(pid):
            assert time.monotonic() < deadline, "the idle host did not exit once the calls stopped"
            await asyncio.sleep(0.2)
        async with computer.get_workspace(name) as again:
            assert await again.fs.read_file("/kept") == b"before"
    finally:
        await computer.delete_workspace(name, force=True)
        computer.init(data_dir=tmp_path / "data")
