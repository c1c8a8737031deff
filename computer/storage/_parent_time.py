"""A directory's time moves when the workspace makes, removes or renames a name in it.

On a local disk (POSIX) creating, removing or renaming an entry sets its directory's mtime (and
ctime) to now; programs rely on it (``make`` with a directory as a prerequisite, a cache keyed by a
directory's time). The workspace's own calls (``write_file`` and ``write_chunks`` of a new name,
``mkdir``, ``rm``, ``symlink``, ``link``, ``rename``: both parents, ``copy``) do the same: in their own
transaction each parent whose entries changed takes the time now (``sub_ns`` 0: a time the store
makes was never finer), logged ``touch`` after the call's own entries (after a rename's or a link's
pair, which ``changes_since`` reads as two adjacent rows), so a push gives a warm mirror the store's
time of the directory (set once everything below it is in) and a rebuilt one reads it from the
store: both agree. Before, the store kept the directory's old time: a warm mirror showed the push's
moment, a reopen the old time again, and ``make`` missed a file the workspace made.

Not here: an overwrite of an existing file (no entry changes, as ``open(O_TRUNC)``), and a pull's
``commit_batch``, which sends the program's own directory times. An explicit time given after
(``commit_batch(mtimes=)``) wins, as ``touch -d`` after a create does. Cost: one row update and one
change-log row per call (measured in the README, Decisions, "Directory times").
"""

from __future__ import annotations

from collections.abc import Iterable

from ._resolve import resolve
from ._state import TOUCH, Mutation, Store, now_ms
from .paths import parts

__all__ = ["made_parent", "moved_parents"]


def moved_parents(st: Store, m: Mutation, parents: Iterable[tuple[int, str]]) -> None:
    """Give each directory ``(inode, real path)`` of ``parents`` the time now (once each), logged
    :data:`TOUCH`; call it after the call's own change-log entries."""
    now = now_ms()
    done: set[int] = set()
    for ino, real in parents:
        if ino in done:
            continue
        done.add(ino)
        st.db.execute("UPDATE inodes SET mtime = ?, sub_ns = 0 WHERE id = ?", (now, ino))
        m.log(real, TOUCH)


def made_parent(st: Store, path: str, made: int) -> list[tuple[int, str]]:
    """The directory ``(inode, real path)`` that got the first of the ``made`` levels a ``mkdir -p``
    of ``path`` made (the last ``made`` segments of ``path``; none made: none)."""
    if made <= 0:
        return []
    segs = parts(path)
    ino, _, real = resolve(st, "/" + "/".join(segs[: len(segs) - made]))
    return [(ino, real)]
