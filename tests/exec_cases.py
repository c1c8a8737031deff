"""Exec test pieces shared by the embedded (tests/runtime) and the pooled or cluster suites."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


class LoopbackServer:
    """A TCP server on 127.0.0.1 that counts the connections it accepts (a sandbox must make none)."""

    def __init__(self) -> None:
        self.port = 0
        self.connections = 0

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()


@asynccontextmanager
async def loopback_server() -> AsyncIterator[LoopbackServer]:
    counter = LoopbackServer()
    server = await asyncio.start_server(counter._accept, "127.0.0.1", 0)
    counter.port = server.sockets[0].getsockname()[1]
    try:
        yield counter
    finally:
        server.close()
        await server.wait_closed()


async def a_file_changed_during_a_run_keeps_the_workspace_version(ws: Any, *, live: bool = False) -> None:
    """The workspace changes a file while a shell run also writes it. A sandbox per run: the
    workspace's version wins, the run reports it in ``skipped``, its other changes land, and the next
    run sees all of that. A live sandbox: the workspace's write reaches the running program before it
    writes (it reads it), and the program's later write is the last one; nothing is skipped."""
    await ws.fs.write_file("/workspace/shared.txt", "before\n")
    handle = await ws.runtime.exec(
        "echo ready; sleep 2; cat shared.txt; echo sandbox > shared.txt; echo other > other.txt"
    )
    async for snapshot in handle:
        if "ready" in snapshot.stdout:
            await ws.fs.write_file("/workspace/shared.txt", "workspace\n")
            break
    result = await handle.result()
    final = "sandbox\n" if live else "workspace\n"
    if live:
        assert result.skipped == [] and result.stdout == "ready\nworkspace\n"
    else:
        assert "/workspace/shared.txt" in result.skipped
    assert await ws.fs.read_text("/workspace/shared.txt") == final
    assert await ws.fs.read_text("/workspace/other.txt") == "other\n"
    after = await (await ws.runtime.exec("cat shared.txt other.txt")).result()
    assert after.stdout == final + "other\n"


async def _when_ready(ws: Any, source: str) -> Any:
    """Start ``source`` (which prints ``ready`` first) and return its handle once it has."""
    handle = await ws.runtime.exec(source)
    async for snapshot in handle:
        if "ready" in snapshot.stdout:
            return handle
    raise AssertionError("the run ended before it was ready")


async def a_write_during_a_run_that_changes_nothing_reaches_the_next_run(
    ws: Any, *, live: bool = False
) -> None:
    """Issue 16: a run with an empty pull used to claim the workspace's current revision, so a write
    made while it ran was taken as mirrored (``pushed=0``), and a later ``sed -i`` wrote the stale
    content back over it."""
    await ws.fs.write_file("/workspace/notes.txt", "old line\n")
    await (await ws.runtime.exec("cat notes.txt")).result()
    handle = await _when_ready(ws, "echo ready; sleep 1")
    await ws.fs.write_file("/workspace/notes.txt", "new line\n")
    idle = await handle.result()
    assert idle.status == "completed" and idle.skipped == []
    seen = await (await ws.runtime.exec("cat notes.txt")).result()
    # (a live sandbox got the write while the run was in progress: the next run has nothing to push)
    assert seen.stdout == "new line\n" and seen.pushed == (0 if live else 1)
    await (await ws.runtime.exec("sed -i 's/line/LINE/' notes.txt")).result()
    assert await ws.fs.read_text("/workspace/notes.txt") == "new LINE\n"


async def a_conflicted_path_comes_back_with_the_workspace_version(ws: Any, *, live: bool = False) -> None:
    """Issue 16: after a run and a workspace write race on one new path (the workspace wins, the path
    is skipped with a reason), the next run sees the workspace's file, and its own edit of it is an
    ordinary edit of that version. A live sandbox has no such race here: the workspace's file reaches
    the program before it writes, and the program's write is the later one."""
    handle = await _when_ready(ws, "echo ready; sleep 1; echo sandbox > b.txt")
    await ws.fs.write_file("/workspace/b.txt", "workspace\n")
    raced = await handle.result()
    kept = "sandbox\n" if live else "workspace\n"
    if live:
        assert raced.skipped == [] and "/workspace/b.txt" in raced.pulled
    else:
        assert raced.skipped == ["/workspace/b.txt"]
        assert "changed in the workspace" in raced.skipped_reasons["/workspace/b.txt"]
    seen = await (await ws.runtime.exec("cat b.txt")).result()
    assert seen.stdout == kept
    await (await ws.runtime.exec("echo more >> b.txt")).result()
    assert await ws.fs.read_text("/workspace/b.txt") == kept + "more\n"


def setuid_root_files(roots: list[str], since: float) -> list[str]:
    """Regular files below ``roots`` owned by root with setuid or setgid, whose inode changed at or
    after ``since``. ``find``, not ``os.walk``: a mirror may hold a tree deeper than Python's
    recursion allows."""
    found: list[str] = []
    for root in roots:
        listed = subprocess.run(
            [
                "find",
                root,
                "-xdev",
                "-type",
                "f",
                "-perm",
                "/6000",
                "-uid",
                "0",
                "-newerct",
                f"@{int(since)}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        found += listed.stdout.split("\n")
    return [path for path in found if path]
