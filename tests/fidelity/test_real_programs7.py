"""Where real users break the exec layer (session 65, fid7): live sandboxes with background processes
running between calls, the workspace reading and writing meanwhile, and reopens.

- A lock file (``flock``, ``fcntl``) a background process holds, opened for reading only as
  ``flock(1)`` opens it, that the workspace writes: the push gave the mirror a new file (a file only
  readers hold is replaced so they read the old version whole), the lock stayed on the old inode and
  the next ``flock`` of the name got a lock of its own at once. Two ``flock``-ed writers of one counter
  lost increments (796 of 800) while the workspace wrote the lock file. A file someone holds or waits
  for a lock on is written in place now (``runtime/_mapped.locked``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from computer.runtime import ShellBackend

from ._support import (
    MARGIN,
    PYTHON_LIVE,
    ROOT,
    need,
    ok,
    opened,
    run,
    sandbox_view,
    settle,
    started,
    workspace_view,
)

LIVE = ShellBackend(live=True).live
pytestmark = pytest.mark.skipif(not LIVE, reason="no cgroup freezer here")


def live() -> ShellBackend:
    return ShellBackend(live=True)


async def test_a_lock_held_in_the_background_still_excludes_after_the_workspace_writes_the_lock_file(
    db: Path,
) -> None:
    """A background process holds ``flock`` on ``lock`` (opened for reading only, as ``flock(1)`` does)
    until told to go; the workspace writes ``lock`` meanwhile. The next call's ``flock -n lock`` must
    find it locked (before: the file was replaced, a new inode, and the lock taken at once), the file
    keeps its inode and holds the workspace's bytes; once the holder goes, the lock is free."""
    need("flock")
    async with opened(db, shell=live(), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/lock", "")
        holder = await started(
            ws,
            "exec 9<lock; flock 9; stat -c %i lock > held; echo ready;"
            " until [ -e go ]; do sleep 0.01; done; echo released",
            seconds=120,
        )
        await ws.fs.write_file(f"{ROOT}/lock", "written by the workspace\n")
        probed = await run(ws, "cat lock; stat -c %i lock; cat held; flock -n lock true && echo free || echo busy")
        text, inode, held, state = probed.stdout.splitlines()
        assert (text, state) == ("written by the workspace", "busy"), probed.stdout
        assert inode == held
        await ws.fs.write_file(f"{ROOT}/go", "")
        assert "released" in (await settle(holder, 120)).stdout
        assert (await ok(ws, "flock -n lock true && echo free || echo busy")).stdout == "free\n"
        assert await sandbox_view(ws) == await workspace_view(ws)


PY_HOLDER = """
import fcntl, os, time
lock = open("lock")  # for reading only, as most lock files are opened
fcntl.flock(lock, fcntl.LOCK_EX)
print("ready", os.fstat(lock.fileno()).st_ino, flush=True)
deadline = time.monotonic() + 120
while not os.path.exists("go") and time.monotonic() < deadline:
    time.sleep(0.01)
print("released")
"""

PY_PROBE = """
import fcntl, os
with open("lock") as f:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        state = "free"
    except BlockingIOError:
        state = "busy"
    print(f.read().strip(), os.fstat(f.fileno()).st_ino, state)
"""


async def test_a_python_program_s_fcntl_lock_survives_a_workspace_write_of_its_lock_file(db: Path) -> None:
    """The python backend's live sandbox, the same machinery: a run holding ``fcntl.flock`` on a file it
    opened for reading only, the workspace writing that file, a concurrent run probing the lock."""
    if not PYTHON_LIVE:
        pytest.skip("no cgroup freezer here")
    async with opened(db, shell=live(), python_live=True) as ws:
        await ws.fs.write_file(f"{ROOT}/lock", "")
        holder = await ws.runtime.exec(PY_HOLDER, backend="python", timeout=120)

        async def holding() -> str:
            async for snapshot in holder:
                if "ready" in snapshot.stdout or snapshot.done:
                    return snapshot.stdout
            return ""

        first = (await asyncio.wait_for(holding(), 120 + MARGIN)).split()
        assert first[0] == "ready", first
        await ws.fs.write_file(f"{ROOT}/lock", "written by the workspace\n")
        probe = await ok(ws, PY_PROBE, backend="python")
        assert probe.stdout.split() == ["written", "by", "the", "workspace", first[1], "busy"], probe.stdout
        await ws.fs.write_file(f"{ROOT}/go", "")
        assert "released" in (await settle(holder, 120)).stdout
        assert (await ok(ws, PY_PROBE, backend="python")).stdout.split()[-1] == "free"
