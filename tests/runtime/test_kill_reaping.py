"""A killed run's launcher is reaped by asyncio alone (its child watcher), never by ``Popen.poll`` as
well: the race printed "Unknown child process pid N, will report returncode 255" and lost the exit
status. Timeouts kill the run's tree with ``killpg``; ``Popen.kill`` (which polls first) only when the
group is gone."""

from __future__ import annotations

import logging

import pytest

import computer
from computer.runtime import ShellBackend


async def test_killed_runs_leave_no_unknown_child_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="asyncio")
    async with computer.Workspace(backends=[ShellBackend(live=False)]) as ws:
        await ws.fs.mkdir("/workspace")
        for _ in range(6):
            result = await (await ws.runtime.exec("sleep 30", backend="shell", timeout=0.3)).result()
            assert result.status == "cancelled" and result.exit_code == 124
    unknown = [r.getMessage() for r in caplog.records if "Unknown child process" in r.getMessage()]
    assert unknown == []
