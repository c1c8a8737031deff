"""Attacks through a program's directory renames (``computer/runtime/_pull_moves``, session 66's review).

A pull sends a program's ``mv`` of a directory as one rename, done by the owner before anything else of
the page. A workspace symlink (``l -> /.computer``, a program's own from an earlier run) that the run
replaced by a directory it then renamed a tree into (``rm l; mkdir -p l/y; mv d l/y/x``) was still
the symlink when the owner did the rename: the rename, and the ``mkdir`` of the new name's missing
parents, went through it, and the program's tree landed in the workspace's own ``/.computer`` (which
a program may read but never change), or wherever else the link pointed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fidelity._support import ROOT, ok, opened, shell


@pytest.mark.parametrize("target", ["/.computer", "/elsewhere"])
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_renamed_tree_never_goes_through_a_link_the_run_replaced(
    tmp_path: Path, live: bool, target: str
) -> None:
    async with opened(tmp_path / "ws.sqlite", shell=shell(live), python=False) as ws:
        await ws.fs.mkdir("/elsewhere", recursive=True)
        await ok(ws, f"mkdir d && echo planted > d/f && ln -s {target} l")
        assert (await ws.fs.readlink(f"{ROOT}/l")) == target
        await ok(ws, "rm l && mkdir -p l/y && mv d l/y/x")
        assert not await ws.fs.exists(f"{target}/y")
        assert await ws.fs.read_text(f"{ROOT}/l/y/x/f") == "planted\n"
        assert not await ws.fs.exists(f"{ROOT}/d")
        assert (await ok(ws, "cat l/y/x/f")).stdout == "planted\n"


@pytest.mark.parametrize(
    "renames",
    [
        [("/w/d", "/w/l/y")],  # through the link
        [("/w/d", "/w/l/y/z")],  # its missing parents made through it
        [("/w/a", "/w/b"), ("/w/d", "/w/b/l/y")],  # a link an earlier rename of the list moved
        [("/w/ld", "/w/q")],  # the old name a link to a directory
        [("/w/d", "/w/dangling")],  # the new name a dangling link
    ],
)
async def test_the_owner_refuses_renames_through_a_workspace_link(renames: list[tuple[str, str]]) -> None:
    """What the mirror sends is not trusted: the owner itself refuses a rename whose names lead through
    a symlink of the workspace (nothing committed, ``unrenamed``), whatever the mirror saw."""
    from types import SimpleNamespace

    from computer.runtime import SyncPull
    from computer.runtime._context import LocalExecContext
    from computer.storage import FileSystem

    fs = FileSystem.open(None)
    try:
        await fs.mkdir("/.computer/exec", recursive=True)
        await fs.mkdir("/w/d", recursive=True)
        await fs.write_file("/w/d/f", b"program")
        await fs.mkdir("/w/a", recursive=True)
        await fs.symlink("/.computer", "/w/l")
        await fs.symlink("/.computer", "/w/a/l")
        await fs.symlink("/w/d", "/w/ld")
        await fs.symlink("/nowhere", "/w/dangling")
        rev = fs.rev
        ctx = LocalExecContext(SimpleNamespace(fs=fs, id="w"))
        result = await ctx.sync_pull(SyncPull("/w", renames=renames), rev)
        assert result.unrenamed and fs.rev == rev
        assert [e.name for e in await fs.readdir("/.computer")] == ["exec"]
        assert await fs.read_text("/w/d/f") == "program"
    finally:
        fs.close()


@pytest.mark.parametrize(
    "renames", [[("/.computer", "/x")], [("/w/d", "/.computer/y")], [("/.computer/exec", "/w/e")]]
)
async def test_the_owner_refuses_renames_of_its_own_directory_whatever_the_root(
    renames: list[tuple[str, str]],
) -> None:
    """A pull whose root is ``/`` (no backend mirrors it: ``check_mount_root``) and which names no
    protected path still renames nothing at or below ``/.computer``."""
    from types import SimpleNamespace

    from computer.runtime import SyncPull
    from computer.runtime._context import LocalExecContext
    from computer.storage import FileSystem

    fs = FileSystem.open(None)
    try:
        await fs.mkdir("/.computer/exec", recursive=True)
        await fs.mkdir("/w/d", recursive=True)
        rev = fs.rev
        ctx = LocalExecContext(SimpleNamespace(fs=fs, id="w"))
        result = await ctx.sync_pull(SyncPull("/", renames=renames), rev)
        assert result.unrenamed and fs.rev == rev
    finally:
        fs.close()


@pytest.mark.parametrize(
    "renames",
    [
        [("/w/d", "/w/file/x")],  # the new name's parent a file
        [("/w/d", "/w/file/y/x")],  # a missing parent below a file (the mkdir fails)
        [("/w/e", "/w/e2"), ("/w/d", "/w/e2/f/x")],  # a file an earlier rename of the list moved
        [("/w/e", "/w/e2"), ("/w/d", "/w/e2/f")],  # a name an earlier rename of the list took
        [("/w/e", "/w/e2"), ("/w/e", "/w/e3")],  # an old name an earlier rename of the list emptied
        [("/w/e", "/w/e2"), ("/w/e2/f", "/w/g")],  # an old name, moved, that is a file
    ],
)
async def test_the_owner_refuses_renames_it_could_do_only_in_part(renames: list[tuple[str, str]]) -> None:
    """A hostile mirror's pairs that the owner would fail midway (ENOTDIR, EEXIST, ENOENT): refused
    whole, nothing committed (``unrenamed``), the page's file not written; the page sent again without
    them (as the mirror does) applies. Before (s67), the first rename of a list was committed and the
    second failed the page: the workspace's ``e`` moved to ``e2``, the page's file never written."""
    from types import SimpleNamespace

    from computer.runtime import MirrorFile, SyncPull
    from computer.runtime._context import LocalExecContext
    from computer.storage import FileSystem

    fs = FileSystem.open(None)
    try:
        await fs.mkdir("/.computer/exec", recursive=True)
        await fs.mkdir("/w/d", recursive=True)
        await fs.mkdir("/w/e", recursive=True)
        await fs.write_file("/w/e/f", b"workspace")
        await fs.write_file("/w/file", b"a file")
        rev = fs.rev
        ctx = LocalExecContext(SimpleNamespace(fs=fs, id="w"))
        page = SyncPull("/w", files=[MirrorFile("/w/new", b"n", mtime=1000)], renames=renames)
        result = await ctx.sync_pull(page, rev)
        assert result.unrenamed and fs.rev == rev
        assert sorted(e.name for e in await fs.readdir("/w")) == ["d", "e", "file"]
        again = await ctx.sync_pull(SyncPull("/w", files=page.files), rev)
        assert again.applied == ["/w/new"] and not again.skipped
        assert await fs.read_text("/w/e/f") == "workspace"
    finally:
        fs.close()
