"""The tools read ``/.computer`` (the runs' journal, saved output logs) but never change it: a model's
``write`` there rewrote a run's record, and ``get_exec`` after a restart trusted it."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from computer import Workspace
from computer.runtime import ShellBackend
from computer.tools import WorkspaceFileStore, create_tools


@pytest.fixture(scope="module")
def shell() -> ShellBackend:
    return ShellBackend(live=False, warm_sandboxes=0)


async def test_the_tools_read_the_journal_and_logs_but_cannot_change_them(
    shell: ShellBackend, tmp_path: Path
) -> None:
    db = str(tmp_path / "ws.sqlite")
    async with Workspace(db, backends=[shell]) as ws:
        tools = create_tools(ws)
        ran = await tools["exec"].run({"command": "seq 3000; exit 4"})
        log, run_id = ran["truncated"]["stdout"]["path"], ran["id"]
        assert log.startswith("/.computer/output/") and ran["exitCode"] == 4
        record = f"/.computer/exec/{run_id}.json"
        assert await ws.fs.exists(record)
        before = await ws.fs.read_file(record)
        # reads stay: the log the result points to, the journal, a listing and a search
        assert (await tools["read"].run({"path": log, "offset": 3000}))["content"] == "3000"
        assert json.loads((await tools["read"].run({"path": record}))["content"])["exit_code"] == 4
        assert (await tools["ls"].run({"path": "/.computer/exec"}))["count"] >= 1
        assert (await tools["grep"].run({"path": "/.computer/output", "query": "2999"}))["count"] == 1
        # changes are refused, as an error naming the path, however the path is spelled or reached
        forged = json.dumps({"status": "completed", "exit_code": 0, "stdout": "all good"})
        await ws.fs.mkdir("/workspace")
        await ws.fs.symlink("/.computer", "/workspace/sys")
        attempts = [
            ("write", {"path": record, "content": forged}),
            ("write", {"path": "/workspace/../.computer/exec/new.json", "content": "{}"}),
            ("write", {"path": "/workspace/sys/output/x.log", "content": "x"}),
            ("edit", {"path": record, "edits": [{"oldText": '"exit_code": 4', "newText": '"exit_code": 0'}]}),
            ("delete", {"path": log}),
            ("delete", {"path": "/.computer", "recursive": True}),
            ("delete", {"path": "/workspace/sys/exec", "recursive": True}),
            ("delete", {"path": "/.computer/nothing-here"}),
        ]
        for tool, args in attempts:
            result = await tools[tool].run(args)
            assert "/.computer is the workspace's own" in result.get("error", ""), (tool, args, result)
        assert await ws.fs.read_file(record) == before and await ws.fs.exists(log)
        assert not await ws.fs.exists("/.computer/exec/new.json")
        # the link itself is the workspace's: removing it is allowed (it does not follow the link)
        assert (await tools["delete"].run({"path": "/workspace/sys"})) == {"deleted": "/workspace/sys"}
        for path in ("/workspace/ok.txt", "/.computers/x", "/workspace/.computer/exec/y.json"):  # not in it
            assert (await tools["write"].run({"path": path, "content": "ok"}))["bytesWritten"] == 2, path
        # the owner's own API is not the tools': the runtime and the user still write there
        await ws.fs.write_file("/.computer/note.txt", "mine")
    async with Workspace(db, backends=[shell]) as again:
        result = await again.runtime.get_exec(run_id)
        assert result is not None
        done = await result.result()
        assert (done.status, done.exit_code) == ("failed", 4)


async def test_a_change_of_the_root_is_refused_as_such() -> None:
    """``delete``/``write`` of ``/`` said "/.computer is the workspace's own" (the root is its ancestor):
    now the root's own error (SPEC section 1: EPERM to remove, EISDIR to write), naming the path."""
    async with Workspace() as ws:
        tools = create_tools(ws)
        await ws.fs.mkdir("/workspace")
        await ws.fs.symlink("/", "/workspace/top")
        for tool, args, start in [
            ("delete", {"path": "/"}, "Operation not permitted: / (the workspace root) cannot be removed"),
            ("delete", {"path": "/", "recursive": True}, "Operation not permitted: / (the workspace root)"),
            ("delete", {"path": "/workspace/..", "recursive": True}, "Operation not permitted: / (the"),
            (
                "write",
                {"path": "/", "content": "x"},
                "Is a directory: / (the workspace root) cannot",
            ),
            (
                "write",
                {"path": "/workspace/top", "content": "x"},
                "Is a directory: /workspace/top (it leads to /",
            ),
        ]:
            error = (await tools[tool].run(args)).get("error", "")
            assert error.startswith(start) and "/.computer" not in error, (tool, args, error)
        assert await ws.fs.exists("/workspace/top") and await ws.fs.exists("/workspace")
        # the store's guard says the same (the OSError subclass, with the path)
        store = WorkspaceFileStore(ws)
        with pytest.raises(PermissionError) as removed:
            await store.remove("/", recursive=True, force=True)
        with pytest.raises(IsADirectoryError) as written:
            await store.write("/workspace/top", b"x")
        assert (removed.value.errno, removed.value.filename) == (errno.EPERM, "/")
        assert (written.value.errno, written.value.filename) == (errno.EISDIR, "/workspace/top")
