"""Exec test pieces shared by the embedded (tests/runtime) and the pooled or cluster suites."""

from __future__ import annotations

import asyncio
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


async def a_file_changed_during_a_run_keeps_the_workspace_version(ws: Any) -> None:
    """The workspace changes a file while a shell run also writes it: the workspace's version wins,
    the run reports it in ``skipped``, its other changes land, and the next run sees all of that."""
    await ws.fs.write_file("/workspace/shared.txt", "before\n")
    handle = await ws.runtime.exec("echo ready; sleep 2; echo sandbox > shared.txt; echo other > other.txt")
    async for snapshot in handle:
        if "ready" in snapshot.stdout:
            await ws.fs.write_file("/workspace/shared.txt", "workspace\n")
            break
    result = await handle.result()
    assert "/workspace/shared.txt" in result.skipped
    assert await ws.fs.read_text("/workspace/shared.txt") == "workspace\n"
    assert await ws.fs.read_text("/workspace/other.txt") == "other\n"
    after = await (await ws.runtime.exec("cat shared.txt other.txt")).result()
    assert after.stdout == "workspace\nother\n"
