"""``Lifts``: the sync's access to a mirror whose program locked its owner out.

A program may take permission bits away from its own files: ``chmod 000 f``, ``chmod 500 dir``,
``mkdir -m 0 d``. Where this process has ``CAP_DAC_OVERRIDE`` (root, as the default deployment and
CI run) that changes nothing for the sync. Where it has not (a non-root host, where the sandbox's files
are this process's own), the sync could not list a locked directory, look below it or read a locked
file, nor write into a locked directory. Before this module, a pull took what it could not see for
removed and deleted it from the workspace, left an unreadable file out without a word, and a push
into a locked directory failed the run.

The sync now lifts what it needs while it runs and puts the program's bits back at its end:
u+rwx on a directory, u+rw on a regular file, each set through a descriptor opened without
following a link (a link a program planted is never followed to the host). The sandbox is stopped
(a run per call) or frozen (a live one) while a sync runs, so no program sees a lifted mode (where
no cgroup freezer is available, a live sandbox's program may, for the length of a sync). The
workspace records the program's mode. A lift moves a file's ctime, so each file put back has its
state taken again, before its directory's bits go back (the next pull would take it for changed).
A directory a program locked is seen by the pull that follows (its lstat, or a lookup below it that
fails with EACCES); a push lifts the locked directories above what it writes.

The mirror's top directory is lifted and put back like any other, with one exception: it is the
sandbox's working directory, and a program that locked its owner out of it (``chmod 000 .``) failed
every later run at ``cd``, with nothing left to undo it from inside. After each pull its owner's
search bit is set again for good, root or not: a run starts there and can ``chmod`` it back, and
every other bit stays as the program set it. The workspace keeps the top's mode as the runs see it,
that bit included (``_dir_times.RootTime``: ``chmod 000 .`` is stored as 0o100).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ._beneath import open_beneath
from ._limits import overrides_modes

__all__ = ["Lifts", "open_top"]

_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
DIR_NEEDS, FILE_NEEDS = 0o700, 0o600
_KIND_NEEDS = {"d": DIR_NEEDS, "f": FILE_NEEDS}  # by an entry's kind (links and the rest need none)


def _needs(st_mode: int) -> int:
    """The owner bits the sync needs on a node of this ``st_mode`` (0: none, a link or a FIFO)."""
    kind = stat.S_IFMT(st_mode)
    return DIR_NEEDS if kind == stat.S_IFDIR else FILE_NEEDS if kind == stat.S_IFREG else 0


def _chmod_fd(fd: int, mode: int) -> None:
    os.chmod(f"/proc/self/fd/{fd}", mode)  # the descriptor's node, never a link


def open_top(directory: Path) -> bool:
    """Give the owner of the mirror's top directory its search bit again, so a run can start in it
    (see the module's note); whether it lacked it."""
    try:
        fd = os.open(directory, _PATH | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & stat.S_IXUSR:
            return False
        _chmod_fd(fd, mode | stat.S_IXUSR)
        return True
    finally:
        os.close(fd)


class Lifts:
    """The paths of one mirror whose mode locks its owner out (``locked``: relative path -> the
    program's permission bits) and which of them are lifted now. ``active`` is False where this
    process overrides file modes anyway (``CAP_DAC_OVERRIDE``): then nothing is ever noted or lifted."""

    def __init__(self, active: bool | None = None) -> None:
        self.active = not overrides_modes() if active is None else active
        self.locked: dict[str, int] = {}
        self.lifted: set[str] = set()

    def note(self, rel: str, kind: str, mode: int) -> None:
        """What a pull found at ``rel`` (an entry's kind and permission bits, not lifted by this
        sync): a lock recorded, or one the program took off forgotten."""
        need = _KIND_NEEDS.get(kind, 0)
        if need and mode & need != need:
            self.locked[rel] = mode
        elif self.locked:
            self.locked.pop(rel, None)

    def given(self, rel: str, kind: str, mode: int) -> int:
        """The bits a push sets on ``rel`` (``kind`` "d" or "f") for the workspace's ``mode``: those,
        lifted until the sync ends where they lock the owner out (it may write below or into it)."""
        need = _KIND_NEEDS[kind]
        if mode & need == need:
            if self.locked:
                self.locked.pop(rel, None)
                self.lifted.discard(rel)
            return mode
        self.locked[rel] = mode
        self.lifted.add(rel)
        return mode | need

    def lift(self, directory: Path, rel: str, *, itself: bool = True, files: bool = True) -> bool:
        """Lift every directory from the top down to ``rel`` that locks its owner out, and ``rel``
        itself when ``itself`` (a file only when ``files``); whether anything was lifted. A missing
        path, or one whose way down is not a directory (or is a link), stops the walk there."""
        names = rel.split("/") if rel else []
        walk = names if itself else names[:-1]
        changed = False
        try:
            fd = os.open(directory, _PATH | os.O_DIRECTORY)
        except OSError:
            return changed
        try:
            at = ""  # the top first ("": the mirror's directory itself)
            for name in [None, *walk]:
                if name is not None:
                    child = os.open(name, _PATH, dir_fd=fd)  # ENOTDIR below a file: the walk ends
                    os.close(fd)
                    fd = child
                    at = f"{at}/{name}" if at else name
                st = os.fstat(fd)
                need = _needs(st.st_mode)
                if not need or (not files and need != DIR_NEEDS):  # a link (never followed), a FIFO
                    break
                if at in self.lifted or st.st_mode & need == need:
                    continue
                self.locked[at] = stat.S_IMODE(st.st_mode)
                _chmod_fd(fd, stat.S_IMODE(st.st_mode) | need)
                self.lifted.add(at)
                changed = True
        except OSError:
            pass
        finally:
            os.close(fd)
        return changed

    def lift_locked(self, directory: Path, rels: Iterable[str]) -> None:
        """Lift what a push needs to write ``rels``: each of them, or a directory above one, that a
        pull found locked."""
        if not self.locked:
            return
        locked, lifted = self.locked, self.lifted
        if "" in locked and "" not in lifted:  # the top (no path of ``rels`` names it)
            self.lift(directory, "")
        for rel in rels:
            probe = rel
            while probe:
                if probe in locked and probe not in lifted:
                    self.lift(directory, rel)
                    break
                probe = probe.rpartition("/")[0]

    def lift_all(self, directory: Path) -> None:
        """Lift every directory found locked (before a new watch walks the tree: it needs to read
        each directory; a file lifted would move its ctime for nothing)."""
        for rel in sorted(self.locked):
            if rel not in self.lifted:
                self.lift(directory, rel, files=False)

    def restore(self, directory: Path) -> dict[str, os.stat_result]:
        """Put the program's bits back on every lifted path, deepest first (a path sorts after its
        parents), each reached through its still lifted parents; the lstat of each, taken after."""
        done: dict[str, os.stat_result] = {}
        for rel in sorted(self.lifted, reverse=True):
            mode = self.locked.get(rel)
            if mode is None:
                continue
            with contextlib.suppress(OSError):
                fd = open_beneath(directory, rel, _PATH)  # "" is the top itself
                try:
                    _chmod_fd(fd, mode)
                    done[rel] = os.fstat(fd)
                finally:
                    os.close(fd)
        self.lifted.clear()
        return done

    def forget_below_top(self) -> None:
        """The mirror was emptied (a full push): only the top's lock, if any, is left to put back."""
        self.locked = {"": self.locked[""]} if "" in self.locked else {}
        self.lifted &= {""}

    def forget(self, rel: str) -> None:
        """``rel`` is gone (a pull found it removed): its lock with it."""
        if self.locked:
            self.locked.pop(rel, None)
