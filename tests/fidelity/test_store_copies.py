"""A workspace's file copied (``cp a.sqlite b.sqlite``: a template, a fork) or restored from an earlier
copy keeps the workspace's id. One backend must still keep them apart (s49/h1 findings 4 and 5):

- two copies open at once each run in their own sandbox over their own files (a live sandbox and the
  warm mirrors were kept by workspace id alone: B's programs ran in A's sandbox and read A's files);
- a store restored from an earlier copy, reopened with the backend that ran its later history, is
  pushed in full (the warm mirror of the later history was trusted: the sandbox showed files the
  workspace did not have), also when the restore kept the file's inode and when new writes took the
  store's revision past the mirror's again.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from computer.runtime import ShellBackend

from ._support import ok, opened, settle, started, until


def _files(stdout: str) -> list[str]:
    return sorted(stdout.split())


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_two_copies_of_a_store_open_at_once_run_over_their_own_files(
    tmp_path: Path, live: bool
) -> None:
    shell = ShellBackend(live=live)
    async with opened(tmp_path / "a.sqlite", shell=shell, python=False) as a:
        await a.fs.write_file("/workspace/f", "base\n")
        await ok(a, "cat f")  # A's mirror (and live sandbox) exists before the copy is opened
    shutil.copyfile(tmp_path / "a.sqlite", tmp_path / "b.sqlite")
    async with (
        opened(tmp_path / "a.sqlite", shell=shell, python=False) as a,
        opened(tmp_path / "b.sqlite", shell=shell, python=False) as b,
    ):
        assert a.id == b.id  # the copy keeps the id: what the backend keeps must not go by it alone
        await a.fs.write_file("/workspace/f", "A\n")
        await b.fs.write_file("/workspace/f", "B\n")
        assert (await ok(a, "cat f; echo fromA > a_only")).stdout == "A\n"
        assert (await ok(b, "cat f; echo fromB > b_only")).stdout == "B\n"
        assert _files((await ok(b, "ls")).stdout) == ["b_only", "f"]
        assert _files((await ok(a, "ls")).stdout) == ["a_only", "f"]
        assert (await ok(a, "cat f")).stdout == "A\n"
        if live:  # A's background process is in A's sandbox only
            await ok(a, "setsid sleep 300 > /dev/null 2>&1 &")

            async def a_lists_it() -> bool:  # the run ends as soon as its shell does: the child may
                return any("sleep 300" in p.command for p in await a.runtime.processes())  # not have exec-ed

            await until(a_lists_it, within=30)
            assert not any("sleep 300" in p.command for p in await b.runtime.processes())
            await a.runtime.end_sandbox()
        assert await a.fs.read_file("/workspace/f") == b"A\n"
        assert await b.fs.read_file("/workspace/f") == b"B\n"
        assert not await a.fs.exists("/workspace/b_only")
        assert not await b.fs.exists("/workspace/a_only")


def _copy_store(src: Path, dst: Path, *, in_place: bool) -> None:
    """Copy the SQLite file ``src`` (closed: no WAL left) to ``dst``: in place keeps ``dst``'s inode."""
    for ext in ("-wal", "-shm"):
        assert not os.path.exists(f"{src}{ext}") or ext == "-shm", f"{src}{ext} left after close"
        if os.path.exists(f"{dst}{ext}"):
            os.remove(f"{dst}{ext}")
    if not in_place and dst.exists():
        dst.unlink()
    before = dst.stat().st_ino if dst.exists() else None
    shutil.copyfile(src, dst)  # opens dst for writing: the same inode when it exists
    if in_place:
        assert dst.stat().st_ino == before


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
@pytest.mark.parametrize("in_place", [True, False], ids=["same-inode", "new-file"])
@pytest.mark.parametrize("writes_after", [0, 6], ids=["rev-lower", "rev-past-the-mirror"])
async def test_a_store_restored_from_an_earlier_copy_is_pushed_in_full(
    tmp_path: Path, live: bool, in_place: bool, writes_after: int
) -> None:
    db, backup = tmp_path / "ws.sqlite", tmp_path / "backup.sqlite"
    shell = ShellBackend(live=live)
    async with opened(db, shell=shell, python=False) as ws:
        await ws.fs.write_file("/workspace/f", "v1\n")
        await ok(ws, "echo p1 > g")
    shutil.copyfile(db, backup)
    async with opened(db, shell=shell, python=False) as ws:
        await ws.fs.write_file("/workspace/f", "v2\n")
        await ok(ws, "echo p2 > g; echo new > h")
        later_rev = ws.fs.rev
    _copy_store(backup, db, in_place=in_place)
    async with opened(db, shell=shell, python=False) as ws:
        assert ws.fs.rev < later_rev
        for i in range(writes_after):  # the store's revision goes past the later history's again
            await ws.fs.write_file(f"/workspace/w{i}", f"{i}\n")
        assert (ws.fs.rev > later_rev) == bool(writes_after)
        seen = await ok(ws, "cat f g; ls")
        assert seen.stdout.split("\n")[:2] == ["v1", "p1"], seen.stdout
        assert _files("\n".join(seen.stdout.split("\n")[2:])) == sorted(
            ["f", "g", *(f"w{i}" for i in range(writes_after))]
        )
        assert seen.pulled == []
        assert not await ws.fs.exists("/workspace/h")
        # and the mirror goes on from there: a later run sees the next write, not the later history
        await ws.fs.write_file("/workspace/f", "v3\n")
        assert (await ok(ws, "cat f; ls h 2>/dev/null; true")).stdout == "v3\n"


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
async def test_a_restored_store_gets_no_revision_of_the_mirrors_later_history_left_out(
    tmp_path: Path, live: bool
) -> None:
    """The mirror's own pulls of the later history (revisions a push leaves out: what they changed
    was in the mirror already) mean nothing in the restored one: a write there at such a revision
    reaches the sandbox."""
    db, backup = tmp_path / "ws.sqlite", tmp_path / "backup.sqlite"
    shell = ShellBackend(live=live)
    async with opened(db, shell=shell, python=False) as ws:
        await ws.fs.write_file("/workspace/f", "v1\n")
        await ok(ws, "cat f")
    shutil.copyfile(db, backup)
    async with opened(db, shell=shell, python=False) as ws:
        handle = await started(ws, "echo ready; sleep 0.5; echo p2 > g")
        await ws.fs.write_file("/workspace/x", "meanwhile\n")  # the run's pull is not the only revision
        assert (await settle(handle)).status == "completed"
        later_rev = ws.fs.rev
    _copy_store(backup, db, in_place=True)
    async with opened(db, shell=shell, python=False) as ws:
        await ok(ws, "true")  # pushed in full from the restored store
        for i in range(later_rev + 2):
            await ws.fs.write_file(f"/workspace/w{i}", f"{i}\n")
        listed = _files((await ok(ws, "ls")).stdout)
        assert listed == sorted(["f", *(f"w{i}" for i in range(later_rev + 2))])
