"""Path locks of the mutating tools (SPEC 5, CASE 32): a write never lands inside an edit.

A gated store pauses an edit between its read and its write while it holds the lock; the tests then
show what may and may not proceed meanwhile.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from computer import Workspace
from computer.tools import (
    FileStore,
    WorkspaceFileStore,
    create_delete_tool,
    create_edit_tool,
    create_tools,
    create_write_tool,
)

from .conftest import put
from .directory_store import DirectoryFileStore

TURNS = 50  # event-loop turns granted to a task that must stay blocked


class Gate:
    """Lets a test pause a store call until it says so."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def pass_through(self) -> None:
        self.entered.set()
        await self.release.wait()


class GatedWorkspaceStore(WorkspaceFileStore):
    def __init__(self, workspace: Workspace, gate: Gate) -> None:
        super().__init__(workspace)
        self.gate = gate

    async def read_all(self, path: str) -> bytes | None:
        await self.gate.pass_through()
        return await super().read_all(path)


class GatedDirectoryStore(DirectoryFileStore):
    def __init__(self, root: Path, gate: Gate) -> None:
        super().__init__(root)
        self.gate = gate

    async def read_all(self, path: str) -> bytes | None:
        await self.gate.pass_through()
        return await super().read_all(path)


async def stays_blocked(task: asyncio.Task[Any]) -> bool:
    for _ in range(TURNS):
        await asyncio.sleep(0)
    return not task.done()


async def start_gated_edit(store: FileStore, gate: Gate, path: str, old: str, new: str) -> asyncio.Task[Any]:
    edit = create_edit_tool(store)
    task = asyncio.ensure_future(edit.run({"path": path, "edits": [{"oldText": old, "newText": new}]}))
    await gate.entered.wait()
    return task


def spawn(call: Awaitable[dict[str, Any]]) -> asyncio.Task[dict[str, Any]]:
    return asyncio.ensure_future(call)


async def test_write_from_another_tool_set_waits_for_an_inflight_edit(workspace: Workspace) -> None:
    await put(workspace, "/f.txt", "alpha\n")
    gate = Gate()
    editing = await start_gated_edit(GatedWorkspaceStore(workspace, gate), gate, "/f.txt", "alpha", "beta")
    other = create_tools(workspace)
    writing = spawn(other["write"].run({"path": "/f.txt", "content": "written\n"}))
    assert await stays_blocked(writing)
    assert await workspace.fs.read_file("/f.txt") == b"alpha\n"
    gate.release.set()
    assert "error" not in await editing
    assert await writing == {"path": "/f.txt", "bytesWritten": 8}
    assert await workspace.fs.read_file("/f.txt") == b"written\n"


async def test_custom_stores_with_one_identity_share_locks(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("alpha\n")
    gate = Gate()
    editing = await start_gated_edit(GatedDirectoryStore(tmp_path, gate), gate, "/f.txt", "alpha", "beta")
    writing = spawn(create_write_tool(DirectoryFileStore(tmp_path)).run({"path": "/f.txt", "content": "w\n"}))
    assert await stays_blocked(writing)
    gate.release.set()
    await editing
    await writing
    assert (tmp_path / "f.txt").read_text() == "w\n"


async def test_equivalent_paths_conflict(workspace: Workspace) -> None:
    await put(workspace, "/f", "alpha\n")
    await workspace.fs.mkdir("/a")
    gate = Gate()
    editing = await start_gated_edit(GatedWorkspaceStore(workspace, gate), gate, "/f", "alpha", "beta")
    writing = spawn(create_tools(workspace)["write"].run({"path": "/a/../f", "content": "w\n"}))
    assert await stays_blocked(writing)
    gate.release.set()
    await editing
    assert (await writing)["path"] == "/f"
    assert await workspace.fs.read_file("/f") == b"w\n"


async def test_recursive_delete_waits_for_edit_in_subtree_while_unrelated_write_proceeds(
    workspace: Workspace,
) -> None:
    await put(workspace, "/proj/src/f.txt", "alpha\n")
    gate = Gate()
    editing = await start_gated_edit(
        GatedWorkspaceStore(workspace, gate), gate, "/proj/src/f.txt", "alpha", "beta"
    )
    other = create_tools(workspace)
    deleting = spawn(other["delete"].run({"path": "/proj", "recursive": True}))
    unrelated = await other["write"].run({"path": "/elsewhere/g.txt", "content": "free"})
    assert unrelated["bytesWritten"] == 4
    assert await stays_blocked(deleting)
    assert await workspace.fs.exists("/proj/src/f.txt")
    gate.release.set()
    assert "error" not in await editing
    assert await deleting == {"deleted": "/proj"}
    assert not await workspace.fs.exists("/proj")


async def test_different_workspaces_never_block_each_other(workspace: Workspace) -> None:
    await put(workspace, "/f.txt", "alpha\n")
    gate = Gate()
    editing = await start_gated_edit(GatedWorkspaceStore(workspace, gate), gate, "/f.txt", "alpha", "beta")
    other = Workspace()
    try:
        result = await create_tools(other)["write"].run({"path": "/f.txt", "content": "x"})
        assert result["bytesWritten"] == 1
    finally:
        await other.close()
        gate.release.set()
        await editing


class FailingWriteStore(WorkspaceFileStore):
    async def write(self, path: str, data: bytes, mode: int | None = None) -> None:
        raise OSError(5, "storage failure", path)


async def test_failed_calls_release_their_lock(workspace: Workspace) -> None:
    await put(workspace, "/f.txt", "alpha\n")
    failing = FailingWriteStore(workspace)
    assert (
        "storage failure"
        in (await create_write_tool(failing).run({"path": "/f.txt", "content": "x"}))["error"]
    )
    edit_result = await create_edit_tool(failing).run({"path": "/f.txt", "oldText": "alpha", "newText": "b"})
    assert "storage failure" in edit_result["error"]
    assert (
        "not found"
        in (await create_edit_tool(failing).run({"path": "/f.txt", "oldText": "zz", "newText": "b"}))["error"]
    )
    tools = create_tools(workspace)
    # Each would wait forever if a lock had been left behind.
    done = await asyncio.wait_for(tools["write"].run({"path": "/f.txt", "content": "ok\n"}), timeout=10)
    assert done["bytesWritten"] == 3
    assert (await asyncio.wait_for(create_delete_tool(failing).run({"path": "/f.txt"}), timeout=10)) == {
        "deleted": "/f.txt"
    }


class YieldingStore(WorkspaceFileStore):
    """Gives the event loop away a random number of times before each call, so calls interleave."""

    def __init__(self, workspace: Workspace, rng: random.Random) -> None:
        super().__init__(workspace)
        self.rng = rng

    async def _yield(self) -> None:
        for _ in range(self.rng.randrange(4)):
            await asyncio.sleep(0)

    async def stat(self, path: str) -> Any:
        await self._yield()
        return await super().stat(path)

    async def read_all(self, path: str) -> bytes | None:
        await self._yield()
        return await super().read_all(path)

    async def write(self, path: str, data: bytes, mode: int | None = None) -> None:
        await self._yield()
        await super().write(path, data, mode)


async def test_racing_edits_and_writes_never_lose_a_write(workspace: Workspace) -> None:
    rng = random.Random(7)
    editor = create_edit_tool(YieldingStore(workspace, rng))
    writer = create_write_tool(YieldingStore(workspace, rng))
    for round_ in range(60):
        await put(workspace, "/race.txt", "counter = 0\n")
        written = f"counter = {round_ + 100}\n"
        calls = [
            editor.run({"path": "/race.txt", "oldText": "counter = 0", "newText": "counter = 1"}),
            writer.run({"path": "/race.txt", "content": written}),
        ]
        rng.shuffle(calls)
        await asyncio.gather(*calls)
        # Whatever the order, the write's content survives: either it came last, or the edit ran
        # first and the write replaced its result; an edit after the write finds no "counter = 0".
        assert await workspace.fs.read_file("/race.txt") == written.encode()


async def test_an_edit_through_a_symlink_and_a_write_of_its_target_share_a_lock(workspace: Workspace) -> None:
    await put(workspace, "/w/f.txt", "alpha\n")
    await workspace.fs.symlink("f.txt", "/w/link")
    gate = Gate()
    editing = await start_gated_edit(GatedWorkspaceStore(workspace, gate), gate, "/w/link", "alpha", "beta")
    writing = spawn(create_tools(workspace)["write"].run({"path": "/w/f.txt", "content": "w\n"}))
    assert await stays_blocked(writing)
    gate.release.set()
    assert "error" not in await editing
    await writing
    assert await workspace.fs.read_file("/w/f.txt") == b"w\n"


async def test_a_symlinked_parent_directory_reaches_the_same_lock(workspace: Workspace) -> None:
    await put(workspace, "/w/sub/f.txt", "alpha\n")
    await workspace.fs.symlink("/w", "/alias")
    gate = Gate()
    editing = await start_gated_edit(GatedWorkspaceStore(workspace, gate), gate, "/w/sub/f.txt", "alpha", "b")
    other = create_tools(workspace)
    writing = spawn(other["write"].run({"path": "/alias/sub/f.txt", "content": "w\n"}))
    deleting = spawn(other["delete"].run({"path": "/alias/sub", "recursive": True}))
    assert await stays_blocked(writing)
    assert await stays_blocked(deleting)
    gate.release.set()
    assert "error" not in await editing
    await writing
    assert await deleting == {"deleted": "/alias/sub"}
    assert not await workspace.fs.exists("/w/sub")


async def test_deleting_a_link_does_not_wait_for_its_target(workspace: Workspace) -> None:
    await put(workspace, "/w/f.txt", "alpha\n")
    await workspace.fs.symlink("/w/f.txt", "/w/link")
    gate = Gate()
    editing = await start_gated_edit(GatedWorkspaceStore(workspace, gate), gate, "/w/f.txt", "alpha", "beta")
    # delete removes the link itself, so it takes the link's lock only.
    deleted = await asyncio.wait_for(create_tools(workspace)["delete"].run({"path": "/w/link"}), timeout=10)
    assert deleted == {"deleted": "/w/link"}
    gate.release.set()
    assert "error" not in await editing


async def test_concurrent_edits_through_a_link_and_the_real_path_lose_nothing(workspace: Workspace) -> None:
    count = 12
    body = "".join(f"line{i}=old\n" for i in range(count)) + "#" * 70_000 + "\n"  # splices in a thread
    await put(workspace, "/w/f.txt", body)
    await workspace.fs.symlink("/w/f.txt", "/w/link")
    edit = create_tools(workspace)["edit"]
    results = await asyncio.gather(
        *[
            edit.run(
                {
                    "path": ("/w/f.txt", "/w/link")[i % 2],
                    "edits": [{"oldText": f"line{i}=old", "newText": f"line{i}=new"}],
                }
            )
            for i in range(count)
        ]
    )
    assert all("error" not in r for r in results)
    assert (await workspace.fs.read_text("/w/f.txt")).count("=new") == count


async def test_resolve_links_follows_every_segment(workspace: Workspace) -> None:
    await put(workspace, "/w/d/f.txt", "x")
    await workspace.fs.symlink("../w/d", "/w2")
    await workspace.fs.symlink("/w2/f.txt", "/top")
    await workspace.fs.symlink("loop", "/loop")
    from computer.tools._locks import resolve_links

    readlink = workspace.fs.readlink
    assert await resolve_links(readlink, "/top") == "/w/d/f.txt"
    assert await resolve_links(readlink, "/top", follow=False) == "/top"
    assert await resolve_links(readlink, "/w2/f.txt", follow=False) == "/w/d/f.txt"
    assert await resolve_links(readlink, "/w2/new/deeper") == "/w/d/new/deeper"
    assert await resolve_links(readlink, "/w/d/f.txt/below") == "/w/d/f.txt/below"
    assert (await resolve_links(readlink, "/loop/x")).endswith("/x")
