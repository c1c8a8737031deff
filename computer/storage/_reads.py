"""Reads of metadata: ``stat``, ``exists``, ``readlink``, ``readdir``, ``ls`` (SPEC 4) and ``stats``.

Every function takes the shared :class:`~._state.Store` and runs no transaction of its own.
"""

from __future__ import annotations

import errno

from ._garbage import flush_garbage
from ._resolve import resolve, resolve_read, target
from ._schema import DIR, FILE, SYMLINK
from ._search import walk_tree
from ._state import Store
from .errors import fs_error
from .paths import split
from .types import DirEntry, FileStat

__all__ = ["exists", "ls", "readdir", "readlink", "stat", "stats"]


def stat(st: Store, path: str) -> FileStat:
    """Metadata of ``path``, following symlinks; ``name`` is the last segment (``""`` for ``/``)."""
    p = st.canon(path)
    ino, kind, _ = resolve_read(st, p)
    mode, mtime, size, nlink, sub_ns = st.db.one(
        "SELECT mode, mtime, size, nlink, sub_ns FROM inodes WHERE id = ?", (ino,)
    )
    return FileStat(
        name=split(p)[1],
        mode=int(mode),
        mtime=int(mtime),
        size=int(size),
        is_file=kind == FILE,
        is_directory=kind == DIR,
        ino=ino,
        nlink=int(nlink),
        sub_ns=int(sub_ns),
    )


def exists(st: Store, path: str) -> bool:
    """True when ``path`` resolves (a dangling symlink does not)."""
    p = st.canon(path)
    try:
        resolve(st, p)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return False
        raise
    return True


def readlink(st: Store, path: str) -> str:
    """The target of the symlink at ``path`` (EINVAL when it is not a symlink)."""
    p = st.canon(path)
    ino, kind, _ = resolve_read(st, p, follow=False)
    if kind != SYMLINK:
        raise fs_error(errno.EINVAL, p, "not a symbolic link")
    return target(st, ino)


_SQL_MAX = 2**63 - 1


def readdir(st: Store, path: str, *, limit: int | None = None, offset: int = 0) -> list[DirEntry]:
    """Children of a directory in byte order of their names, paged by ``offset``/``limit``."""
    p = st.canon(path)
    if offset < 0 or (limit is not None and limit < 0):
        raise fs_error(errno.EINVAL, p, "offset and limit must not be negative")
    ino, kind, _ = resolve_read(st, p)
    if kind != DIR:
        raise fs_error(errno.ENOTDIR, p)
    rows = st.db.execute(
        "SELECT d.name, i.kind, i.size, i.mtime FROM dirents d JOIN inodes i ON i.id = d.child "
        "WHERE d.parent = ? ORDER BY d.name LIMIT ? OFFSET ?",
        # SQLite integers are 64-bit: a larger page is "all of them", a larger offset "past the end"
        # (they raised OverflowError, not an OSError; a python run's ``workspace.readdir`` got it).
        (ino, -1 if limit is None or limit > _SQL_MAX else limit, min(offset, _SQL_MAX)),
    )
    return [
        DirEntry(
            name=name,
            parent_path=p,
            size=int(size),
            mtime=int(mtime),
            is_file=k == FILE,
            is_directory=k == DIR,
            is_symlink=k == SYMLINK,
        )
        for name, k, size, mtime in rows
    ]


def ls(st: Store, prefix: str) -> list[str]:
    """Every regular file at or under ``prefix`` (segment-aware), in walk order; ``[]`` when missing."""
    p = st.canon(prefix)
    try:
        ino, kind, _ = resolve_read(st, p)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP):
            return []
        raise
    if kind == FILE:
        return [p]
    if kind != DIR:
        return []
    return [row[0] for row in walk_tree(st.db, ino, p) if row[1] == FILE]


def stats(st: Store) -> dict[str, int]:
    """Counters: files, dirs, symlinks, chunks, stored_bytes, chunk_bytes, logical_bytes, queries,
    chunk_reads, rev (freed garbage is collected first, so the chunk counts are exact)."""
    db = st.db
    st.refresh()
    flush_garbage(st)
    counts = dict.fromkeys((FILE, DIR, SYMLINK), 0)
    for kind, n in db.execute("SELECT kind, count(*) FROM inodes GROUP BY kind"):
        counts[int(kind)] = int(n)
    chunks, stored, raw = db.one(
        "SELECT count(*), coalesce(sum(stored), 0), coalesce(sum(size), 0) FROM chunks"
    )
    return {
        "files": counts[FILE],
        "dirs": counts[DIR],
        "symlinks": counts[SYMLINK],
        "chunks": int(chunks),
        "stored_bytes": int(stored),
        "chunk_bytes": int(raw),
        "logical_bytes": st.logical,
        "queries": db.queries,
        "chunk_reads": st.chunks.reads,
        "rev": st.rev,
    }
