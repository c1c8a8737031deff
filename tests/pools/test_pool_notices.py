"""What a pool worker keeps for a workspace's next run (a live sandbox lost while no run was in
progress; what an ended sandbox's syncs refused) reaches that run wherever it goes: a worker that hands
the run back (draining, shedding its line, moving it) sends them along (``Requeue``). Before, they
stayed on that worker and the run, placed on another, said nothing."""

from __future__ import annotations

import os
import signal

import computer
from computer.config import Settings

from .pool_helpers import found, processes_with, sandbox_worker, sleepers, unique_sleep, wait_until


def _child_of(pid: int, parent: int) -> int | None:
    """The ancestor of host process ``pid`` (itself included) whose parent is ``parent``; None when
    ``pid`` is not below it (or a process of the chain went away while read)."""
    for _ in range(64):  # bounded: a sandbox's process is a few levels below its worker
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if ppid == parent:
            return pid
        if ppid <= 1:
            return None
        pid = ppid
    return None


async def test_a_sandbox_lost_between_runs_is_said_by_the_next_run_on_another_worker(
    cluster: Settings, name: str
) -> None:
    marker = unique_sleep()
    async with computer.get_workspace(name) as ws:
        first = await (await ws.runtime.exec(f"setsid sleep {marker} > /dev/null 2>&1 &")).result()
        assert first.status == "completed", first
        await wait_until(lambda: bool(processes_with(f"sleep {marker}")))
        worker, handle = await sandbox_worker(marker)

        # The sandbox dies with no run in progress: its worker keeps the notice for the next run.
        def look() -> int | None:
            return next(filter(None, (_child_of(pid, worker) for pid in sleepers(marker))), None)

        os.kill(await found(look, what=f"the process of {worker} above sleep {marker}"), signal.SIGKILL)
        await wait_until(lambda: not processes_with(f"sleep {marker}"), within=30)
        await handle.drain.remote()  # its next run is handed back, and goes to the other worker
        try:
            after = await (await ws.runtime.exec("echo fresh")).result()
        finally:
            await handle.undrain.remote()
        assert (after.status, after.stdout) == ("completed", "fresh\n"), after
        assert "live sandbox ended while no run was in progress" in after.stderr, after
        again = await (await ws.runtime.exec("true")).result()
        assert (again.status, again.stderr) == ("completed", ""), again  # said once
