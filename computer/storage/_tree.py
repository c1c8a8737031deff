"""Tree operations: nodes and directory entries (create, name, remove, copy, move).

Every function takes the shared :class:`~._state.Store` and runs inside the caller's transaction,
except the public operations at the end (``mkdir``, ``rm``, ``symlink``, ``link``, ``rename``,
``copy``), which each open their own :class:`~._state.Mutation`. A node may have several names (hard
links, ``inodes.nlink``): removing a name removes the node only with its last name.
"""

from __future__ import annotations

import errno
import json
from collections import Counter
from collections.abc import Iterable
from itertools import groupby
from operator import itemgetter

from ._chunks import CHUNK_SIZE
from ._parent_time import made_parent, moved_parents
from ._resolve import lookup, resolve, resolve_parent, resolve_read
from ._schema import DIR, FILE, ROOT_INODE, SYMLINK, clean_mode
from ._state import CREATE_OP, JSON_ROWS, LINK_SOURCE, Mutation, Node, Store, now_ms
from .errors import fs_error
from .paths import is_within, join, parts, split, target_problem

__all__ = [
    "add_entry",
    "add_name",
    "copy",
    "ensure_dirs",
    "link",
    "mkdir",
    "new_inode",
    "release",
    "remove_leaves",
    "remove_node",
    "rename",
    "rm",
    "symlink",
]


def new_inode(
    st: Store,
    kind: int,
    mode: int,
    size: int = 0,
    target: str | None = None,
    chunk: int | None = None,
    mtime: int | None = None,
    sub_ns: int = 0,  # the nanoseconds past ``mtime`` (``inodes.sub_ns``): none with a time made now
) -> int:
    t, sub = (now_ms(), 0) if mtime is None else (int(mtime), sub_ns)
    cur = st.db.execute(
        "INSERT INTO inodes (kind, mode, mtime, size, target, chunk, sub_ns) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (kind, clean_mode(mode), t, size, target, chunk, sub),
    )
    return int(cur.lastrowid or 0)


def add_entry(st: Store, parent: int, name: str, child: int, real: str, kind: int) -> None:
    st.db.execute("INSERT INTO dirents (parent, name, child) VALUES (?, ?, ?)", (parent, name, child))
    st.remember(real, (child, kind))


def add_name(st: Store, pino: int, name: str, ino: int, real: str, kind: int) -> None:
    """One more directory entry for an existing node (a hard link)."""
    st.db.execute("UPDATE inodes SET nlink = nlink + 1 WHERE id = ?", (ino,))
    add_entry(st, pino, name, ino, real, kind)


def remove_node(st: Store, path: str, pino: int, name: str, ino: int, kind: int) -> None:
    """Unlink ``name`` from ``pino`` and delete its whole subtree (links are never followed)."""
    db = st.db
    db.execute("DELETE FROM dirents WHERE parent = ? AND name = ?", (pino, name))
    if kind == DIR:
        db.execute("CREATE TEMP TABLE IF NOT EXISTS doomed (id INTEGER PRIMARY KEY)")
        db.execute("DELETE FROM temp.doomed")
        db.execute(
            "INSERT OR IGNORE INTO temp.doomed (id) WITH RECURSIVE sub(id) AS (SELECT ? UNION ALL "
            "SELECT d.child FROM dirents d JOIN sub ON d.parent = sub.id) SELECT id FROM sub",
            (ino,),
        )
        _spare_linked_survivors(st)
        freed = db.one(
            "SELECT coalesce(sum(size), 0) FROM inodes WHERE kind = ? AND id IN (SELECT id FROM temp.doomed)",
            (FILE,),
        )[0]
        counts = db.execute(
            "SELECT chunk, count(*) FROM (SELECT chunk FROM file_chunks WHERE inode IN "
            "(SELECT id FROM temp.doomed) UNION ALL SELECT chunk FROM inodes WHERE chunk IS NOT NULL "
            "AND id IN (SELECT id FROM temp.doomed)) GROUP BY chunk"
        ).fetchall()
        db.execute("DELETE FROM file_chunks WHERE inode IN (SELECT id FROM temp.doomed)")
        db.execute("DELETE FROM dirents WHERE parent IN (SELECT id FROM temp.doomed)")
        db.execute("DELETE FROM inodes WHERE id IN (SELECT id FROM temp.doomed)")
        st.chunks.decref_counts((int(c), int(n)) for c, n in counts)
        st.pending_logical -= int(freed)
    else:
        row = db.one("DELETE FROM inodes WHERE id = ? AND nlink <= 1 RETURNING size, chunk", (ino,))
        if row is None:  # another name of this file (a hard link) keeps it
            db.execute("UPDATE inodes SET nlink = nlink - 1 WHERE id = ?", (ino,))
        else:
            release(st, ((kind, row[0], row[1], ino),))
    st.forget(path, kind)


def _spare_linked_survivors(st: Store) -> None:
    """Take out of ``temp.doomed`` the files that keep a name outside the doomed tree (hard links),
    lowering their link count by the names the tree held. A probe of the partial index of
    linked inodes: nothing more when no doomed file has a second name."""
    db = st.db
    linked = db.execute(
        "SELECT id, nlink FROM inodes WHERE nlink > 1 AND id IN (SELECT id FROM temp.doomed)"
    ).fetchall()
    if not linked:
        return
    inside = dict(
        db.execute(
            "SELECT child, count(*) FROM dirents WHERE parent IN (SELECT id FROM temp.doomed) "
            "AND child IN (SELECT value FROM json_each(?)) GROUP BY child",
            (json.dumps([int(i) for i, _ in linked]),),
        ).fetchall()
    )
    for ino, nlink in linked:
        left = int(nlink) - int(inside.get(ino, 0))
        if left > 0:
            db.execute("UPDATE inodes SET nlink = ? WHERE id = ?", (left, ino))
            db.execute("DELETE FROM temp.doomed WHERE id = ?", (ino,))


def release(st: Store, removed: Iterable[tuple[int, int, int | None, int]]) -> None:
    """Drop deleted inode rows' ``(kind, size, one-chunk id, inode)`` chunk references and logical size."""
    _drop_content(st, *_content_of(removed))


def _content_of(removed: Iterable[tuple[int, int, int | None, int]]) -> tuple[int, list[int], list[int]]:
    """What deleted inode rows held: ``(file bytes, one-chunk files' chunks, larger files' inodes)``."""
    freed = 0
    ones: list[int] = []
    large: list[int] = []
    for kind, size, one, ino in removed:
        if kind != FILE:
            continue
        freed += size
        if one is not None:
            ones.append(one)
        elif size > CHUNK_SIZE:
            large.append(ino)
    return freed, ones, large


def _drop_content(st: Store, freed: int, ones: list[int], large: list[int]) -> None:
    """Release deleted files' ``freed`` logical bytes and chunk references: ``ones`` (one-chunk files'
    chunks, counted once at the end: a Counter per row cost ~1 ms) and the ``large`` chunk lists."""
    counts: Counter[int] = Counter()
    for ino in large:
        counts.update(
            r[0] for r in st.db.execute("DELETE FROM file_chunks WHERE inode = ? RETURNING chunk", (ino,))
        )
    st.pending_logical -= int(freed)
    counts.update(ones)
    st.chunks.decref_counts(counts.items())


def remove_leaves(st: Store, leaves: list[tuple[str, int, str, int, int]], m: Mutation) -> None:
    """Remove many files and links ``(real path, parent, name, inode, kind)`` in a few statements
    (a pull deleting 1,000 files made 4,000: 16 ms); empties ``leaves``.

    What the deleted inodes held comes aggregated from one query before their delete (a count, the
    bytes, two JSON arrays): 1,000 rows returned by the delete and summed in Python cost ~0.65 ms more.
    """
    if not leaves:
        return
    db = st.db
    few: list[tuple[int, str]] = []
    for pino, run in groupby(leaves, key=itemgetter(1)):  # a caller's leaves come parent by parent
        names_in = [leaf[2] for leaf in run]
        if len(names_in) >= JSON_ROWS:  # a pull's removals in one directory: one IN probe of its key
            db.execute(
                "DELETE FROM dirents WHERE parent = ? AND name IN (SELECT value FROM json_each(?))",
                (pino, json.dumps(names_in, ensure_ascii=False)),
            )
        else:
            few += [(pino, name) for name in names_in]
    if few:
        db.executemany("DELETE FROM dirents WHERE parent = ? AND name = ?", few)
    names = Counter(leaf[3] for leaf in leaves)
    ids = json.dumps(list(names))
    gone, freed, ones, large = db.one(
        "SELECT count(*), coalesce(sum(size) FILTER (WHERE kind = ?1), 0), "
        "json_group_array(chunk) FILTER (WHERE kind = ?1 AND chunk IS NOT NULL), "
        "json_group_array(id) FILTER (WHERE kind = ?1 AND chunk IS NULL AND size > ?2) "
        "FROM inodes WHERE id IN (SELECT value FROM json_each(?3)) AND nlink <= 1",
        (FILE, CHUNK_SIZE, ids),
    )
    db.execute("DELETE FROM inodes WHERE id IN (SELECT value FROM json_each(?)) AND nlink <= 1", (ids,))
    ones, large = json.loads(ones), json.loads(large)
    if gone < len(names):  # files of several names (hard links): one fewer per name removed
        rows = []
        left = db.execute("SELECT id FROM inodes WHERE id IN (SELECT value FROM json_each(?))", (ids,))
        for (ino,) in left.fetchall():  # read before the deletes below
            row = db.one(
                "DELETE FROM inodes WHERE id = ? AND nlink <= ? RETURNING kind, size, chunk, id",
                (ino, names[ino]),
            )
            if row is None:
                db.execute("UPDATE inodes SET nlink = nlink - ? WHERE id = ?", (names[ino], ino))
            else:
                rows.append(row)
        more, more_ones, more_large = _content_of(rows)
        freed, ones, large = freed + more, ones + more_ones, large + more_large
    _drop_content(st, freed, ones, large)
    reals = [leaf[0] for leaf in leaves]
    drop = st.cache.pop  # ``Store.forget`` of a file or link: only its own key
    for real in reals:
        drop(real, None)
    m.log_op(reals, "rm")
    leaves.clear()


def ensure_dirs(
    st: Store, p: str, mode: int, m: Mutation, *, replace_files: bool = False, mtime: int | None = None
) -> int:
    """Create every missing directory of ``p``; returns its inode. Symlinks to directories are followed.
    ``mtime`` is the mtime of ``p`` itself when this creates it (its parents get the current time)."""
    segs = parts(p)
    cache = st.cache
    ino, cur = ROOT_INODE, "/"
    for i, name in enumerate(segs):
        nxt = join(cur, name)  # ``cur`` is a real path: ``nxt`` names the entry itself
        node = cache.get(nxt)
        if node is None:
            node = lookup(st, ino, name)  # one probe per missing segment
            if node is not None:
                st.remember(nxt, node)
        if node is not None and node[1] == DIR:
            ino, cur = node[0], nxt
            continue
        if node is not None and node[1] == SYMLINK:
            try:
                node_ino, kind, real = resolve(st, nxt)
            except FileNotFoundError:  # a symlink to nowhere is in the way
                if not replace_files:
                    raise fs_error(errno.EEXIST, p, "a dangling symlink is in the way") from None
                remove_node(st, nxt, ino, name, node[0], node[1])
                node = None
            else:
                if kind == DIR:
                    ino, cur = node_ino, real
                    continue
        if node is not None:  # a file, or a link to one
            if not replace_files:
                code = errno.EEXIST if i == len(segs) - 1 else errno.ENOTDIR
                raise fs_error(code, p, "exists and is not a directory")
            remove_node(st, nxt, ino, name, node[0], node[1])
        new = new_inode(st, DIR, mode, mtime=mtime if i == len(segs) - 1 else None)
        real = join(cur, name)
        add_entry(st, ino, name, new, real, DIR)
        m.log(real, "mkdir")
        ino, cur = new, real
    return ino


def _prepare_destination(
    st: Store, src: str, src_real: str, src_kind: int, dst: str, overwrite: bool
) -> tuple[int, str, str, Node | None]:
    """Check a rename/copy destination; returns ``(parent inode, name, real path, existing node)``."""
    if dst == "/":
        if src_real == "/":
            return ROOT_INODE, "", "/", (ROOT_INODE, DIR)
        if not overwrite:
            raise fs_error(errno.EEXIST, dst)
        if src_kind != DIR:
            raise fs_error(errno.EISDIR, dst, "cannot overwrite a directory with a non-directory")
        raise fs_error(errno.EPERM, dst, "cannot replace the root directory")
    pino, name, real_parent = resolve_parent(st, dst)
    real = join(real_parent, name)
    if src_kind == DIR and is_within(real, src_real) and real != src_real:
        raise fs_error(errno.EINVAL, dst, f"cannot move or copy {src} into its own subtree")
    node = lookup(st, pino, name)
    if node is None or real == src_real:
        return pino, name, real, node
    if not overwrite:
        raise fs_error(errno.EEXIST, dst)
    if src_kind == DIR and node[1] != DIR:
        raise fs_error(errno.ENOTDIR, dst, "cannot overwrite a non-directory with a directory")
    if src_kind != DIR and node[1] == DIR:
        raise fs_error(errno.EISDIR, dst, "cannot overwrite a directory with a non-directory")
    if node[1] == DIR and st.db.one("SELECT 1 FROM dirents WHERE parent = ? LIMIT 1", (node[0],)):
        raise fs_error(errno.ENOTEMPTY, dst, "directory not empty")
    return pino, name, real, node


def _copy_node(
    st: Store, dst: str, ino: int, kind: int, pino: int, name: str, real: str
) -> list[tuple[str, str]]:
    db = st.db
    stack = [(ino, kind, pino, name, real)]
    copied: dict[int, int] = {}  # source inode -> its copy, for files of several names
    made: list[tuple[str, str]] = []  # the change-log entry of every node made, ``real``'s first
    while stack:
        src_ino, k, parent, nm, path = stack.pop()
        made.append((path, CREATE_OP[k]))
        mode, size, target, one, nlink = db.one(
            "SELECT mode, size, target, chunk, nlink FROM inodes WHERE id = ?", (src_ino,)
        )
        if src_ino in copied and src_ino != ino:  # a second name inside the tree: stays one file
            add_name(st, parent, nm, copied[src_ino], path, k)
            continue
        new = new_inode(st, k, int(mode), int(size), target, one)
        if nlink > 1 and src_ino != ino:
            copied[src_ino] = new
        add_entry(st, parent, nm, new, path, k)
        if k == FILE:
            st.check_quota(dst, int(size))
            st.pending_logical += int(size)
        if k == FILE and one is not None:
            st.chunks.incref([int(one)])
        elif k == FILE and size > CHUNK_SIZE:
            db.execute(
                "INSERT INTO file_chunks (inode, idx, chunk) SELECT ?, idx, chunk FROM file_chunks WHERE inode = ?",
                (new, src_ino),
            )
            db.execute(
                "UPDATE chunks SET refs = refs + (SELECT count(*) FROM file_chunks f "
                "WHERE f.inode = ? AND f.chunk = chunks.id) "
                "WHERE id IN (SELECT chunk FROM file_chunks WHERE inode = ?)",
                (src_ino, src_ino),
            )
        elif k == DIR:
            rows = db.execute(
                "SELECT d.name, d.child, i.kind FROM dirents d JOIN inodes i ON i.id = d.child "
                "WHERE d.parent = ? ORDER BY d.name DESC",
                (src_ino,),
            ).fetchall()
            for child_name, child, child_kind in rows:
                stack.append((int(child), int(child_kind), new, child_name, join(path, child_name)))
    return made


def mkdir(st: Store, path: str, *, recursive: bool = False, mode: int = 0o755) -> None:
    """Create a directory; ``recursive`` creates missing parents and accepts an existing directory."""
    p = st.canon(path, refresh=not recursive)  # the plain mkdir resolves inside its transaction
    if p == "/":
        if recursive:
            return
        raise fs_error(errno.EEXIST, p)
    if not recursive:
        with st.mutation(p) as m:
            pino, name, real_parent = resolve_parent(st, p)
            real = join(real_parent, name)
            if lookup(st, pino, name) is not None:
                raise fs_error(errno.EEXIST, p)
            add_entry(st, pino, name, new_inode(st, DIR, mode), real, DIR)
            m.log(real, "mkdir")
            moved_parents(st, m, [(pino, real_parent)])
        return
    try:
        kind = resolve(st, p)[1]
    except FileNotFoundError:
        pass
    else:
        if kind != DIR:
            raise fs_error(errno.EEXIST, p, "exists and is not a directory")
        return
    with st.mutation(p) as m:
        ensure_dirs(st, p, mode, m)
        moved_parents(st, m, made_parent(st, p, m.logged))


def rm(st: Store, path: str, *, recursive: bool = False, force: bool = False) -> None:
    """Remove a file, symlink (the link only) or directory (``recursive`` when not empty)."""
    p = st.canon(path, refresh=False)  # resolved inside the transaction
    if p == "/":
        raise fs_error(errno.EPERM, p, "cannot remove the root directory")
    with st.mutation(p, late_fence=True) as m:
        try:
            ino, kind, real = resolve_read(st, p, follow=False)
            if kind == DIR and not recursive:
                if st.db.one("SELECT 1 FROM dirents WHERE parent = ? LIMIT 1", (ino,)) is not None:
                    raise fs_error(errno.ENOTEMPTY, p, "directory not empty")
        except OSError as exc:
            m.cancel(untouched=True)
            if force and exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return
            raise
        m.check_fence()
        parent, name = split(real)
        pino = resolve(st, parent)[0]
        remove_node(st, real, pino, name, ino, kind)
        m.log(real, "rm")
        moved_parents(st, m, [(pino, parent)])


def symlink(st: Store, target: str, path: str) -> None:
    """Create a symlink at ``path`` pointing to ``target`` (absolute or relative, stored as given)."""
    p = st.canon(path, refresh=False)  # resolved inside the transaction
    problem = target_problem(target)
    if problem is not None:
        raise fs_error(problem[0], p, problem[1])
    if p == "/":
        raise fs_error(errno.EEXIST, p)
    with st.mutation(p) as m:
        pino, name, real_parent = resolve_parent(st, p)
        real = join(real_parent, name)
        if lookup(st, pino, name) is not None:
            raise fs_error(errno.EEXIST, p)
        ino = new_inode(st, SYMLINK, 0o777, len(target.encode("utf-8")), target)
        add_entry(st, pino, name, ino, real, SYMLINK)
        m.log(real, "symlink")
        moved_parents(st, m, [(pino, real_parent)])


def link(st: Store, existing: str, new: str) -> None:
    """Give the file (or symlink) at ``existing`` a second name ``new``: a hard link.

    Both names then share one node: content, mode and mtime; a write through either shows in
    both; removing one keeps the other; ``copy`` makes an independent file; ``rename`` keeps the
    link. Like ``link(2)``: ``existing`` is not followed when it is a symlink (the link itself gets
    the name); a directory is EPERM; an existing ``new`` is EEXIST; a missing parent ENOENT.
    The change log records ``new`` with op ``"link"``, whose ``source`` (``changes_since``) is
    ``existing`` (a mirror holding that file links it rather than copying it); ``stat``/``manifest``
    report ``nlink``.
    """
    s, d = st.canon(existing), st.canon(new, refresh=False)
    with st.mutation(d) as m:
        ino, kind, s_real = resolve_read(st, s, follow=False)
        if kind == DIR:
            raise fs_error(errno.EPERM, s, "cannot hard-link a directory")
        if d == "/":
            raise fs_error(errno.EEXIST, d)
        pino, name, real_parent = resolve_parent(st, d)
        real = join(real_parent, name)
        if lookup(st, pino, name) is not None:
            raise fs_error(errno.EEXIST, d)
        add_name(st, pino, name, ino, real, kind)
        m.log(s_real, LINK_SOURCE)  # read as the next entry's ``source``, never as a change
        m.log(real, "link")
        moved_parents(st, m, [(pino, real_parent)])


def rename(st: Store, src: str, dst: str, *, overwrite: bool = False) -> None:
    """Move ``src`` to ``dst`` in O(1) (one directory entry changes, whatever the subtree size)."""
    s, d = st.canon(src), st.canon(dst)
    if s == "/":
        raise fs_error(errno.EPERM, s, "cannot rename the root directory")
    ino, kind, s_real = resolve_read(st, s, follow=False)
    with st.mutation(s) as m:
        pino, name, d_real, node = _prepare_destination(st, s, s_real, kind, d, overwrite)
        if d_real == s_real or (node is not None and node[0] == ino):
            m.cancel()  # POSIX: two names of one file (hard links) stay as they are
            return
        if node is not None:
            remove_node(st, d_real, pino, name, node[0], node[1])
        s_parent, s_name = split(s_real)
        s_pino = resolve(st, s_parent)[0]
        st.db.execute(
            "UPDATE dirents SET parent = ?, name = ? WHERE parent = ? AND name = ?",
            (pino, name, s_pino, s_name),
        )
        st.forget(s_real, kind)
        st.remember(d_real, (ino, kind))
        # Logged as a pair: the old name removed, then the new one "rename" (``changes_since`` gives
        # that entry its ``source``), so a mirror can move what it holds instead of making it again.
        m.log(s_real, "rm")
        m.log(d_real, "rename")
        moved_parents(st, m, [(s_pino, s_parent), (pino, split(d_real)[0])])  # after the pair


def copy(st: Store, src: str, dst: str, *, overwrite: bool = False) -> None:
    """Copy a file (sharing its chunks: O(metadata)), a symlink, or a directory tree. Every node made
    has the time of the copy (as ``cp`` without ``-p``), so no remainder (``inodes.sub_ns``)."""
    s, d = st.canon(src), st.canon(dst)
    ino, kind, s_real = resolve_read(st, s)
    with st.mutation(d) as m:
        pino, name, d_real, node = _prepare_destination(st, s, s_real, kind, d, overwrite)
        if d_real == s_real:
            m.cancel()
            return
        if node is not None:  # a new file there: a push must not write into the old (its other names)
            remove_node(st, d_real, pino, name, node[0], node[1])
            m.log(d_real, "rm")
        # Every entry of a copied tree: a "mkdir" alone is a directory only made (pushed empty).
        m.log_many(_copy_node(st, d, ino, kind, pino, name, d_real))
        moved_parents(st, m, [(pino, split(d_real)[0])])
