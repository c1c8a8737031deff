"""Directories' own mtimes (SPEC section 10: mtimes round-trip). A pull sends the time of each
directory it makes (``MirrorDir.mtime``) and of each one a run changed something in or touched
(``SyncPull.dir_times``: kept where nothing refuses the path, never listed as pulled); a push sets the
workspace's times on the directories it sent once everything below them is in (``set_dir_times``).

Left as they are: the times of directories a push only wrote into (the mirror's then move, the
workspace's do not: a workspace write never moves its directory's time), and symlinks' own times."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

from ._backend import MirrorDir
from ._beneath import BeneathReader
from ._mirror_base import PullPlan

__all__ = ["mirror_dir", "set_dir_times", "with_dir_times"]

_new = object.__new__
_set_path, _set_mode, _set_mtime = (vars(MirrorDir)[name].__set__ for name in ("path", "mode", "mtime"))
assert [f.name for f in dataclasses.fields(MirrorDir)] == ["path", "mode", "mtime"], "update mirror_dir"


def mirror_dir(path: str, mode: int, mtime: int | None) -> MirrorDir:
    """``MirrorDir(path, mode, mtime)`` without the frozen dataclass's ``__init__``
    (``object.__setattr__`` per field, from Python): its slots are set directly, 0.25 µs where the call
    took 0.45; a plan makes one per new directory (``mkdir -p`` of 1,111: 0.27 ms of its 1.25)."""
    made: MirrorDir = _new(MirrorDir)
    _set_path(made, path)
    _set_mode(made, mode)
    _set_mtime(made, mtime)
    return made


def with_dir_times(
    plan: PullPlan, directory: Path, root: str, made: dict[str, int], parents: set[str], times_read: int
) -> None:
    """Give ``plan`` the mtimes (ms) of ``parents`` (relative paths: directories the run changed
    something in, or touched): lstat-ed again, now that the program is done. Those it makes (``made``:
    index in ``plan.dirs``) take it in their ``MirrorDir`` (a new one lstat-ed by the watch as it
    appeared may have been filled since; any other keeps the time read with its entry: ``mkdir -p`` of
    1,110 costs 111 lstat calls, not 1,111), the others go in ``plan.dir_times``; a made one with no
    time read (fewer than ``made`` were: ``times_read``) is lstat-ed."""
    base = os.fspath(directory) + "/"
    lstat = os.lstat

    def mtime_of(rel: str) -> int | None:
        try:
            st = lstat(base + rel if rel else directory)
        except OSError:
            return None  # gone since: nothing to keep
        return st.st_mtime_ns // 1_000_000 if stat.S_ISDIR(st.st_mode) else None

    dirs = plan.dirs
    prefix = "/" if root == "/" else root + "/"
    for rel in parents:
        mtime = mtime_of(rel)
        at = made.get(rel)
        if at is not None:
            _set_mtime(dirs[at], mtime)
        elif mtime is not None and (rel or root != "/"):
            plan.dir_times[prefix + rel if rel else root] = mtime
    if times_read < len(made):
        for rel, at in made.items():
            if dirs[at].mtime is None:
                _set_mtime(dirs[at], mtime_of(rel))


def set_dir_times(directory: Path, times: dict[str, int]) -> None:
    """Set the mtime (ms; atime the same) of each directory ``rel`` of ``times`` below ``directory``,
    following no link on the way nor at the end (parents opened by a :class:`BeneathReader`: siblings
    share one, and a child's is opened from its parent's, so a chain 1,359 levels deep costs one open
    a level, where opening each from the top took 906,000 and 1.1 s). A name that is no directory now
    is left alone."""
    with BeneathReader(directory) as reader:
        for rel in sorted(times):
            parent, _, name = rel.rpartition("/")
            try:
                fd = reader.dir(parent)
                if stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                    ns = times[rel] * 1_000_000
                    os.utime(name, ns=(ns, ns), dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
