"""Directories' own mtimes (SPEC section 10: mtimes round-trip). A pull sends the time of each
directory it makes (``MirrorDir.mtime``) and of each one a run changed something in or touched
(``SyncPull.dir_times``: kept where nothing refuses the path, never listed as pulled); a push sets the
workspace's times on the directories it sent once everything below them is in (``set_dir_times``).

The mirror's top directory (the workspace's root of the run, ``/workspace``) is no entry of the
mirror's state, so :class:`RootTime` carries its own time both ways: a full push (a rebuilt mirror, a
reopen) and a push after another mirror's pull moved it (``SyncPush.root_mtime``) set it, and a pull
sends it when it moved since the last sync (``touch .``, ``tar x`` into ``.``). Before, a reopened
workspace showed the time its mirror was made on ``.``, and a run's touch of ``.`` alone was lost.

Left as they are: the times of directories a push only wrote into (the mirror's then move, the
workspace's do not: a workspace write never moves its directory's time), and symlinks' own times."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
from pathlib import Path
from typing import Any

from ._backend import MirrorDir, SyncPush
from ._beneath import BeneathReader
from ._mirror_base import PullPlan

__all__ = ["RootTime", "mirror_dir", "root_mtime", "set_dir_times", "with_dir_times"]

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


async def root_mtime(fs: Any, root: str) -> int | None:
    """The store's mtime (ms) of a push's ``root`` (``SyncPush.root_mtime``); None for ``/`` (a pull
    never sends its time either) or a root the store does not have."""
    if root == "/":
        return None
    try:
        mtime: int = (await fs.stat(root)).mtime
    except OSError:
        return None
    return mtime


@dataclasses.dataclass
class RootTime:
    """The own mtime of a mirror's top directory, as last synced either way (``Mirror.root_time``)."""

    seen: int | None = None  # ns: the top's time after the last push or pull (None: no push yet)
    store: int | None = None  # ms: the store's time of the root, as last pushed or pulled
    given: int | None = None  # ms: the time the push being applied sets (at ``pushed``)

    def pushing(self, push: SyncPush) -> None:
        """A page of a push: its root time is set once the push is in if the push is a full one or the
        store's time moved since (another mirror's pull); else the top keeps its own."""
        if push.root_mtime is not None and (push.full or push.root_mtime != self.store):
            self.given = push.root_mtime

    def pushed(self, directory: Path) -> None:
        """The push is in (``Mirror.finish_push``): the top takes the time it gave, last of all (every
        name made in it moved its time), and that is what a pull compares with."""
        if self.given is not None:  # taken as set even if it fails: a live sandbox's tick never
            self.store, ns = self.given, self.given * 1_000_000  # pushes it again and again
            with contextlib.suppress(OSError):
                os.utime(directory, ns=(ns, ns), follow_symlinks=False)
        self.given = None
        try:
            self.seen = os.lstat(directory).st_mtime_ns
        except OSError:
            self.seen = None

    def pulled(self, plan: PullPlan, directory: Path, root: str) -> None:
        """A pull's ``plan``: the top's time goes in its ``dir_times`` when it moved since the last sync
        (a run's ``touch .``; one that made or removed a name there is in it already)."""
        if root == "/" or self.seen is None:
            return
        try:
            ns = os.lstat(directory).st_mtime_ns
        except OSError:
            return
        if ns != self.seen and root not in plan.dir_times:
            plan.dir_times[root] = ns // 1_000_000
        self.seen = ns
        self.store = plan.dir_times.get(root, self.store)
