"""Where real users break the exec layer (session 65, fid7): live sandboxes with background processes
running between calls, the workspace reading and writing meanwhile, and reopens.

- A lock file (``flock``, ``fcntl``) a background process holds, opened for reading only as
  ``flock(1)`` opens it, that the workspace writes: the push gave the mirror a new file (a file only
  readers hold is replaced so they read the old version whole), the lock stayed on the old inode and
  the next ``flock`` of the name got a lock of its own at once. Two ``flock``-ed writers of one counter
  lost increments (796 of 800) while the workspace wrote the lock file. A file someone holds or waits
  for a lock on is written in place now (``runtime/_mapped._reader``).
- ``tail -f`` of a log the workspace emptied: the same replacement (``tail`` only reads the file) left it
  following the old inode for good, the lines appended after never seen; on any disk it says "file
  truncated" and goes on. A reader at the file's end is none a push replaces the file for now
  (``runtime/_mapped._reader``).

Also tried and found right (not kept here): a WAL database written by a background ``python3`` loop
while calls query it with ``sqlite3`` and ``ws.fs`` reads it, the writer then killed (``-9``),
``integrity_check`` after a reopen; a log renamed by ``ws.fs.rename`` under its writer, which reopens
``app.log`` on ``SIGHUP``; a copytruncate rotation made through ``ws.fs``; a venv made in one call (its
``python -> /usr/bin/python3`` links, ``pyvenv.cfg``, pip's shebang) used in the next and after a reopen;
``npm install`` of a local package (its ``node_modules`` symlink); an auto-commit ``git`` loop with ``gc
--auto`` while the workspace writes the worktree (``git status`` clean, ``fsck`` quiet, after a reopen
too); ``tar -x`` of 4,000 entries in the background while calls and ``ws.fs`` list it and the workspace
writes into it; editors' saves with a ``file~`` backup, made through ``ws.fs`` and in the sandbox (``mv``,
``sed -i``) under a process holding the old file; a job queue in a WAL database served by a process a
python call left running.
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
    until,
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
        probed = await run(
            ws, "cat lock; stat -c %i lock; cat held; flock -n lock true && echo free || echo busy"
        )
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


async def test_tail_f_follows_a_log_the_workspace_empties_as_a_truncation(db: Path) -> None:
    """``tail -f`` (by descriptor) follows ``app.log``, which a loop appends to, opening it for each line
    as ``>>`` does; the workspace empties the log. ``tail`` says it was truncated and goes on with the
    lines after, as on any disk (before: the push replaced the file, only a reader held it, and ``tail``
    followed the old inode for good, the new lines never seen). The file keeps its inode. The lines
    are appended once ``tail`` said so: truncated and grown back to its size before it looks, a log is
    no truncation to ``tail`` on any disk."""
    need("tail")
    async with opened(db, shell=live(), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/app.log", "old 1\nold 2\n")
        await ok(ws, "stat -c %i app.log > inode; (tail -n +1 -f app.log > seen 2> tail.err &)")

        async def said(name: str, line: str) -> bool:
            return await ws.fs.exists(f"{ROOT}/{name}") and line in await ws.fs.read_text(f"{ROOT}/{name}")

        await until(lambda: said("seen", "old 2"))
        await ws.fs.write_file(f"{ROOT}/app.log", "")
        await ok(ws, "true")  # the push; then ``tail`` must see the log empty before it grows again
        await until(lambda: said("tail.err", "truncated"))
        await ok(ws, "echo new 1 >> app.log; echo new 2 >> app.log")
        await until(lambda: said("seen", "new 2"))
        checked = await ok(
            ws, "cat seen; cat tail.err; [ $(stat -c %i app.log) = $(cat inode) ] && echo same-inode"
        )
        assert checked.stdout == "old 1\nold 2\nnew 1\nnew 2\ntail: app.log: file truncated\nsame-inode\n"


FLOCKED_WRITER = """
n=0
while [ $n -lt 300 ]; do
  n=$((n+1))
  flock -x lock sh -c 'v=$(cat counter 2>/dev/null || echo 0); echo $((v+1)) > counter.tmp; mv counter.tmp counter'
  [ $n -eq 10 ] && echo started > "started.$1"
done
echo done > "done.$1"
"""


async def test_a_lock_file_opened_and_not_locked_yet_keeps_its_inode_once_a_process_locked_it(
    db: Path,
) -> None:
    """A process holds ``flock`` on ``lock`` while the workspace writes it (written in place: the lock
    is seen). The holder goes; another process opens ``lock`` and waits before asking for the lock (the
    window of ``flock(1)`` between its ``open`` and its ``flock``, frozen there by a push). The
    workspace writes ``lock`` again: the file keeps its inode, so the lock it then takes is the one the
    next writer takes (before, s66: replaced, it locked the old inode; two ``flock``-ed writers of one
    counter kept 599 of 600 increments one run in three)."""
    need("flock")
    async with opened(db, shell=live(), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/lock", "lock file\n")
        hold = "exec 3<lock; flock 3; echo held > held; until [ -e release ]; do sleep 0.05; done"
        await ok(ws, f"({hold}) >/dev/null 2>&1 &")
        await until(lambda: ws.fs.exists(f"{ROOT}/held"))
        await ws.fs.write_file(f"{ROOT}/lock", "workspace 1\n")
        await ok(ws, "true")  # the push, the lock seen
        await ws.fs.write_file(f"{ROOT}/release", "")
        wait = "exec 3<lock; stat -L -c %i /proc/self/fd/3 > opened; until [ -e go ]; do sleep 0.05; done"
        await ok(ws, f"({wait}; flock 3; echo locked > locked) >/dev/null 2>&1 &")
        await until(lambda: ws.fs.exists(f"{ROOT}/opened"))
        await ws.fs.write_file(f"{ROOT}/lock", "workspace 2\n")
        await ok(ws, "true")  # the push, the second process holding ``lock`` open, no lock asked
        await ws.fs.write_file(f"{ROOT}/go", "")
        await until(lambda: ws.fs.exists(f"{ROOT}/locked"))
        checked = await ok(ws, "[ $(cat opened) = $(stat -c %i lock) ] && echo same-inode; cat lock")
        assert checked.stdout == "same-inode\nworkspace 2\n"


async def test_two_flock_ed_writers_keep_every_increment_while_the_workspace_writes_the_lock_file(
    db: Path,
) -> None:
    """Two background writers increment one counter under ``flock lock``, 300 times each, while the
    workspace writes the lock file and other files between calls: the counter ends at 600, in the
    sandbox, the workspace and after a reopen (before: 796 of 800 in one run, as the workspace's write
    gave the name a new inode while a writer held the lock on the old one)."""
    need("flock")
    async with opened(db, shell=live(), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/writer.sh", FLOCKED_WRITER)
        await ok(ws, "touch lock; (bash writer.sh a >/dev/null 2>&1 &); (bash writer.sh b >/dev/null 2>&1 &)")
        await until(lambda: ws.fs.exists(f"{ROOT}/started.a"))
        await until(lambda: ws.fs.exists(f"{ROOT}/started.b"))
        for i in range(10):
            await ws.fs.write_file(f"{ROOT}/lock", f"workspace {i}\n")
            await ws.fs.write_file(f"{ROOT}/other{i}", "x")
            await ok(ws, "cat counter")
        await until(lambda: ws.fs.exists(f"{ROOT}/done.a"), 120)
        await until(lambda: ws.fs.exists(f"{ROOT}/done.b"), 120)
        assert (await ok(ws, "cat counter")).stdout == "600\n"
        assert await ws.fs.read_text(f"{ROOT}/counter") == "600\n"
    async with opened(db, shell=live(), python=False) as ws:
        assert (await ok(ws, "cat counter")).stdout == "600\n"
        assert await sandbox_view(ws) == await workspace_view(ws)
