"""Every name of a node (its hard links) and the check of a batch's in-place write against them.

``dirents_child`` (schema 6) indexes directory entries by the node they name, so the names of a file
of several names are one index range, and each directory above one its own probe (a directory has
one name). A pull writes a changed file of several names through its node (``commit_batch``'s
``in_place``): one write, no name re-sent; before, the file got a new node under the written name and
every other name came again as a link, two change-log rows each (20,000 names: ~60 % of the owner's
event loop for a 2-byte append every 50 ms).
"""

from __future__ import annotations

from collections.abc import Mapping

from ._resolve import lookup, resolve
from ._schema import FILE, ROOT_INODE
from ._state import TOUCH, Store
from .paths import is_within, join, split
from .types import ChangeSet

__all__ = ["in_place_refused", "names_of"]


def names_of(st: Store, ino: int) -> list[str]:
    """The paths naming the node ``ino`` (its hard links), sorted; ``[]`` for the root or a node no
    entry names."""
    db = st.db
    dirs: dict[int, str] = {ROOT_INODE: "/"}

    def path_of(directory: int) -> str | None:
        found = dirs.get(directory)
        if found is None:
            row = db.one("SELECT parent, name FROM dirents WHERE child = ?", (directory,))
            above = None if row is None else path_of(int(row[0]))
            if above is None:
                return None  # (never: every directory but the root has a name)
            found = dirs[directory] = (above if above != "/" else "") + "/" + str(row[1])
        return found

    out = []
    for parent, name in db.execute("SELECT parent, name FROM dirents WHERE child = ?", (ino,)).fetchall():
        above = path_of(int(parent))
        if above is not None:
            out.append((above if above != "/" else "") + "/" + str(name))
    return sorted(out)


def in_place_refused(st: Store, in_place: Mapping[str, int], log: ChangeSet) -> set[str]:
    """The paths of ``in_place`` (a path -> the revision its writer last saw) whose write through the
    node would change a name the workspace changed since: another name of the node at the path (a
    file) changed after that revision (``log``: the change log since the oldest of them, the
    writer's own revisions left out), itself or an ancestor or descendant of it (a batch's conflict
    rule, ``commit_batch``'s ``base_rev``). The path itself is not looked at: its writer judged it
    (a pull's rules follow a workspace rename of it). A log trimmed past the revision refuses all
    (the workspace wins when we cannot tell).

    Cost: nothing past the log scan while the workspace is quiet; else the directories holding a
    name of the node (one grouped index range) and a probe per changed path and ancestor, never a
    row per name (20,000 names in one directory, each checked against the log: ~0.15 s a sync)."""
    if not log.complete:
        return set(in_place)
    refused: set[str] = set()
    for p, rev in in_place.items():
        touched = {c.path for c in log.changes if c.rev > rev and c.op != TOUCH}
        if not touched:
            continue
        parent, name = split(p)
        try:
            pino, _, preal = resolve(st, parent)
        except OSError:
            continue  # nothing there yet: a new file, no other name
        node = lookup(st, pino, name)
        if node is not None and node[1] == FILE and _changed(st, node[0], join(preal, name), touched):
            refused.add(p)
    return refused


def _changed(st: Store, ino: int, own: str, touched: set[str]) -> bool:
    """Whether a name of ``ino`` but ``own`` is in ``touched``, below one, or above one (a path was
    made below a name when it was a directory)."""
    # Directory path -> inode, for each directory holding a name (but ``own`` alone).
    dirs: dict[str, int] = {}
    own_dir = split(own)[0]
    for parent, count in st.db.execute(
        "SELECT parent, count(*) FROM dirents WHERE child = ? GROUP BY parent", (ino,)
    ).fetchall():
        where = _dir_path(st, int(parent))
        if where is not None and (where != own_dir or int(count) > 1):
            dirs[where] = int(parent)
    for t in touched:
        if any(is_within(d, t) for d in dirs):
            return True  # a directory holding a name, or one above it
        at = t
        while at != "/":  # ``t`` itself or an ancestor is a name of the node
            above, name = split(at)
            held = dirs.get(above)
            if held is not None and at != own and (found := lookup(st, held, name)) is not None:
                if found[0] == ino:
                    return True
            at = above
    return False


def _dir_path(st: Store, directory: int) -> str | None:
    """The path of the directory ``directory`` (one name each: walked up through ``dirents_child``)."""
    segments = []
    while directory != ROOT_INODE:
        row = st.db.one("SELECT parent, name FROM dirents WHERE child = ?", (directory,))
        if row is None:
            return None
        segments.append(str(row[1]))
        directory = int(row[0])
    return "/" + "/".join(reversed(segments))
