"""A directory's time alone (``"touch"`` in the change log: another run's pull kept the program's, or
the workspace made or removed a name in it) is pushed as that directory's time: never as a change of
the tree below it (a push would remove the directory and send it again whole: every inode below
renewed, a running program's working directory gone) nor, at the root, as the whole tree again; a name
linked below it is still linked. A pull keeps the later of the run's and the workspace's time."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from computer.runtime._backend import MirrorDir, MirrorFile, SyncLimits, SyncPull, SyncPush
from computer.runtime._context import LocalExecContext
from computer.runtime._mirror import Mirror
from computer.storage import FileSystem

W = "/w"


async def test_a_touched_directory_is_pushed_in_place_with_its_time(fs: FileSystem, tmp_path: Path) -> None:
    await fs.mkdir("/w/d", recursive=True)
    await fs.write_file("/w/d/f", b"kept")
    ctx = LocalExecContext(SimpleNamespace(fs=fs, id="w"))
    mirror = Mirror(tmp_path / "m", W)
    mirror.apply(await ctx.sync_push(None, W, SyncLimits()))
    mirror.finish_push(fs.rev)
    held = os.lstat(mirror.directory / "d/f").st_ino
    rev = fs.rev
    await fs.link("/w/d/f", "/w/d/g")  # (moves d's time: the pull's below is later, and wins)
    fs.commit_batch({}, mtimes={"/w/d": 1_000_000_000_000, "/w": 1_100_000_000_000})  # a pull's
    push = await ctx.sync_push(rev, W, SyncLimits())
    assert not push.full and push.deleted == []  # nor the root's time as the whole tree again
    assert [(d.path, d.mtime) for d in push.dirs] == [("/w/d", 1_000_000_000_000)]
    assert [(f.path, f.link) for f in push.files] == [("/w/d/g", "/w/d/f")]  # linked, not copied
    mirror.apply(push)
    mirror.finish_push(push.rev)
    assert os.lstat(mirror.directory / "d/f").st_ino == held
    assert os.lstat(mirror.directory / "d/g").st_ino == held
    assert os.lstat(mirror.directory / "d").st_mtime_ns == 1_000_000_000_000 * 1_000_000


async def _synced(fs: FileSystem, tmp_path: Path, *files: str) -> tuple[LocalExecContext, Mirror]:
    """A store holding ``files`` and a mirror of ``/w`` after a full push."""
    for path in files:
        await fs.mkdir(path.rpartition("/")[0], recursive=True)
        await fs.write_file(path, path.encode())
    ctx = LocalExecContext(SimpleNamespace(fs=fs, id="w"))
    mirror = Mirror(tmp_path / "m", W)
    push = await ctx.sync_push(None, W, SyncLimits())
    mirror.apply(push)
    mirror.finish_push(push.rev)
    return ctx, mirror


def _ns(mirror: Mirror, rel: str) -> int:
    return os.lstat(mirror.directory / rel if rel else mirror.directory).st_mtime_ns


async def _push(ctx: LocalExecContext, mirror: Mirror, rev: int) -> SyncPush:
    push = await ctx.sync_push(rev, W, SyncLimits())
    mirror.apply(push)
    mirror.finish_push(push.rev)
    return push


async def test_a_name_the_workspace_makes_gives_the_mirrors_directory_the_stores_time(
    fs: FileSystem, tmp_path: Path
) -> None:
    """Not the push's moment (the mirror made the entry then): the store's, as a mirror rebuilt from it
    (a reopen) shows; the directory goes as its own op, nothing below it walked or sent again."""
    ctx, mirror = await _synced(fs, tmp_path, "/w/d/f", "/w/d/deep/x")
    held = os.lstat(mirror.directory / "d/f").st_ino
    rev = fs.rev
    await fs.write_file("/w/d/new", b"n")
    await fs.write_file("/w/top", b"t")  # the root's time moves too (``SyncPush.root_mtime``)
    ctx._tree_cache = None
    push = await _push(ctx, mirror, rev)
    assert not push.full and push.deleted == []
    stored = (await fs.stat("/w/d")).mtime
    assert [(d.path, d.mtime) for d in push.dirs] == [("/w/d", stored)]
    assert sorted(f.path for f in push.files) == ["/w/d/new", "/w/top"]
    assert ctx._tree_cache is None  # the directory's time alone: no walk of what it holds
    assert _ns(mirror, "d") == stored * 1_000_000
    assert _ns(mirror, "") == (await fs.stat("/w")).mtime * 1_000_000 == push.root_mtime * 1_000_000  # type: ignore[operator]
    assert os.lstat(mirror.directory / "d/f").st_ino == held
    rev = fs.rev
    await fs.rm("/w/d/deep/x")  # a removal's directory likewise, to the mirror's exact time
    push = await _push(ctx, mirror, rev)
    assert [d.path for d in push.dirs] == ["/w/d/deep"] and push.deleted == ["/w/d/deep/x"]
    assert _ns(mirror, "d/deep") == (await fs.stat("/w/d/deep")).mtime * 1_000_000


async def test_renames_in_one_directory_are_all_followed_and_move_both_parents(
    fs: FileSystem, tmp_path: Path
) -> None:
    """The first rename's ``touch`` of the directory is in the way of none after it (before: the
    second one was sent as a removal and a copy, a program holding the file lost it)."""
    ctx, mirror = await _synced(fs, tmp_path, "/w/d/a", "/w/d/c", "/w/e/x")
    held = {name: os.lstat(mirror.directory / "d" / name).st_ino for name in ("a", "c")}
    rev = fs.rev
    await fs.rename("/w/d/a", "/w/d/b")
    await fs.rename("/w/d/c", "/w/e/c")
    push = await _push(ctx, mirror, rev)
    assert push.moves == [("/w/d/a", "/w/d/b"), ("/w/d/c", "/w/e/c")]
    assert push.files == [] and push.deleted == []
    assert os.lstat(mirror.directory / "d/b").st_ino == held["a"]
    assert os.lstat(mirror.directory / "e/c").st_ino == held["c"]
    for rel in ("d", "e"):
        assert _ns(mirror, rel) == (await fs.stat(f"{W}/{rel}")).mtime * 1_000_000


async def test_a_directory_both_the_run_and_the_workspace_moved_keeps_the_later_time(
    fs: FileSystem, tmp_path: Path
) -> None:
    """A directory's time is no content: the workspace's new name in it refuses nothing the run did
    there, and the later of the two times stays (the run's when it is the later)."""
    ctx, _ = await _synced(fs, tmp_path, "/w/d/f", "/w/e/f")
    base = fs.rev
    await fs.write_file("/w/d/ws", b"w")
    await fs.write_file("/w/e/ws", b"w")
    ws_d, ws_e = (await fs.stat("/w/d")).mtime, (await fs.stat("/w/e")).mtime
    pull = SyncPull(
        root=W,
        files=[MirrorFile("/w/d/run", b"r", mtime=1_000), MirrorFile("/w/e/run", b"r", mtime=1_000)],
        dirs=[MirrorDir("/w/e", 0o700, ws_e + 60_000)],  # chmod-ed by the run too, later than the write
        dir_times={"/w/d": ws_d - 60_000},  # the run's entry in d came before the workspace's
    )
    result = await ctx.sync_pull(pull, base)
    assert result.skipped == []
    assert await fs.read_file("/w/d/run") == await fs.read_file("/w/e/run") == b"r"
    assert (await fs.stat("/w/d")).mtime == ws_d
    e = await fs.stat("/w/e")
    assert (e.mtime, e.mode & 0o777) == (ws_e + 60_000, 0o700)
