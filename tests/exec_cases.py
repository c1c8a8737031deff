"""Exec cases run both on an embedded workspace (tests/runtime) and through a pool (tests/pools)."""

from __future__ import annotations

from typing import Any


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
