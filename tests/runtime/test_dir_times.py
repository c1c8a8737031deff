"""A directory's time alone (``"touch"`` in the change log: another run's pull kept the program's) is
pushed as that directory's time: never as a change of the tree below it (a push would remove the
directory and send it again whole: every inode below renewed, a running program's working directory
gone) nor, at the root, as the whole tree again; a name linked below it is still linked."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from computer.runtime._backend import SyncLimits
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
    fs.commit_batch({}, mtimes={"/w/d": 1_000_000_000_000, "/w": 1_100_000_000_000})  # a pull's
    await fs.link("/w/d/f", "/w/d/g")
    push = await ctx.sync_push(rev, W, SyncLimits())
    assert not push.full and push.deleted == []  # nor the root's time as the whole tree again
    assert [(d.path, d.mtime) for d in push.dirs] == [("/w/d", 1_000_000_000_000)]
    assert [(f.path, f.link) for f in push.files] == [("/w/d/g", "/w/d/f")]  # linked, not copied
    mirror.apply(push)
    mirror.finish_push(push.rev)
    assert os.lstat(mirror.directory / "d/f").st_ino == held
    assert os.lstat(mirror.directory / "d/g").st_ino == held
    assert os.lstat(mirror.directory / "d").st_mtime_ns == 1_000_000_000_000 * 1_000_000
