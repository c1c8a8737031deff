"""The rules of a pull (see ``LocalExecContext.sync_pull``): which paths the workspace changed during
a run (:class:`Conflicts`: the path, an ancestor or a descendant), why a path was left alone (the
reasons of ``ExecResult.skipped_reasons``), which new directories a batch must list, and the
outermost of a set of paths."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

from ..storage import TOUCH
from ..storage.types import Change
from ._backend import MirrorDir, MirrorFile

__all__ = [
    "CONFLICT",
    "DEFAULT_DIR_MODE",
    "LINKED",
    "PROTECTED",
    "PROTECTED_BELOW",
    "UNAPPLIED",
    "Conflicts",
    "add_ancestors",
    "needed_dirs",
    "other_names",
    "outermost",
    "refused_files",
]

# Why a pull left a path alone (``ExecResult.skipped_reasons``).
CONFLICT = "changed in the workspace during the run: the workspace's version was kept"
# A live run's path refused for the workspace's (CONFLICT) by one sync and pulled by a later one.
CONFLICT_THEN_PULLED = (
    "changed in the workspace during the run: a change of the run's was refused for the workspace's, "
    "then a later one of the run's was pulled over it"
)
PROTECTED = "protected: the workspace keeps this file out of the sandbox (see the push's reason)"
PROTECTED_BELOW = "holds a protected file: not removed"
LINKED = (
    "a name of a file the run changed (a hard link) whose change under another name was refused: "
    "refused with it, left as the workspace has it"
)
UNAPPLIED = (
    "could not be applied (a hard link whose file is gone, or a symlink target the workspace cannot hold)"
)


async def other_names(fs: Any, paths: list[str], root: str) -> list[str]:
    """The other names below ``root`` of the files at ``paths`` (hard links): a workspace write
    through one name changed them all (a run's change of another name was pulled over the
    workspace's, and the names no longer shared one file). A walk of the store only when one of them
    has several names; the first 1,000 paths are looked at (beyond: conflicts by path only)."""
    inodes = set()
    for path in set(paths[:1000]):
        with contextlib.suppress(OSError):
            found = await fs.stat(path)
            if found.is_file and found.nlink > 1:
                inodes.add(found.ino)
    if not inodes:
        return []
    return [e.path for e in fs.manifest(root, inodes=True) if e.ino in inodes]


def refused_files(files: Iterable[MirrorFile], refused: Callable[[str], str | None]) -> dict[str, str]:
    """Why the pull refuses each file of a page it refuses (``refused``: a path's own reason), the
    names of one file in the mirror together: a page sends one name of a hard-linked file with the
    content and the others as links of it, and when one name is refused the others are too
    (:data:`LINKED`), so the mirror drops them and fetches the workspace's version of each. Before:
    a program's ``ln f g`` while the workspace wrote ``f`` had ``g`` pulled as a file of its own
    while the mirror kept ``f`` and wrote the workspace's ``f`` into it, which was ``g`` there too:
    the two differed until the program touched the file again (s49 finding 3); the workspace's
    write to ``g`` rewrote the program's ``f`` unreported (S1). The first name of a link whose
    content went on an earlier page (committed then) is in the answer too: the mirror drops it and
    fetches the workspace's version, never the refused name's written into it."""
    why = {f.path: reason for f in files if (reason := refused(f.path)) is not None}
    groups: dict[str, list[str]] = {}  # first name -> every name of the file on the page
    for f in files:
        if f.link is not None:
            groups.setdefault(f.link, [f.link]).append(f.path)
    for names in groups.values():
        own = [(name, refused(name)) for name in names]
        if any(reason is not None for _, reason in own):
            why.update((name, reason or LINKED) for name, reason in own)
    return why


class Conflicts:
    """Paths the workspace changed: a path conflicts when it, an ancestor or a descendant changed.

    Except below a directory the workspace only made (or chmod-ed: ``made``, the change log's entries
    of each path all ``"mkdir"``; a copied tree logs every entry): what a run changed below it
    conflicts only by its own path, its descendants and the ancestors between, and a directory the
    run made there too is no conflict (``hit(path, directory=True)``: the workspace's mode and time
    stay). Before, both sides' ``mkdir -p out`` in one sync interval refused every file the run wrote
    below ``out`` and the mirror dropped them: a lasting loss the workspace never saw.

    A directory's own mode and time (``hit(path, directory=True)``: ``chmod 700 d``, ``touch d``, and
    the pull's ``root``, ``_dir_times.RootTime``) conflict by its own path and its ancestors only: a
    workspace write below it in the same sync interval refuses nothing of it. Before, the run's
    ``chmod`` was refused and the mirror dropped the directory and fetched it whole: every file below
    it got a new inode, and a live sandbox's process writing through a file it held open wrote into
    a removed file from then on (its later writes lost). The run's ``rm -r d``, or a file made in
    ``d``'s place, still conflicts with a workspace write below ``d`` (``directory`` False)."""

    def __init__(
        self, touched: list[str], *, everything: bool = False, made: Iterable[Change] = (), root: str = ""
    ) -> None:
        self.everything = everything
        self.root = root  # a pull's root: its own mode and time conflict only with a change of itself
        self.touched = set(touched)
        self.above = add_ancestors(set(), self.touched)  # every proper ancestor of a touched path
        if "/" in self.touched:
            self.everything = True
        ops: dict[str, bool] = {}  # path -> whether every change of it was a "mkdir"
        for change in made:
            if change.op != TOUCH:
                ops[change.path] = ops.get(change.path, True) and change.op == "mkdir"
        self.made = {path for path, only in ops.items() if only}

    def add(self, path: str) -> None:
        """Count ``path`` as changed too."""
        if path == "/":
            self.everything = True
        self.touched.add(path)
        add_ancestors(self.above, (path,))

    def none(self) -> bool:
        """True when no path can conflict (the workspace changed nothing below the root)."""
        return not self.everything and not self.touched

    def hit(self, path: str, directory: bool = False) -> bool:
        """Whether ``path`` conflicts; ``directory``: the run made it a directory (or chmod-ed it)."""
        if self.everything:
            return True
        if not self.touched:
            return False
        if path in self.made:
            if not directory:
                return True
        elif path in self.touched or (path in self.above and not directory and path != self.root):
            return True
        parent = path.rpartition("/")[0]
        while parent:
            if parent in self.touched and parent not in self.made:
                return True
            parent = parent.rpartition("/")[0]
        return False


DEFAULT_DIR_MODE = 0o755


def add_ancestors(into: set[str], paths: Iterable[str]) -> set[str]:
    """``into`` with every proper ancestor of each of ``paths`` added (``/`` never is); each walk
    stops at a parent ``into`` holds already (its own ancestors are in)."""
    for path in paths:
        parent = path.rpartition("/")[0]
        while parent and parent not in into:
            into.add(parent)
            parent = parent.rpartition("/")[0]
    return into


def needed_dirs(dirs: list[MirrorDir], protected: set[str], written: set[str]) -> list[str]:
    """The new directories the batch must create explicitly.

    The batch creates missing parents of every path it writes (mode 0o755), so a new directory needs
    listing only when nothing new lies below it or its mode is not the default. For a ``mkdir -p`` of a
    deep tree this sends the leaves, not every level.
    """
    # In the order given (a plan's: by depth, then by path), so the leaves come out nearly sorted
    # (1,000 leaves: 0.26 ms, 0.45 from a set's order).
    modes = {d.path: d.mode & 0o7777 for d in dirs}
    candidates = modes.keys() - protected if protected else modes.keys()
    if not candidates:  # a pull of removals or writes only (sorting 1,000 written paths: 0.7 ms)
        return []
    # Every proper ancestor of a new path; each walk stops at one seen already (its ancestors are in).
    # The 1,110 directories of a 10x10x10 tree: 0.36 ms, where sorting by split segments took 2.1.
    parents = add_ancestors(add_ancestors(set(), candidates), written)
    return sorted([p for p in candidates if p not in parents or modes[p] != DEFAULT_DIR_MODE])


def outermost(paths: list[str]) -> list[str]:
    """Unique paths, sorted, without those below another listed path. Each parent is looked up once
    (whether it or an ancestor is listed), not each path's ancestors, and duplicates go in the order
    given, which a pull's plan sorted already (1,000 removals from one directory: 0.34 ms walking
    each path's ancestors, 0.20 now; sorting by split segments took 0.78)."""
    unique = dict.fromkeys(paths)
    if "/" in unique:
        return ["/"]
    covered: dict[str, bool] = {}  # parent -> whether it or one of its ancestors is listed
    out: list[str] = []
    for path in sorted(unique):
        parent = path.rpartition("/")[0]
        inside = covered.get(parent)
        if inside is None:
            above = parent
            while above and above not in unique:
                above = above.rpartition("/")[0]
            inside = covered[parent] = bool(above)
        if not inside:
            out.append(path)
    return out
