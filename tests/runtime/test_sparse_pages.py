"""Large files cost the owner's event loop by their chunks, not their bytes: a sparse 4 GB file
(`truncate -s 4G`, nothing to the sandbox) is 8,192 chunk rows in the store. A run's 100 of them were
committed, and then removed, in single steps of the loop shared by every workspace of the process
(~0.8 s of CPU each, a neighbour's lag 3.5 s). Now each large file of a page gives the loop a turn
first, and a pull's removals go on pages of their own past ``PAGE_CHUNKS`` chunks of large files; a
push (after a reopen: 100 such files, one step of ~1.3 s) reads each large file's chunk list in a turn
of its own."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import computer
from computer.runtime import ShellBackend, _mirror_pull, _pull_pages
from computer.runtime._backend import SyncLimits
from computer.runtime._context import LocalExecContext
from computer.storage import FileSystem

from .test_sync_pages import _Turns

FILES = 6
MAKE = f"for i in $(seq {FILES}); do truncate -s 8M s$i; done; echo x > s1"  # 16 chunks each


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_each_large_file_of_a_pull_page_gives_the_loop_a_turn(
    monkeypatch: pytest.MonkeyPatch, live: bool
) -> None:
    if live and not ShellBackend(live=True).live:
        pytest.skip("no cgroup freezer here")
    seen: list[int] = []  # the other task's count as each large file's commit starts
    turns = _Turns()
    write_chunks = LocalExecContext._write_chunks

    async def recorded(self: LocalExecContext, f: Any, *args: Any) -> None:
        await write_chunks(self, f, *args)
        seen.append(turns.count)

    monkeypatch.setattr(LocalExecContext, "_write_chunks", recorded)
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()
        async with turns:
            result = await (await ws.runtime.exec(MAKE, timeout=60)).result()
        assert (result.status, result.skipped) == ("completed", []), result.stderr
        assert {f"/workspace/s{i}" for i in range(1, FILES + 1)} <= set(result.pulled)
        assert len(seen) >= FILES - 1  # (s1 is small)
        assert all(later > earlier for earlier, later in itertools.pairwise(seen)), seen
        assert (await ws.fs.stat("/workspace/s6")).size == 8 << 20


async def test_removals_of_large_files_go_on_pages_by_their_chunks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``rm`` of six 16-chunk files with ``PAGE_CHUNKS`` at 40: pages of at most two (one page took
    them all, whatever their chunks), the loop free between them; nothing left after a reopen."""
    monkeypatch.setattr(_pull_pages, "PAGE_CHUNKS", 40)
    monkeypatch.setattr(_mirror_pull, "PAGE_CHUNKS", 40)
    pages: list[list[str]] = []
    seen: list[tuple[int, int]] = []
    turns = _Turns()
    sync_pull = LocalExecContext.sync_pull

    async def recorded(self: LocalExecContext, pull: Any, base_rev: int) -> Any:
        pages.append(list(pull.deleted))
        came = turns.count
        result = await sync_pull(self, pull, base_rev)
        seen.append((came, turns.count))
        return result

    monkeypatch.setattr(LocalExecContext, "sync_pull", recorded)
    db = str(tmp_path / "w.db")
    async with computer.Workspace(db, backends=[ShellBackend(live=False)]) as ws:
        await ws.fs.mkdir("/workspace")
        made = await (await ws.runtime.exec(MAKE + "; echo kept > k", timeout=60)).result()
        assert made.status == "completed", made.stderr
        pages.clear()
        seen.clear()
        async with turns:
            result = await (await ws.runtime.exec("rm s*", timeout=60)).result()
        assert (result.status, result.skipped) == ("completed", []), result.stderr
        assert set(result.pulled) == {f"/workspace/s{i}" for i in range(1, FILES + 1)}
        removed = [p for page in pages for p in page]
        assert sorted(removed) == sorted(result.pulled)
        assert len(pages) >= 3 and all(len(page) <= 2 for page in pages), pages
        assert all(later[0] > done for (_, done), later in itertools.pairwise(seen)), seen
    async with computer.Workspace(db, backends=[ShellBackend(live=False)]) as ws:
        assert [e.name for e in await ws.fs.readdir("/workspace")] == ["k"]
        listed = await (await ws.runtime.exec("ls")).result()
        assert listed.stdout == "k\n"


async def test_each_large_file_of_a_push_page_gives_the_loop_a_turn(fs: FileSystem) -> None:
    """A push page reads each large file's chunk list on the owner's loop: after a reopen, 100 sparse
    4 GB files were one step of ~1.3 s (every workspace of the process held)."""
    await fs.mkdir("/w")
    for i in range(4):
        await fs.write_file(f"/w/big{i}", bytes([i + 1]) * (3 << 20))
    await fs.write_file("/w/small", b"small")
    seen: list[int] = []
    turns = _Turns()
    file_chunks = fs.file_chunks

    def recorded(path: str) -> Any:
        seen.append(turns.count)
        return file_chunks(path)

    fs.file_chunks = recorded  # type: ignore[method-assign]
    ctx = LocalExecContext(SimpleNamespace(fs=fs, id="w"))
    async with turns:
        push = await ctx.sync_push(None, "/w", SyncLimits())
    assert sorted(f.path for f in push.files if f.chunks) == [f"/w/big{i}" for i in range(4)]
    assert len(seen) == 4 and all(later > earlier for earlier, later in itertools.pairwise(seen)), seen
