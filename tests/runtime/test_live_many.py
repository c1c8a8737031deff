"""Many workspaces' live sandboxes in one process (the users run many concurrent agents): each one's
network, sockets, processes and files are its own, and a host at its descriptor limit fails a start
clearly and leaves nothing behind."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from computer.runtime import ShellBackend

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")

# Runs in a host process whose descriptor limit is 200, as after ``ulimit -n 200``.
LOW_LIMIT_HOST = """
import asyncio
import computer
from computer.runtime import ShellBackend

async def main():
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        first = await (await ws.runtime.exec("echo one > one.txt; sleep 30 & ulimit -n")).result()
        second = await (await ws.runtime.exec("cat one.txt")).result()
        print(first.status, first.error, first.stdout.strip(), second.status, second.stdout.strip())

asyncio.run(main())
"""


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (200, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def test_a_host_with_a_descriptor_limit_of_256_or_less_runs_live_commands() -> None:
    """The init copied each run's streams above descriptor 255, which fails (EINVAL) under a limit of
    256 or less, inherited from the host: the init ended at every run's start ("the live sandbox
    ended: its first process ended"), so no live command ever ran there."""
    done = subprocess.run(
        [sys.executable, "-c", LOW_LIMIT_HOST],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_descriptors,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["completed", "None", "200", "completed", "one"], done.stderr[-2000:]
