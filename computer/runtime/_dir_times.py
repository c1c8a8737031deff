"""Directories' own mtimes (SPEC section 10: mtimes round-trip). A pull sends the time of each
directory it makes (``MirrorDir.mtime``) and of each one a run changed something in or touched
(``SyncPull.dir_times``: kept where nothing refuses the path, never listed as pulled); a push sets the
workspace's times on the directories it sent once everything below them is in (``set_dir_times``).

The mirror's top directory (the workspace's root of the run, ``/workspace``) is no entry of the
mirror's state, so :class:`RootTime` carries its own time both ways: a full push (a rebuilt mirror, a
reopen) and a push after another mirror's pull moved it (``SyncPush.root_mtime``) set it, and a pull
sends it when it moved since the last sync (``touch .``, ``tar x`` into ``.``). Before, a reopened
workspace showed the time its mirror was made on ``.``, and a run's touch of ``.`` alone was lost.

Its mode travels the same way (``SyncPush.root_mode``; a pull sends a changed one as the first of its
``dirs``). Before, a run's ``chmod 700 /workspace`` was never stored (the warm mirror kept it, a reopen
showed 0o755) and a mode the workspace gave the root never reached a warm or live mirror. Decisions:
setuid/setgid are taken off the top as off any directory; its owner's search bit is always set (a run
starts there: ``_lifts.open_top``) and the store keeps the mode with it, as the runs see it, so a
reopen shows what the runs before it saw (``chmod 000 .`` is stored as 0o100, and the next run can
``chmod`` it back). A pull's root mode is refused only when the workspace changed the root's own mode
since the sync's base (it keeps its own, as with a directory both sides ``chmod``-ed), never for a
write below it.

A name the workspace makes, removes or renames moves its directory's time in the store
(``storage/_parent_time``, logged ``"touch"``): a push sends that directory with the store's time
(its op alone, nothing below it walked: ``_push_ops.Plan.timed``), set once the push is in, so a warm
mirror and one rebuilt from the store (a reopen) agree. Before, a push's new name moved the warm
mirror's directory to the push's moment while the store kept the old time: after a reopen ``make``
with the directory as a prerequisite missed the new file. A directory whose time both the run and
the workspace moved during the run keeps the later of the two (:func:`keep_later`, decision s63: a
directory's time is no content, and on a disk the later entry change sets it); the run's changes
inside it are never refused for it.

Left as they are: the times a live pull's followed rename gives the mirror's parents (the mirror
renames its own node at the pull; the store's are the rename's), and symlinks' own times."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import stat
from pathlib import Path
from typing import Any, TypedDict

from ..storage import TOUCH
from ..storage.types import Change
from ._backend import MirrorDir, SyncPush, mirror_ns, store_time
from ._beneath import SAFE_BITS, BeneathReader
from ._entry import KIND, Entry
from ._lifts import Lifts
from ._mirror_base import PullPlan
from ._pull_rules import DEFAULT_DIR_MODE

__all__ = [
    "RootFields",
    "RootTime",
    "keep_later",
    "mirror_dir",
    "root_fields",
    "sandbox_mode",
    "set_dir_times",
    "with_dir_times",
]

_new = object.__new__
_FIELDS = ("path", "mode", "mtime", "sub_ns")
_set_path, _set_mode, _set_mtime, _set_sub = (vars(MirrorDir)[name].__set__ for name in _FIELDS)
assert tuple(f.name for f in dataclasses.fields(MirrorDir)) == _FIELDS, "update mirror_dir"


def _set_time(made: MirrorDir, ns: int | None) -> None:
    """Give ``made`` the time ``ns`` read in the mirror (None: none), as the store keeps it."""
    ms, sub = (None, 0) if ns is None else store_time(ns)
    _set_mtime(made, ms)
    _set_sub(made, sub)


def mirror_dir(path: str, mode: int, mtime: int | None, sub_ns: int = 0) -> MirrorDir:
    """``MirrorDir(path, mode, mtime, sub_ns)`` without the frozen dataclass's ``__init__``
    (``object.__setattr__`` per field, from Python): its slots are set directly, 0.25 µs where the call
    took 0.45; a plan makes one per new directory (``mkdir -p`` of 1,111: 0.27 ms of its 1.25)."""
    made: MirrorDir = _new(MirrorDir)
    _set_path(made, path)
    _set_mode(made, mode)
    _set_mtime(made, mtime)
    _set_sub(made, sub_ns)
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

    def ns_of(rel: str) -> int | None:
        try:
            st = lstat(base + rel if rel else directory)
        except OSError:
            return None  # gone since: nothing to keep
        return st.st_mtime_ns if stat.S_ISDIR(st.st_mode) else None

    dirs = plan.dirs
    prefix = "/" if root == "/" else root + "/"
    for rel in parents:
        ns = ns_of(rel)
        at = made.get(rel)
        if at is not None:
            _set_time(dirs[at], ns)
        elif ns is not None and (rel or root != "/"):
            plan.time_dir(prefix + rel if rel else root, ns)
    if times_read < len(made):
        for rel, at in made.items():
            if dirs[at].mtime is None:
                _set_time(dirs[at], ns_of(rel))


def set_dir_times(directory: Path, times: dict[str, int]) -> None:
    """Set the exact mtime (ns: ``mirror_ns``; atime the same) of each directory ``rel`` of ``times``
    below ``directory``, following no link on the way nor at the end (parents opened by a :class:`BeneathReader`: siblings
    share one, and a child's is opened from its parent's, so a chain 1,359 levels deep costs one open
    a level, where opening each from the top took 906,000 and 1.1 s). A name that is no directory now
    is left alone."""
    with BeneathReader(directory) as reader:
        for rel in sorted(times):
            parent, _, name = rel.rpartition("/")
            try:
                fd = reader.dir(parent)
                if stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                    os.utime(name, ns=(times[rel], times[rel]), dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue


async def keep_later(
    fs: Any, changes: list[Change], mtimes: dict[str, int], sub_ns: dict[str, int], paths: set[str]
) -> set[str]:
    """Leave out of a pull's ``mtimes`` (and ``sub_ns``) the directory times among ``paths`` that the
    workspace moved too since the run's base (a ``"touch"`` among ``changes``: a name it made or
    removed there, another run's pull) to a later time than the run's: the store keeps its own.
    Returns the paths left out (one stat each, only for those)."""
    both = {c.path for c in changes if c.op == TOUCH}.intersection(paths) if changes else set()
    kept: set[str] = set()
    for path in sorted(both):
        if path not in mtimes:
            continue
        try:
            st = await fs.stat(path)
        except OSError:
            continue
        if st.is_directory and (st.mtime, getattr(st, "sub_ns", 0)) > (mtimes[path], sub_ns.get(path, 0)):
            del mtimes[path]
            sub_ns.pop(path, None)
            kept.add(path)
    return kept


class RootFields(TypedDict):
    """The store's own time and mode of a push's root (``SyncPush.root_mtime``, ``root_mode``)."""

    root_mtime: int | None
    root_mode: int | None
    root_sub_ns: int


async def root_fields(fs: Any, root: str) -> RootFields:
    """The store's mtime (ms) and permission bits of a push's ``root``; None for ``/`` (a pull never
    sends them either) or a root the store does not have. A root that is a file (followed through a
    link, as the sandbox would) is refused: ``NotADirectoryError`` naming it."""
    if root == "/":
        return {"root_mtime": None, "root_mode": None, "root_sub_ns": 0}
    try:
        st = await fs.stat(root)
    except OSError:
        return {"root_mtime": None, "root_mode": None, "root_sub_ns": 0}
    if not st.is_directory:  # a run's pull would make it one: the file it replaced lost
        raise NotADirectoryError(
            errno.ENOTDIR, "the mount root is a file in the workspace, not a directory", root
        )
    return {
        "root_mtime": st.mtime,
        "root_mode": stat.S_IMODE(st.mode),
        "root_sub_ns": getattr(st, "sub_ns", 0),
    }


def top_mode(directory: Path, lifts: Lifts) -> int | None:
    """The permission bits of the mirror's top as its program left them (one the sync lifted: the
    program's, ``_lifts``); None when it cannot be looked at."""
    if "" in lifts.lifted and "" in lifts.locked:
        return lifts.locked[""]
    try:
        return stat.S_IMODE(os.lstat(directory).st_mode)
    except OSError:
        return None


def sandbox_mode(mode: int) -> int:
    """The bits the top takes for a mode of the root: never setuid/setgid, and its owner's search bit
    always (a run starts there: ``_lifts.open_top``). The store keeps what a pull sends, so a reopen
    shows what the runs before it saw."""
    return (mode & SAFE_BITS) | stat.S_IXUSR


@dataclasses.dataclass
class RootTime:
    """The own mtime and mode of a mirror's top directory, as last synced either way
    (``Mirror.root_time``)."""

    seen: int | None = None  # ns: the top's time after the last push or pull (None: no push yet)
    store: int | None = None  # ms: the store's time of the root, as last pushed or pulled
    store_sub: int = 0  # ... and its nanoseconds past the ms (a change of these alone is a move too)
    given: int | None = None  # ms: the time the push being applied sets (at ``pushed``)
    given_sub: int = 0  # ... and the nanoseconds past it (``SyncPush.root_sub_ns``)
    mode_seen: int | None = None  # the top's bits after the last push or pull (None: no push yet)
    mode_store: int | None = None  # the store's bits of the root, as last pushed or pulled
    mode_given: int | None = None  # the bits the push being applied sets (at ``give_mode``)
    # What a pull's plan found before it took the top's new time or mode, until the pull is stored:
    # put back when it fails (:meth:`unsent`).
    undo: tuple[int | None, int | None, int, int | None, int | None] | None = None

    def moved(self, push: SyncPush) -> bool:
        """Whether ``push`` (a page for an incremental push) changes the top's time or mode."""
        return (push.root_mtime is not None and self._moved_since(push)) or (
            push.root_mode is not None and push.root_mode != self.mode_store
        )

    def _moved_since(self, push: SyncPush) -> bool:
        """Whether the store's time of the root in ``push`` differs from the last synced one, to the ns
        (before, to the ms: another mirror's pull that moved only the ns past it was never set)."""
        return (push.root_mtime, push.root_sub_ns) != (self.store, self.store_sub)

    def pushing(self, push: SyncPush, first: bool = True) -> None:
        """A page of a push: its root time is set once the push is in if the push is a full one or the
        store's time moved since (another mirror's pull); else the top keeps its own. Its root mode
        likewise, on its first page (:meth:`give_mode`)."""
        if push.root_mtime is not None and (push.full or self._moved_since(push)):
            self.given, self.given_sub = push.root_mtime, push.root_sub_ns
        if first and push.root_mode is not None and (push.full or push.root_mode != self.mode_store):
            self.mode_given = push.root_mode
        elif first and push.full and push.root_mode is None and push.root != "/":
            # The store has no root (the workspace removed it): the top as a pull makes it (a run
            # right after ``fs.rm("/workspace")`` saw the removed one's mode).
            self.mode_given = DEFAULT_DIR_MODE

    def give_mode(self, directory: Path, lifts: Lifts) -> None:
        """The page is in: the top takes the mode the push gave (:func:`sandbox_mode`), lifted until
        the sync ends where it locks this process out (a non-root host, ``_lifts``)."""
        if self.mode_given is None:
            return
        self.mode_store, mode = self.mode_given, sandbox_mode(self.mode_given)
        self.mode_given = None
        self.mode_seen = mode  # taken as set even if it fails, as the time is
        with contextlib.suppress(OSError):
            os.chmod(directory, lifts.given("", "d", mode) if lifts.active else mode)

    def pushed(self, directory: Path, lifts: Lifts) -> None:
        """The push is in (``Mirror.finish_push``): the top takes the time it gave, last of all (every
        name made in it moved its time), and that is what a pull compares with."""
        if self.given is not None:  # taken as set even if it fails: a live sandbox's tick never
            self.store, self.store_sub = self.given, self.given_sub
            ns = mirror_ns(self.given, self.given_sub)  # pushes it again and again
            with contextlib.suppress(OSError):
                os.utime(directory, ns=(ns, ns), follow_symlinks=False)
        self.given = None
        try:
            self.seen = os.lstat(directory).st_mtime_ns
        except OSError:
            self.seen = None
        if self.mode_seen is None:  # the store has no such root: the top's own (its pull makes it)
            self.mode_seen = top_mode(directory, lifts)

    def unsent(self) -> None:
        """A pull failed (a full disk, the owner gone, a cancelled tick): the top's time and mode as
        before its plan, so the next pull sends them again as it sends the files it could not store
        (before, a live sandbox's file was pulled again, its top's ``chmod``/``touch`` lost, and the
        next push put the store's back)."""
        if self.undo is not None:
            self.seen, self.store, self.store_sub, self.mode_seen, self.mode_store = self.undo
            self.undo = None

    def pulled(self, plan: PullPlan, directory: Path, root: str, lifts: Lifts, keep: bool = False) -> None:
        """A pull's ``plan``: the top's time goes in its ``dir_times`` when it moved since the last sync
        (a run's ``touch .``; one that made or removed a name there is in it already), and its mode,
        when it changed (``chmod 700 .``), as a directory of ``plan.dirs``, first (:func:`sandbox_mode`:
        setuid/setgid taken off the top too, as off any directory a pull finds; ``keep``, a live
        sandbox's tick: left on the top until :meth:`clear_setid`, never sent)."""
        if root == "/" or self.seen is None:
            return
        try:
            ns = os.lstat(directory).st_mtime_ns
        except OSError:
            return
        if self.undo is None:  # (else a plan whose pull was not stored yet: what came before it)
            self.undo = (self.seen, self.store, self.store_sub, self.mode_seen, self.mode_store)
        if ns != self.seen and root not in plan.dir_times:
            plan.time_dir(root, ns)
        self.seen = ns
        if root in plan.dir_times:
            self.store, self.store_sub = plan.dir_times[root], plan.dir_sub_ns.get(root, 0)
        mode = top_mode(directory, lifts)
        if mode is None or mode == self.mode_seen or self.mode_seen is None:
            return
        if mode & 0o6000 and not keep:
            _setid_off(directory, mode, lifts)
        self.mode_store = sandbox_mode(mode)
        self.mode_seen = self.mode_store | (mode & 0o6000 if keep else 0)
        # with its time, if it moved too: listed as pulled either way (a time alone is never)
        sub = plan.dir_sub_ns.pop(root, 0)
        plan.dirs.insert(0, mirror_dir(root, self.mode_store, plan.dir_times.pop(root, None), sub))

    def clear_setid(self, directory: Path, lifts: Lifts) -> None:
        """The set-id bits a tick's pull left on the top (``pulled`` with ``keep``) taken off."""
        if self.mode_seen is not None and self.mode_seen & 0o6000:
            mode = top_mode(directory, lifts)
            if mode is not None and mode & 0o6000:
                _setid_off(directory, mode, lifts)
            self.mode_seen &= ~0o6000


def _setid_off(directory: Path, mode: int, lifts: Lifts) -> None:
    if "" in lifts.lifted:
        lifts.locked[""] = mode & SAFE_BITS  # put back so at the sync's end
    else:
        with contextlib.suppress(OSError):
            os.chmod(directory, mode & SAFE_BITS)


def dir_times(directory: Path, state: dict[str, Entry]) -> dict[str, int]:
    """The mtime (ns) of each directory of ``state`` below ``directory`` (one ``lstat`` each): an
    unwatched mirror's baseline before its first walk (``MirrorWatch.moved_times``)."""
    base = os.fspath(directory) + "/"
    times: dict[str, int] = {}
    for rel, entry in state.items():
        if entry[KIND] == "d" and rel:
            with contextlib.suppress(OSError):  # below a locked directory: no baseline, no time sent
                times[rel] = os.lstat(base + rel).st_mtime_ns
    return times
