"""Many workspaces' live sandboxes in one process (the users run many concurrent agents): each one's
network, sockets, processes and files are its own, and a host at its descriptor limit fails a start
clearly and leaves nothing behind."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Iterator

import pytest

import computer
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


# Runs in a host process of its own: its descriptor limit is set just above what it holds, so a
# sandbox's start runs out of descriptors (EMFILE) at each point after its cgroups are made.
OUT_OF_DESCRIPTORS = """
import asyncio, errno, os, resource
from pathlib import Path
from computer.runtime._sandbox import Sandbox

def groups():
    return sorted(
        p.name for c in ("memory", "pids", "freezer")
        for p in (Path("/sys/fs/cgroup") / c / "computer-exec").glob(f"run-{os.getpid()}-*")
    )

async def main():
    sandbox = Sandbox(unprivileged=True)
    first = await sandbox.spawn(["true"])
    await first.discard()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = len(os.listdir("/proc/self/fd"))
    for spare in range(1, 25):
        resource.setrlimit(resource.RLIMIT_NOFILE, (held + spare, hard))
        try:
            started = await sandbox.spawn(["true"])
        except OSError as exc:
            assert exc.errno == errno.EMFILE, exc
            outcome = "EMFILE"
        else:
            outcome = "started"
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        if outcome == "started":
            await started.discard()
        print(spare, outcome, groups(), len(os.listdir("/proc/self/fd")) - held)

asyncio.run(main())
"""


def test_a_start_out_of_descriptors_leaves_no_cgroup_or_descriptor_behind() -> None:
    """A host at its descriptor limit (~72 live sandboxes under ``ulimit -n 1024``, 14 descriptors
    each) fails the next start with a clear EMFILE; the cgroups that start had made (memory, pids,
    freezer) were left until the process ended when the descriptors ran out at bubblewrap's pipes
    (made after them, outside the cleanup), and the first pipe when only the second failed."""
    done = subprocess.run([sys.executable, "-c", OUT_OF_DESCRIPTORS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split(" ", 2) for line in done.stdout.splitlines()]
    assert [row[0] for row in rows] == [str(spare) for spare in range(1, 25)], done.stdout
    assert {row[1] for row in rows} == {"EMFILE", "started"}, done.stdout
    assert [row[2] for row in rows] == ["[] 0"] * 24, done.stdout


@pytest.fixture
def many_descriptors() -> Iterator[None]:
    """This process holds over 1,024 descriptors, as a host of ~75 live sandboxes does (14 each)."""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1500:
        pytest.skip("the descriptor limit is too low to hold 1,100 more")
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)


async def test_a_host_past_1024_descriptors_runs_in_sandboxes_started_ahead(many_descriptors: None) -> None:
    """A sandbox started ahead (its init waiting for the workspace's next run, after the last one
    ended) was checked with ``select``, which raises ValueError for a descriptor past 1023: every run
    that took one failed ("filedescriptor out of range in select()"), and its init was left to the
    garbage collector."""
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        for step in range(3):
            result = await (await ws.runtime.exec(f"echo {step} > step.txt; sleep 30 & cat step.txt")).result()
            assert (result.status, result.stdout, result.error) == ("completed", f"{step}\n", None)
            assert await ws.runtime.end_sandbox() is True
        assert await ws.fs.read_text("/workspace/step.txt") == "2\n"
