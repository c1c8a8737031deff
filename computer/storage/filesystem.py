"""``FileSystem``: the async filesystem of one workspace over one SQLite file (SPEC sections 3 and 4).

Execution model: every SQLite statement runs inline on the calling thread (the event loop). The owner
is single-threaded and each operation is a handful of indexed statements, so a thread pool would cost
more than it saves. No transaction ever spans an ``await``: a streamed write stages its chunks in small
transactions (pinned, unreferenced) and links them in one final transaction, so other operations
interleave freely and a crash never leaves a half-written file visible.

Durability: the file is in WAL mode with ``synchronous=NORMAL``: every committed transaction survives a
process kill; an OS crash or power loss may lose the last commits but never corrupts the file.
"""

from __future__ import annotations

import asyncio
import errno
import io
import json
import logging
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, overload

from ._chunks import CHUNK_SIZE, Buffer, ChunkCutter, decode_chunk
from ._chunkstore import ChunkStore
from ._db import Database
from ._schema import DIR, FILE, KIND_NAMES, ROOT_INODE, SYMLINK, clean_mode
from ._search import find_entries, grep_entries, walk_tree
from ._stream import ChunkStream
from .errors import fs_error
from .locks import LockTable
from .paths import canonical, is_within, join, parts, split
from .types import BatchResult, Change, ChangeSet, DirEntry, FileStat, FindEntry, GrepMatch, ManifestEntry

__all__ = ["FileSystem"]

log = logging.getLogger(__name__)

# Seconds after a mutation that left a batch of small unreferenced chunks until they are deleted.
GARBAGE_DELAY = 0.1

MAX_SYMLINK_HOPS = 40
_CACHE_LIMIT = 200_000

Node = tuple[int, int]  # (inode id, kind)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _check_range(path: str, offset: int, length: int | None) -> None:
    if offset < 0 or (length is not None and length < 0):
        raise fs_error(errno.EINVAL, path, "offset and length must not be negative")


def _link_path(link_path: str, target: str, rest: Sequence[str]) -> str:
    """Where a symlink at ``link_path`` points, with ``rest`` appended (``..`` clamps at ``/``)."""
    base = [] if target.startswith("/") else parts(split(link_path)[0])
    out = list(base)
    for seg in [*target.split("/"), *rest]:
        if seg in ("", "."):
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        out.append(seg)
    return "/" + "/".join(out)


class FileSystem:
    """The filesystem of one workspace (see the module docstring for the execution model).

    ``id`` is a stable uuid kept in the file (random for an in-memory store); ``rev`` the current
    revision; ``locks`` the owner's :class:`LockTable`.
    """

    change_log_limit = 100_000  # entries kept in the change log

    def __init__(self, db: Database, *, max_bytes: int | None, fence: int | None) -> None:
        self._db = db
        self.max_bytes = max_bytes
        self._fence = fence
        self._cache: dict[str, Node] = {}
        self._garbage_timer: asyncio.TimerHandle | None = None
        self._garbage_loop: asyncio.AbstractEventLoop | None = None  # the loop the timer is on
        self.chunks = ChunkStore(db, self._is_current_owner, self._collect_later)
        self.locks = LockTable()
        self._closed = False
        self._log_inserts = 0
        self._pending_logical = 0  # logical-size delta of the open transaction
        row = db.one("SELECT value FROM meta WHERE key = 'id'")
        if row is None:  # a new file; another opener may be naming it at the same moment: one wins
            db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('id', ?)", (uuid.uuid4().hex,))
            row = db.one("SELECT value FROM meta WHERE key = 'id'")
        self.id: str = str(row[0])
        with db.transaction():
            if fence is not None:
                db.execute("UPDATE state SET epoch = max(epoch, ?) WHERE id = 1", (fence,))
            self.chunks.collect_orphans()
        self._rev = 0
        self._logical = 0
        self._reload()
        db.changed_elsewhere()

    def _reload(self) -> None:
        """(Re)read what this object keeps in memory: revision and logical size; forget resolutions."""
        db = self._db
        self._cache.clear()
        self._rev = int(
            db.one("SELECT max(rev, coalesce((SELECT max(rev) FROM changes), 0)) FROM state WHERE id = 1")[0]
        )
        total = db.one("SELECT coalesce(sum(size), 0) FROM inodes WHERE kind = ?", (FILE,))[0]
        self._logical = int(total)

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(cls, path: str | None, *, max_bytes: int | None = None, fence: int | None = None) -> FileSystem:
        """Open (creating when missing) the store at ``path``; ``None`` is a private in-memory store.

        ``max_bytes`` caps the logical bytes of all files (ENOSPC beyond). ``fence`` is this owner's
        epoch: the stored epoch becomes ``max(stored, fence)`` and every later write checks it is still
        ours (EROFS once a newer owner raised it).
        """
        return cls(Database(path), max_bytes=max_bytes, fence=fence)

    @staticmethod
    def stored_epoch(path: str) -> int:
        """The highest owner epoch the store at ``path`` has seen (0 when it does not exist yet)."""
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        except sqlite3.Error:
            return 0
        try:
            row = con.execute("SELECT epoch FROM state WHERE id = 1").fetchone()
        except sqlite3.Error:  # missing file or no schema yet
            return 0
        finally:
            con.close()
        return int(row[0]) if row else 0

    def close(self) -> None:
        """Free batched garbage and close the SQLite connection. Idempotent."""
        if self._garbage_timer is not None:
            self._garbage_timer.cancel()
            self._garbage_timer = None
        if not self._closed:
            try:
                self._flush_garbage()
            except sqlite3.Error:
                pass  # the next open collects it
            finally:
                self._closed = True
                self._db.close()

    def _flush_garbage(self) -> None:
        if self.chunks.pending and not self._db.in_transaction:
            with self._db.transaction():
                self.chunks.flush()

    def _collect_later(self) -> bool:
        """Free a ready batch of small unreferenced chunks in a transaction of its own, ``GARBAGE_DELAY``
        seconds from now, off the mutation that made it (a pull removing 1,000 files spent 1.3 ms of its
        transaction deleting their chunk rows). Without an event loop: False, the caller flushes now.

        Until then the rows stay with zero references: a write of the same bytes takes them back (the
        delete only takes rows still at zero), and quotas count logical bytes, never chunk rows.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._garbage_timer is not None:
            if self._garbage_loop is loop:
                return True
            self._garbage_timer.cancel()  # set on a loop that has ended (asyncio.run) or another one
        self._garbage_loop = loop
        self._garbage_timer = loop.call_later(GARBAGE_DELAY, self._collect_garbage)
        return True

    def _collect_garbage(self) -> None:
        self._garbage_timer = None
        if self._closed:
            return
        try:
            self._flush_garbage()  # a transaction open across an await: the next batch retries
        except (sqlite3.Error, OSError) as exc:
            log.warning("freeing unreferenced chunks of %s failed (retried later): %r", self.id, exc)

    @property
    def rev(self) -> int:
        """The current revision (bumped once per mutating call)."""
        self._refresh()
        return self._rev

    def _refresh(self) -> None:
        if not self._closed and not self._db.in_transaction and self._db.changed_elsewhere():
            self._reload()

    @property
    def queries(self) -> int:
        """SQL statements executed so far."""
        return self._db.queries

    # ------------------------------------------------------------------ internals: guards

    def _is_current_owner(self) -> bool:
        if self._fence is None:
            return True
        row = self._db.one("SELECT epoch FROM state WHERE id = 1")
        return int(row[0]) == self._fence

    def _bump(self) -> tuple[int, int]:
        """First statement of every mutating transaction: ``(stored epoch, next revision)``.

        The revision is the newest in the change log (or ``state.rev`` once the log was trimmed), so a
        transaction writes no extra page for it; the epoch is read under the write lock.
        """
        epoch, rev = self._db.one(
            "SELECT epoch, max(rev, coalesce((SELECT max(rev) FROM changes), 0)) FROM state WHERE id = 1"
        )
        return int(epoch), int(rev) + 1

    def _check_fence(self, epoch: int, path: str) -> None:
        """EROFS when a newer owner raised the stored epoch above ours."""
        if self._fence is not None and epoch != self._fence:
            raise fs_error(
                errno.EROFS,
                path,
                f"workspace is owned by a newer owner (epoch {epoch}, ours {self._fence})",
            )

    def _mutation(self, path: str, *, late_fence: bool = False) -> _Mutation:
        return _Mutation(self, path, late_fence=late_fence)

    def _log(self, rev: int, n: int, path: str, op: str) -> None:
        self._db.execute("INSERT INTO changes (rev, n, path, op) VALUES (?, ?, ?, ?)", (rev, n, path, op))
        self._log_inserts += 1
        if self._log_inserts >= 1024:
            self._log_inserts = 0
            self._trim_log()

    def _log_many(self, rev: int, first: int, entries: Sequence[tuple[str, str]]) -> None:
        """Log ``(path, op)`` entries numbered from ``first`` in one statement."""
        self._db.executemany(
            "INSERT INTO changes (rev, n, path, op) VALUES (?, ?, ?, ?)",
            [(rev, first + i, path, op) for i, (path, op) in enumerate(entries)],
        )
        self._log_inserts += len(entries)
        if self._log_inserts >= 1024:
            self._log_inserts = 0
            self._trim_log()

    def _trim_log(self) -> None:
        """Keep about the last ``change_log_limit`` entries (whole revisions); raise the floor."""
        row = self._db.one(
            "SELECT rev FROM changes ORDER BY rev DESC, n DESC LIMIT 1 OFFSET ?", (self.change_log_limit,)
        )
        if row is None:
            return
        cut = int(row[0])  # entries of revisions up to and including ``cut`` go
        top = self._db.one("SELECT max(rev) FROM changes")[0]
        self._db.execute("DELETE FROM changes WHERE rev <= ?", (cut,))
        self._db.execute(
            "UPDATE state SET log_floor = max(log_floor, ?), rev = max(rev, ?) WHERE id = 1", (cut, top)
        )

    def _canon(self, path: str, *, refresh: bool = True) -> str:
        """Canonical ``path``; also the entry of every call, where a write by another connection (a
        zombie or a successor owner on the same file) invalidates what this one cached.

        ``refresh=False`` is for a call that does all its work inside one :class:`_Mutation`: that
        checks the revision under the write lock instead (``PRAGMA data_version`` costs ~5 µs).
        """
        p = canonical(path)
        if self._closed:
            raise fs_error(errno.EIO, p, "the workspace store is closed")
        if refresh:
            self._refresh()
        try:
            if not p.isascii():
                p.encode("utf-8")
        except UnicodeEncodeError:
            raise fs_error(
                errno.EINVAL, path.encode("utf-8", "replace").decode(), "path is not valid UTF-8"
            ) from None
        return p

    # ------------------------------------------------------------------ internals: resolution

    def _lookup(self, parent: int, name: str) -> Node | None:
        row = self._db.one(
            "SELECT d.child, i.kind FROM dirents d JOIN inodes i ON i.id = d.child WHERE d.parent = ? AND d.name = ?",
            (parent, name),
        )
        return None if row is None else (int(row[0]), int(row[1]))

    def _target(self, ino: int) -> str:
        return str(self._db.one("SELECT target FROM inodes WHERE id = ?", (ino,))[0])

    def _resolve(self, path: str, *, follow: bool = True) -> tuple[int, int, str]:
        """``(inode, kind, real path)`` of canonical ``path``, following symlinks on the way.

        The last segment is followed only when ``follow``. Raises ENOENT (missing), ENOTDIR (a parent
        segment is not a directory) or ELOOP (more than 40 links). Cached entries are keyed by real
        paths (no symlink before the last segment), so replacing a link only invalidates its own key.
        """
        cache = self._cache
        hops = 0
        while True:
            hit = cache.get(path)
            if hit is not None and (hit[1] != SYMLINK or not follow):
                return hit[0], hit[1], path
            segs = parts(path)
            ino, kind, cur, i = ROOT_INODE, DIR, "/", 0
            if hit is None and len(segs) > 1:
                parent, _ = split(path)
                phit = cache.get(parent)
                if phit is not None and phit[1] == DIR:
                    ino, kind, cur, i = phit[0], DIR, parent, len(segs) - 1
            restarted = False
            while i < len(segs):
                if kind != DIR:
                    raise fs_error(errno.ENOTDIR, path, "a parent segment is not a directory")
                name = segs[i]
                nxt = join(cur, name)
                node = cache.get(nxt)
                if node is None:
                    node = self._lookup(ino, name)
                    if node is None:
                        raise fs_error(errno.ENOENT, path)
                    if len(cache) >= _CACHE_LIMIT:
                        cache.clear()
                    cache[nxt] = node
                ino, kind = node
                cur = nxt
                i += 1
                if kind == SYMLINK and (i < len(segs) or follow):
                    hops += 1
                    if hops > MAX_SYMLINK_HOPS:
                        raise fs_error(errno.ELOOP, path, "too many levels of symbolic links")
                    path = _link_path(cur, self._target(ino), segs[i:])
                    restarted = True
                    break
            if not restarted:
                return ino, kind, cur

    def _resolve_read(self, path: str, *, follow: bool = True) -> tuple[int, int, str]:
        """Like :meth:`_resolve`, but a file in a parent position is ENOENT (SPEC: stat/read)."""
        try:
            return self._resolve(path, follow=follow)
        except NotADirectoryError:
            raise fs_error(errno.ENOENT, path) from None

    def _resolve_parent(self, path: str) -> tuple[int, str, str]:
        """``(parent inode, name, real parent path)`` for creating ``path``: ENOENT / ENOTDIR otherwise."""
        parent, name = split(path)
        ino, kind, real = self._resolve(parent)
        if kind != DIR:
            raise fs_error(errno.ENOTDIR, path, "parent is not a directory")
        return ino, name, real

    def _write_target(self, path: str) -> tuple[int, str, str, Node | None]:
        """Where writing ``path`` lands: ``(parent inode, name, real path, existing node)``.

        A symlink at the target is followed (like ``open(O_TRUNC)``); a dangling one creates its target.
        """
        hops = 0
        while True:
            pino, name, real_parent = self._resolve_parent(path)
            real = join(real_parent, name)
            node = self._cache.get(real) or self._lookup(pino, name)
            if node is None or node[1] != SYMLINK:
                return pino, name, real, node
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                raise fs_error(errno.ELOOP, path, "too many levels of symbolic links")
            path = _link_path(real, self._target(node[0]), ())

    def _forget(self, path: str, kind: int) -> None:
        """Invalidate cached resolutions after ``path`` (of ``kind``) went away or moved."""
        if kind == DIR:
            self._cache.clear()
        else:
            self._cache.pop(path, None)

    def _file_chunk_ids(self, ino: int) -> list[int]:
        """The chunk ids of a file of two chunks or more (one chunk lives in ``inodes.chunk``)."""
        return [
            r[0]
            for r in self._db.execute("SELECT chunk FROM file_chunks WHERE inode = ? ORDER BY idx", (ino,))
        ]

    # ------------------------------------------------------------------ internals: node writes

    def _new_inode(
        self,
        kind: int,
        mode: int,
        size: int = 0,
        target: str | None = None,
        chunk: int | None = None,
        mtime: int | None = None,
    ) -> int:
        cur = self._db.execute(
            "INSERT INTO inodes (kind, mode, mtime, size, target, chunk) VALUES (?, ?, ?, ?, ?, ?)",
            (kind, clean_mode(mode), _now_ms() if mtime is None else int(mtime), size, target, chunk),
        )
        return int(cur.lastrowid or 0)

    def _link(self, parent: int, name: str, child: int, real: str, kind: int) -> None:
        self._db.execute("INSERT INTO dirents (parent, name, child) VALUES (?, ?, ?)", (parent, name, child))
        self._cache[real] = (child, kind)

    def _set_content(
        self,
        path: str,
        pino: int,
        name: str,
        real: str,
        node: Node | None,
        ids: list[int],
        size: int,
        mode: int | None,
        mtime: int | None = None,
        *,
        detach: bool = False,
    ) -> None:
        """Point ``real`` at the chunk list ``ids`` (already referenced), replacing an existing file.

        One chunk goes into the inode row itself; two or more into ``file_chunks``. ``mtime`` (ms) is
        kept exactly when given (a pull keeps the program's); otherwise now, and on an overwrite
        strictly later than the old one. ``detach``: a file of several names (hard links) gets a new
        node for this name instead of new content for all of them (the batch's rule: a pull sends the
        names that still share the file as ``links``).
        """
        db = self._db
        if node is not None and node[1] == DIR:
            raise fs_error(errno.EISDIR, path)
        one = ids[0] if len(ids) == 1 else None
        if node is None:
            ino = self._new_inode(FILE, 0o644 if mode is None else mode, size, chunk=one, mtime=mtime)
            self._link(pino, name, ino, real, FILE)
            old_size = 0
            old_ids: list[int] = []
        elif detach and int(db.one("SELECT nlink FROM inodes WHERE id = ?", (node[0],))[0]) > 1:
            old_mode = int(db.one("SELECT mode FROM inodes WHERE id = ?", (node[0],))[0])
            db.execute("UPDATE inodes SET nlink = nlink - 1 WHERE id = ?", (node[0],))
            ino = self._new_inode(FILE, old_mode if mode is None else mode, size, chunk=one, mtime=mtime)
            db.execute("UPDATE dirents SET child = ? WHERE parent = ? AND name = ?", (ino, pino, name))
            self._cache[real] = (ino, FILE)
            old_size = 0
            old_ids = []
        else:
            ino = node[0]
            old_size, old_mtime, old_one = db.one(
                "SELECT size, mtime, chunk FROM inodes WHERE id = ?", (ino,)
            )
            if mtime is None:
                # mtime strictly increases on overwrite, even twice in the same millisecond.
                mtime = max(_now_ms(), int(old_mtime) + 1)
            if mode is None:
                db.execute(
                    "UPDATE inodes SET size = ?, mtime = ?, chunk = ? WHERE id = ?", (size, mtime, one, ino)
                )
            else:
                db.execute(
                    "UPDATE inodes SET size = ?, mtime = ?, chunk = ?, mode = ? WHERE id = ?",
                    (size, mtime, one, clean_mode(mode), ino),
                )
            if old_one is not None:
                old_ids = [int(old_one)]
            elif old_size > CHUNK_SIZE:
                old_ids = self._file_chunk_ids(ino)
                db.execute("DELETE FROM file_chunks WHERE inode = ?", (ino,))
            else:
                old_ids = []
        self._check_quota(path, size - old_size)
        if len(ids) > 1:
            db.executemany(
                "INSERT INTO file_chunks (inode, idx, chunk) VALUES (?, ?, ?)",
                [(ino, i, cid) for i, cid in enumerate(ids)],
            )
        if old_ids:
            self.chunks.decref(old_ids)
        self._pending_logical += size - old_size

    def _check_quota(self, path: str, delta: int) -> None:
        if self.max_bytes is not None and delta > 0:
            if self._logical + self._pending_logical + delta > self.max_bytes:
                raise fs_error(
                    errno.ENOSPC, path, f"no space left: workspace limit is {self.max_bytes} bytes"
                )

    def _remove_node(self, path: str, pino: int, name: str, ino: int, kind: int) -> None:
        """Unlink ``name`` from ``pino`` and delete its whole subtree (links are never followed)."""
        db = self._db
        db.execute("DELETE FROM dirents WHERE parent = ? AND name = ?", (pino, name))
        if kind == DIR:
            db.execute("CREATE TEMP TABLE IF NOT EXISTS doomed (id INTEGER PRIMARY KEY)")
            db.execute("DELETE FROM temp.doomed")
            db.execute(
                "INSERT OR IGNORE INTO temp.doomed (id) WITH RECURSIVE sub(id) AS (SELECT ? UNION ALL "
                "SELECT d.child FROM dirents d JOIN sub ON d.parent = sub.id) SELECT id FROM sub",
                (ino,),
            )
            self._spare_linked_survivors()
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
            self.chunks.decref_counts((int(c), int(n)) for c, n in counts)
            self._pending_logical -= int(freed)
        else:
            row = db.one("DELETE FROM inodes WHERE id = ? AND nlink <= 1 RETURNING size, chunk", (ino,))
            if row is None:  # another name of this file (a hard link) keeps it
                db.execute("UPDATE inodes SET nlink = nlink - 1 WHERE id = ?", (ino,))
            else:
                self._release(((kind, row[0], row[1], ino),))
        self._forget(path, kind)

    def _spare_linked_survivors(self) -> None:
        """Take out of ``temp.doomed`` the files that keep a name outside the doomed tree (hard links),
        lowering their link count by the names the tree held. A probe of the partial index of
        linked inodes: nothing more when no doomed file has a second name."""
        db = self._db
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

    def _release(self, removed: Iterable[tuple[int, int, int | None, int]]) -> None:
        """Drop the content of deleted inode rows ``(kind, size, one-chunk id, inode)``: their chunk
        references and their logical size."""
        counts: Counter[int] = Counter()
        for kind, size, one, ino in removed:
            if kind != FILE:
                continue
            self._pending_logical -= int(size)
            if one is not None:
                counts[int(one)] += 1
            elif size > CHUNK_SIZE:
                counts.update(
                    r[0]
                    for r in self._db.execute(
                        "DELETE FROM file_chunks WHERE inode = ? RETURNING chunk", (ino,)
                    )
                )
        self.chunks.decref_counts(counts.items())

    def _remove_leaves(self, leaves: list[tuple[str, int, str, int, int]], m: _Mutation) -> None:
        """Remove many files and links ``(real path, parent, name, inode, kind)`` in a few statements
        (a pull deleting 1,000 files made 4,000: 16 ms); empties ``leaves``."""
        if not leaves:
            return
        db = self._db
        db.executemany(
            "DELETE FROM dirents WHERE parent = ? AND name = ?", [(p, n) for _, p, n, _, _ in leaves]
        )
        names = Counter(ino for *_, ino, _ in leaves)
        rows = db.execute(
            "DELETE FROM inodes WHERE id IN (SELECT value FROM json_each(?)) AND nlink <= 1 "
            "RETURNING kind, size, chunk, id",
            (json.dumps(list(names)),),
        ).fetchall()
        if len(rows) < len(names):  # files of several names (hard links): one fewer per name removed
            for ino in set(names).difference(int(r[3]) for r in rows):
                row = db.one(
                    "DELETE FROM inodes WHERE id = ? AND nlink <= ? RETURNING kind, size, chunk, id",
                    (ino, names[ino]),
                )
                if row is None:
                    db.execute("UPDATE inodes SET nlink = nlink - ? WHERE id = ?", (names[ino], ino))
                else:
                    rows.append(row)
        self._release(rows)
        for real, _, _, _, kind in leaves:
            self._forget(real, kind)
        m.log_many([(real, "rm") for real, *_ in leaves])
        leaves.clear()

    # ------------------------------------------------------------------ reads

    def _open_file(self, path: str) -> tuple[int, int, int | None]:
        """``(inode, size, chunk of a one-chunk file)`` of the regular file at ``path`` (following links)."""
        ino, kind, _ = self._resolve_read(path)
        if kind == DIR:
            raise fs_error(errno.EISDIR, path)
        size, one = self._db.one("SELECT size, chunk FROM inodes WHERE id = ?", (ino,))
        return ino, int(size), one

    async def read_file(self, path: str, *, offset: int = 0, length: int | None = None) -> bytes:
        """The bytes of a file, or of ``[offset, offset + length)`` of it (clipped at the end)."""
        p = self._canon(path)
        _check_range(p, offset, length)
        ino, size, one = self._open_file(p)
        end = size if length is None else min(size, offset + length)
        if offset >= end:
            return b""
        first, last = offset // CHUNK_SIZE, (end - 1) // CHUNK_SIZE
        if first == last:
            # One chunk (every small file): one statement, the bytes with it.
            if one is not None:
                row = self._db.one(
                    "SELECT coalesce(c.data, d.data), c.compressed, c.size FROM chunks c "
                    "LEFT JOIN chunk_data d ON d.id = c.id WHERE c.id = ?",
                    (one,),
                )
            else:
                row = self._db.one(
                    "SELECT coalesce(c.data, d.data), c.compressed, c.size FROM file_chunks fc "
                    "JOIN chunks c ON c.id = fc.chunk LEFT JOIN chunk_data d ON d.id = c.id "
                    "WHERE fc.inode = ? AND fc.idx = ?",
                    (ino, first),
                )
            if row is None:
                return b""
            self.chunks.count_read()
            piece = decode_chunk(row[0], row[1], row[2])
            lo, hi = offset - first * CHUNK_SIZE, end - first * CHUNK_SIZE
            return piece if lo == 0 and hi == len(piece) else piece[lo:hi]
        # Many chunks: each is copied once into one growing buffer whose bytes are the result
        # (``BytesIO.getvalue`` hands its buffer over without a copy), in one read snapshot, with the
        # file memory-mapped meanwhile (see ``Database.mapped``). Collecting the pieces and joining
        # them instead cost twice the memory and a second pass over it.
        out = io.BytesIO()
        with self._db.snapshot(), self._db.mapped():
            rows = self._db.execute(
                "SELECT fc.idx, c.id, c.data, c.compressed, c.size FROM file_chunks fc "
                "JOIN chunks c ON c.id = fc.chunk WHERE fc.inode = ? AND fc.idx BETWEEN ? AND ? "
                "ORDER BY fc.idx",
                (ino, first, last),
            ).fetchall()
            for idx, cid, inline, compressed, csize in rows:
                start = idx * CHUNK_SIZE
                lo, hi = max(offset - start, 0), min(end - start, csize)
                out.write(self.chunks.piece(cid, inline, compressed, csize, lo, hi))
        return out.getvalue()

    async def read_text(self, path: str) -> str:
        """The file decoded as UTF-8 (strict: invalid bytes raise ``UnicodeDecodeError``)."""
        return (await self.read_file(path)).decode("utf-8")

    def stream(self, path: str, *, offset: int = 0, length: int | None = None) -> AsyncIterator[bytes]:
        """Yield the file's bytes one chunk at a time, from the version that existed at this call.

        Only chunks overlapping the range are read. Errors surface at the first iteration.
        """
        try:
            p = self._canon(path)
            _check_range(p, offset, length)
            ino, size, one = self._open_file(p)
        except OSError as exc:
            return ChunkStream(self.chunks, [], 0, 0, self._after_unpin, exc)
        end = size if length is None else min(size, offset + length)
        chunks: list[tuple[int, int]] = []
        if offset < end and one is not None:
            chunks = [(0, int(one))]
        elif offset < end:
            rows = self._db.execute(
                "SELECT idx, chunk FROM file_chunks WHERE inode = ? AND idx BETWEEN ? AND ? ORDER BY idx",
                (ino, offset // CHUNK_SIZE, (end - 1) // CHUNK_SIZE),
            )
            chunks = [(int(i), int(c)) for i, c in rows]
        return ChunkStream(self.chunks, chunks, offset, end, self._after_unpin)

    def _after_unpin(self) -> None:
        if self._closed or self._db.in_transaction or not self.chunks.has_sweepable():
            return
        with self._db.transaction():
            self.chunks.sweep()

    async def stat(self, path: str) -> FileStat:
        """Metadata of ``path``, following symlinks; ``name`` is the last segment (``""`` for ``/``)."""
        p = self._canon(path)
        ino, kind, _ = self._resolve_read(p)
        mode, mtime, size, nlink = self._db.one(
            "SELECT mode, mtime, size, nlink FROM inodes WHERE id = ?", (ino,)
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
        )

    async def exists(self, path: str) -> bool:
        """True when ``path`` resolves (a dangling symlink does not)."""
        p = self._canon(path)
        try:
            self._resolve(p)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return False
            raise
        return True

    async def readlink(self, path: str) -> str:
        """The target of the symlink at ``path`` (EINVAL when it is not a symlink)."""
        p = self._canon(path)
        ino, kind, _ = self._resolve_read(p, follow=False)
        if kind != SYMLINK:
            raise fs_error(errno.EINVAL, p, "not a symbolic link")
        return self._target(ino)

    async def readdir(self, path: str, *, limit: int | None = None, offset: int = 0) -> list[DirEntry]:
        """Children of a directory in byte order of their names, paged by ``offset``/``limit``."""
        p = self._canon(path)
        if offset < 0 or (limit is not None and limit < 0):
            raise fs_error(errno.EINVAL, p, "offset and limit must not be negative")
        ino, kind, _ = self._resolve_read(p)
        if kind != DIR:
            raise fs_error(errno.ENOTDIR, p)
        rows = self._db.execute(
            "SELECT d.name, i.kind, i.size, i.mtime FROM dirents d JOIN inodes i ON i.id = d.child "
            "WHERE d.parent = ? ORDER BY d.name LIMIT ? OFFSET ?",
            (ino, -1 if limit is None else limit, offset),
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

    async def ls(self, prefix: str) -> list[str]:
        """Every regular file at or under ``prefix`` (segment-aware), in walk order; ``[]`` when missing."""
        p = self._canon(prefix)
        try:
            ino, kind, _ = self._resolve_read(p)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP):
                return []
            raise
        if kind == FILE:
            return [p]
        if kind != DIR:
            return []
        return [row[0] for row in walk_tree(self._db, ino, p) if row[1] == FILE]

    @overload
    def manifest(
        self, root: str, *, inodes: Literal[False] = False
    ) -> list[tuple[str, str, int, int, int]]: ...

    @overload
    def manifest(self, root: str, *, inodes: Literal[True]) -> list[ManifestEntry]: ...

    def manifest(
        self, root: str, *, inodes: bool = False
    ) -> list[tuple[str, str, int, int, int]] | list[ManifestEntry]:
        """Every node below ``root``: ``(path, "file"|"dir"|"symlink", size, mode, mtime)``, in walk order.

        With ``inodes=True`` each is a :class:`ManifestEntry`, the same five fields then ``ino`` and
        ``nlink``: names sharing an ``ino`` are hard links of one file. (The plain five-tuple stays the
        default so that callers unpacking five values keep working.)
        ENOENT when ``root`` is missing; ``[]`` when it is not a directory.
        """
        p = self._canon(root)
        ino, kind, _ = self._resolve_read(p)
        if kind != DIR:
            return []
        if inodes:
            return [
                ManifestEntry(path, KIND_NAMES[k], size, mode, mtime, node, nlink)  # type: ignore[arg-type]
                for path, k, size, mode, mtime, node, nlink in walk_tree(self._db, ino, p)
            ]
        return [
            (path, KIND_NAMES[k], size, mode, mtime)
            for path, k, size, mode, mtime, _, _ in walk_tree(self._db, ino, p)
        ]

    # ------------------------------------------------------------------ writes

    async def write_file(
        self,
        path: str,
        data: bytes | str | AsyncIterable[bytes] | Iterable[bytes],
        *,
        mode: int | None = None,
        mtime: int | None = None,
    ) -> None:
        """Create or replace a file. The parent must exist; an existing file keeps its mode unless given.

        ``mtime`` (milliseconds since the epoch) is stored exactly when given; by default the write's
        time, strictly later than the replaced content's.

        ``data`` may be bytes, str (UTF-8) or a sync/async iterable of byte pieces of any size; an
        iterable is re-cut into chunks as it arrives (memory stays about one chunk) and the file
        appears at once when the last piece is committed.
        """
        p = self._canon(path, refresh=False)  # resolved inside the write transaction...
        if p == "/":
            raise fs_error(errno.EISDIR, p)
        if isinstance(data, str):
            data = data.encode("utf-8")
        if isinstance(data, (bytes, bytearray, memoryview)):
            self._write_pieces(p, (bytes(data),), mode, mtime)
        elif isinstance(data, AsyncIterable):
            self._refresh()  # ...except for a streamed write, which checks its target first
            await self._write_async(p, data, mode, mtime)
        else:
            self._write_pieces(p, data, mode, mtime)

    def _write_pieces(self, p: str, pieces: Iterable[bytes], mode: int | None, mtime: int | None) -> None:
        with self._mutation(p) as m:
            pino, name, real, node = self._write_target(p)
            if node is not None and node[1] == DIR:
                raise fs_error(errno.EISDIR, p)
            old = (
                0
                if node is None
                else int(self._db.one("SELECT size FROM inodes WHERE id = ?", (node[0],))[0])
            )
            cutter = ChunkCutter()
            ids: list[int] = []
            for piece in pieces:
                for chunk in cutter.feed(_as_bytes(p, piece)):
                    self._check_quota(p, cutter.total - old)
                    ids.append(self.chunks.put(chunk))
            last = cutter.finish()
            if last is not None:
                ids.append(self.chunks.put(last))
            self._set_content(p, pino, name, real, node, ids, cutter.total, mode, mtime)
            m.log(real, "write")

    async def _write_async(
        self, p: str, source: AsyncIterable[bytes], mode: int | None, mtime: int | None
    ) -> None:
        # Fail fast on a bad target before consuming the source.
        _, _, _, node = self._write_target(p)
        if node is not None and node[1] == DIR:
            raise fs_error(errno.EISDIR, p)
        old = 0 if node is None else int(self._db.one("SELECT size FROM inodes WHERE id = ?", (node[0],))[0])
        cutter = ChunkCutter()
        staged: list[int] = []
        try:
            async for piece in source:
                for chunk in cutter.feed(_as_bytes(p, piece)):
                    self._check_quota(p, cutter.total - old)
                    staged.append(self._stage(chunk))
            last = cutter.finish()
            if last is not None:
                staged.append(self._stage(last))
            with self._mutation(p) as m:
                pino, name, real, node = self._write_target(p)
                self.chunks.incref(staged)
                self._set_content(p, pino, name, real, node, staged, cutter.total, mode, mtime)
                m.log(real, "write")
        finally:
            self.chunks.unpin(staged)
            if not self._closed:
                with self._db.transaction():
                    self.chunks.sweep(staged)

    def _stage(self, chunk: Buffer) -> int:
        """Store one chunk of a streamed write unreferenced but pinned, in its own small transaction."""
        with self._db.transaction():
            cid = self.chunks.put(chunk, refs=0)
        self.chunks.pin((cid,))
        return cid

    async def mkdir(self, path: str, *, recursive: bool = False, mode: int = 0o755) -> None:
        """Create a directory; ``recursive`` creates missing parents and accepts an existing directory."""
        p = self._canon(path, refresh=not recursive)  # the plain mkdir resolves inside its transaction
        if p == "/":
            if recursive:
                return
            raise fs_error(errno.EEXIST, p)
        if not recursive:
            with self._mutation(p) as m:
                pino, name, real_parent = self._resolve_parent(p)
                real = join(real_parent, name)
                if self._lookup(pino, name) is not None:
                    raise fs_error(errno.EEXIST, p)
                self._link(pino, name, self._new_inode(DIR, mode), real, DIR)
                m.log(real, "mkdir")
            return
        try:
            kind = self._resolve(p)[1]
        except FileNotFoundError:
            pass
        else:
            if kind != DIR:
                raise fs_error(errno.EEXIST, p, "exists and is not a directory")
            return
        with self._mutation(p) as m:
            self._ensure_dirs(p, mode, m)

    def _ensure_dirs(
        self, p: str, mode: int, m: _Mutation, *, replace_files: bool = False, mtime: int | None = None
    ) -> int:
        """Create every missing directory of ``p``; returns its inode. Symlinks to directories are followed.

        ``mtime`` is the mtime of ``p`` itself when this creates it (its parents get the current time).
        """
        segs = parts(p)
        cache = self._cache
        ino, cur = ROOT_INODE, "/"
        for i, name in enumerate(segs):
            nxt = join(cur, name)  # ``cur`` is a real path: ``nxt`` names the entry itself
            node = cache.get(nxt)
            if node is None:
                node = self._lookup(ino, name)  # one probe per missing segment
                if node is not None:
                    if len(cache) >= _CACHE_LIMIT:
                        cache.clear()
                    cache[nxt] = node
            if node is not None and node[1] == DIR:
                ino, cur = node[0], nxt
                continue
            if node is not None and node[1] == SYMLINK:
                try:
                    node_ino, kind, real = self._resolve(nxt)
                except FileNotFoundError:  # a symlink to nowhere is in the way
                    if not replace_files:
                        raise fs_error(errno.EEXIST, p, "a dangling symlink is in the way") from None
                    self._remove_node(nxt, ino, name, node[0], node[1])
                    node = None
                else:
                    if kind == DIR:
                        ino, cur = node_ino, real
                        continue
            if node is not None:  # a file, or a link to one
                if not replace_files:
                    code = errno.EEXIST if i == len(segs) - 1 else errno.ENOTDIR
                    raise fs_error(code, p, "exists and is not a directory")
                self._remove_node(nxt, ino, name, node[0], node[1])
            new = self._new_inode(DIR, mode, mtime=mtime if i == len(segs) - 1 else None)
            real = join(cur, name)
            self._link(ino, name, new, real, DIR)
            m.log(real, "mkdir")
            ino, cur = new, real
        return ino

    async def rm(self, path: str, *, recursive: bool = False, force: bool = False) -> None:
        """Remove a file, symlink (the link only) or directory (``recursive`` when not empty)."""
        p = self._canon(path, refresh=False)  # resolved inside the transaction
        if p == "/":
            raise fs_error(errno.EPERM, p, "cannot remove the root directory")
        with self._mutation(p, late_fence=True) as m:
            try:
                ino, kind, real = self._resolve_read(p, follow=False)
                if kind == DIR and not recursive:
                    if self._db.one("SELECT 1 FROM dirents WHERE parent = ? LIMIT 1", (ino,)) is not None:
                        raise fs_error(errno.ENOTEMPTY, p, "directory not empty")
            except OSError as exc:
                m.cancel(untouched=True)
                if force and exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    return
                raise
            m.check_fence()
            parent, name = split(real)
            pino = self._resolve(parent)[0]
            self._remove_node(real, pino, name, ino, kind)
            m.log(real, "rm")

    async def symlink(self, target: str, path: str) -> None:
        """Create a symlink at ``path`` pointing to ``target`` (absolute or relative, stored as given)."""
        p = self._canon(path, refresh=False)  # resolved inside the transaction
        if not isinstance(target, str) or target == "" or "\x00" in target:
            raise fs_error(errno.EINVAL, p, "symlink target must be a non-empty string without NUL")
        if p == "/":
            raise fs_error(errno.EEXIST, p)
        with self._mutation(p) as m:
            pino, name, real_parent = self._resolve_parent(p)
            real = join(real_parent, name)
            if self._lookup(pino, name) is not None:
                raise fs_error(errno.EEXIST, p)
            ino = self._new_inode(SYMLINK, 0o777, len(target.encode("utf-8")), target)
            self._link(pino, name, ino, real, SYMLINK)
            m.log(real, "symlink")

    async def link(self, existing: str, new: str) -> None:
        """Give the file (or symlink) at ``existing`` a second name ``new``: a hard link.

        Both names then share one node: content, mode and mtime; a write through either shows in
        both; removing one keeps the other; ``copy`` makes an independent file; ``rename`` keeps the
        link. Like ``link(2)``: ``existing`` is not followed when it is a symlink (the link itself gets
        the name); a directory is EPERM; an existing ``new`` is EEXIST; a missing parent ENOENT.
        The change log records ``new`` with op ``"link"``; ``stat``/``manifest`` report ``nlink``.
        """
        s, d = self._canon(existing), self._canon(new, refresh=False)
        with self._mutation(d) as m:
            ino, kind, _ = self._resolve_read(s, follow=False)
            if kind == DIR:
                raise fs_error(errno.EPERM, s, "cannot hard-link a directory")
            if d == "/":
                raise fs_error(errno.EEXIST, d)
            pino, name, real_parent = self._resolve_parent(d)
            real = join(real_parent, name)
            if self._lookup(pino, name) is not None:
                raise fs_error(errno.EEXIST, d)
            self._add_name(pino, name, ino, real, kind)
            m.log(real, "link")

    def _add_name(self, pino: int, name: str, ino: int, real: str, kind: int) -> None:
        """One more directory entry for an existing node (a hard link)."""
        self._db.execute("UPDATE inodes SET nlink = nlink + 1 WHERE id = ?", (ino,))
        self._link(pino, name, ino, real, kind)

    def _prepare_destination(
        self, src: str, src_real: str, src_kind: int, dst: str, overwrite: bool
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
        pino, name, real_parent = self._resolve_parent(dst)
        real = join(real_parent, name)
        if src_kind == DIR and is_within(real, src_real) and real != src_real:
            raise fs_error(errno.EINVAL, dst, f"cannot move or copy {src} into its own subtree")
        node = self._lookup(pino, name)
        if node is None or real == src_real:
            return pino, name, real, node
        if not overwrite:
            raise fs_error(errno.EEXIST, dst)
        if src_kind == DIR and node[1] != DIR:
            raise fs_error(errno.ENOTDIR, dst, "cannot overwrite a non-directory with a directory")
        if src_kind != DIR and node[1] == DIR:
            raise fs_error(errno.EISDIR, dst, "cannot overwrite a directory with a non-directory")
        if node[1] == DIR and self._db.one("SELECT 1 FROM dirents WHERE parent = ? LIMIT 1", (node[0],)):
            raise fs_error(errno.ENOTEMPTY, dst, "directory not empty")
        return pino, name, real, node

    async def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        """Move ``src`` to ``dst`` in O(1) (one directory entry changes, whatever the subtree size)."""
        s, d = self._canon(src), self._canon(dst)
        if s == "/":
            raise fs_error(errno.EPERM, s, "cannot rename the root directory")
        ino, kind, s_real = self._resolve_read(s, follow=False)
        with self._mutation(s) as m:
            pino, name, d_real, node = self._prepare_destination(s, s_real, kind, d, overwrite)
            if d_real == s_real or (node is not None and node[0] == ino):
                m.cancel()  # POSIX: two names of one file (hard links) stay as they are
                return
            if node is not None:
                self._remove_node(d_real, pino, name, node[0], node[1])
            s_parent, s_name = split(s_real)
            s_pino = self._resolve(s_parent)[0]
            self._db.execute(
                "UPDATE dirents SET parent = ?, name = ? WHERE parent = ? AND name = ?",
                (pino, name, s_pino, s_name),
            )
            self._forget(s_real, kind)
            self._cache[d_real] = (ino, kind)
            m.log(s_real, "rm")
            m.log(d_real, _CREATE_OP[kind])

    async def copy(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        """Copy a file (sharing its chunks: O(metadata)), a symlink, or a directory tree."""
        s, d = self._canon(src), self._canon(dst)
        ino, kind, s_real = self._resolve_read(s)
        with self._mutation(d) as m:
            pino, name, d_real, node = self._prepare_destination(s, s_real, kind, d, overwrite)
            if d_real == s_real:
                m.cancel()
                return
            if node is not None:
                self._remove_node(d_real, pino, name, node[0], node[1])
            self._copy_node(d, ino, kind, pino, name, d_real)
            m.log(d_real, _CREATE_OP[kind])

    def _copy_node(self, dst: str, ino: int, kind: int, pino: int, name: str, real: str) -> None:
        db = self._db
        stack = [(ino, kind, pino, name, real)]
        copied: dict[int, int] = {}  # source inode -> its copy, for files of several names
        while stack:
            src_ino, k, parent, nm, path = stack.pop()
            mode, size, target, one, nlink = db.one(
                "SELECT mode, size, target, chunk, nlink FROM inodes WHERE id = ?", (src_ino,)
            )
            if src_ino in copied and src_ino != ino:  # a second name inside the tree: stays one file
                self._add_name(parent, nm, copied[src_ino], path, k)
                continue
            new = self._new_inode(k, int(mode), int(size), target, one)
            if nlink > 1 and src_ino != ino:
                copied[src_ino] = new
            self._link(parent, nm, new, path, k)
            if k == FILE:
                self._check_quota(dst, int(size))
                self._pending_logical += int(size)
            if k == FILE and one is not None:
                self.chunks.incref([int(one)])
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

    # ------------------------------------------------------------------ search

    async def find(
        self,
        directory: str,
        pattern: str | None = None,
        *,
        exclude: Sequence[str] = (),
        limit: int | None = None,
        offset: int = 0,
    ) -> list[FindEntry]:
        """Files and directories below ``directory`` whose relative path matches the glob (see SPEC 4)."""
        p = self._canon(directory)
        _check_paging(p, offset, limit)
        ino, kind, _ = self._resolve_read(p)
        if kind != DIR:
            raise fs_error(errno.ENOTDIR, p)
        return find_entries(self, ino, p, pattern, list(_as_list(exclude)), limit, offset)

    async def grep(
        self,
        pattern: str,
        path: str,
        *,
        regex: bool = False,
        ignore_case: bool = False,
        context: int = 0,
        include: str | Sequence[str] | None = None,
        exclude: Sequence[str] = (),
        limit: int | None = None,
        offset: int = 0,
    ) -> list[GrepMatch]:
        """Matching lines of a file, or of the files below a directory (see SPEC 4 and ``_search``)."""
        p = self._canon(path)
        _check_paging(p, offset, limit)
        if not 0 <= context <= 10:
            raise fs_error(errno.EINVAL, p, "context must be between 0 and 10")
        ino, kind, _ = self._resolve_read(p)
        return grep_entries(
            self,
            ino,
            kind,
            p,
            pattern,
            regex=regex,
            ignore_case=ignore_case,
            context=context,
            include=None if include is None else list(_as_list(include)),
            exclude=list(_as_list(exclude)),
            limit=limit,
            offset=offset,
        )

    def _iter_file(self, ino: int) -> Iterator[bytes]:
        """The chunks of a file, in order (synchronous: for use inside one operation only)."""
        row = self._db.one(
            "SELECT coalesce(c.data, d.data), c.compressed, c.size FROM inodes i JOIN chunks c "
            "ON c.id = i.chunk LEFT JOIN chunk_data d ON d.id = c.id WHERE i.id = ?",
            (ino,),
        )
        if row is not None:  # a file of one chunk
            self.chunks.count_read()
            yield decode_chunk(row[0], row[1], row[2])
            return
        rows = self._db.execute(
            "SELECT coalesce(c.data, d.data), c.compressed, c.size FROM file_chunks fc "
            "JOIN chunks c ON c.id = fc.chunk LEFT JOIN chunk_data d ON d.id = c.id "
            "WHERE fc.inode = ? ORDER BY fc.idx",
            (ino,),
        )
        for data, compressed, size in rows:
            self.chunks.count_read()
            yield decode_chunk(data, compressed, size)

    def _children_page(self, ino: int, after: str | None, size: int) -> list[tuple[str, int, int]]:
        """Up to ``size`` children ``(name, inode, kind)`` of a directory after ``after``, in name order."""
        if after is None:
            sql = (
                "SELECT d.name, d.child, i.kind FROM dirents d JOIN inodes i ON i.id = d.child "
                "WHERE d.parent = ? ORDER BY d.name LIMIT ?"
            )
            return self._db.execute(sql, (ino, size)).fetchall()
        sql = (
            "SELECT d.name, d.child, i.kind FROM dirents d JOIN inodes i ON i.id = d.child "
            "WHERE d.parent = ? AND d.name > ? ORDER BY d.name LIMIT ?"
        )
        return self._db.execute(sql, (ino, after, size)).fetchall()

    def _kind_of(self, path: str) -> int | None:
        """The kind a path resolves to (following links), or None."""
        try:
            return self._resolve(path)[1]
        except OSError:
            return None

    # ------------------------------------------------------------------ sync support

    def changes_since(self, rev: int, root: str = "/", *, skip_revs: Sequence[int] = ()) -> ChangeSet:
        """Changes at or below ``root`` (or of an ancestor of it) after ``rev``, in order, leaving out
        the revisions ``skip_revs`` (a caller's own: never read, however many changes they hold).

        ``complete`` is False when the log was trimmed past ``rev``: resynchronise from :meth:`manifest`.
        """
        r = self._canon(root)
        floor = int(self._db.one("SELECT log_floor FROM state WHERE id = 1")[0])
        skip = tuple(int(v) for v in skip_revs)
        unless = f" AND rev NOT IN ({', '.join('?' * len(skip))})" if skip else ""
        rows = self._db.execute(
            f"SELECT rev, path, op FROM changes WHERE rev > ?{unless} ORDER BY rev, n", (rev, *skip)
        )
        changes = [
            Change(path=path, op=op, rev=int(rv))
            for rv, path, op in rows
            if is_within(path, r) or is_within(r, path)
        ]
        return ChangeSet(rev=self._rev, changes=changes, complete=rev >= floor)

    def commit_batch(
        self,
        writes: Mapping[str, bytes | None],
        *,
        mkdirs: Sequence[str] = (),
        modes: Mapping[str, int] | None = None,
        base_rev: int | None = None,
        mtimes: Mapping[str, int] | None = None,
        links: Mapping[str, str] | None = None,
    ) -> BatchResult:
        """Apply many changes in one transaction and one revision (the shell backend's pull).

        ``bytes`` writes a file (creating parents, replacing a directory in the way), ``None`` removes
        a path (recursively, missing is fine), ``mkdirs`` ensures directories, ``modes`` sets modes,
        ``mtimes`` sets mtimes in ms, kept exactly (of written files, ensured directories and existing
        paths alike: a pull keeps the program's mtime, not the sync time). A write to a name of a file
        with several names (hard links) gives that name a new file; ``links`` (new path -> existing
        path) then gives existing files more names, after the writes: a pull sends every name that
        still shares a file with a written one. A link replaces what is at its path; one whose
        existing path is missing or a directory is left out and listed in ``skipped``.
        With ``base_rev``, a path changed after that revision (itself, an ancestor or a descendant) is
        left alone and listed in ``skipped``; if the change log no longer reaches ``base_rev`` every
        path is skipped (the workspace wins when we cannot tell).
        """
        modes = dict(modes or {})
        self._refresh()  # once for the whole batch, not per path
        canon_writes = {self._canon(k, refresh=False): v for k, v in writes.items()}
        canon_dirs = sorted({self._canon(k, refresh=False) for k in mkdirs})
        canon_modes = {self._canon(k, refresh=False): clean_mode(v) for k, v in modes.items()}
        canon_mtimes = {self._canon(k, refresh=False): int(v) for k, v in (mtimes or {}).items()}
        canon_links = {
            self._canon(k, refresh=False): self._canon(v, refresh=False) for k, v in (links or {}).items()
        }
        every = sorted(
            set(canon_writes) | set(canon_dirs) | set(canon_modes) | set(canon_mtimes) | set(canon_links)
        )
        skipped: set[str] = set()
        if base_rev is not None:
            changed = self.changes_since(base_rev)
            if not changed.complete:
                skipped = set(every)
            else:
                touched = [c.path for c in changed.changes]

                def conflicts(p: str) -> bool:
                    return any(is_within(p, t) or is_within(t, p) for t in touched)

                skipped = {p for p in every if conflicts(p)}
                # A link to a path changed meanwhile would name the workspace's file, not the run's.
                skipped.update(new for new, old in canon_links.items() if conflicts(old))
        applied: list[str] = []
        todo = [p for p in every if p not in skipped]
        if not todo:
            return BatchResult(rev=self._rev, applied=[], skipped=sorted(skipped))
        with self._mutation(todo[0]) as m:
            leaves: list[tuple[str, int, str, int, int]] = []  # files and links, removed together
            doomed: set[str] = set()
            for p in sorted((p for p in todo if p in canon_writes and canon_writes[p] is None), reverse=True):
                if p == "/":
                    continue
                try:
                    ino, kind, real = self._resolve(p, follow=False)
                except OSError:
                    applied.append(p)
                    continue
                parent, name = split(real)
                if kind == DIR:
                    self._remove_leaves(leaves, m)  # in order: they may lie below this directory
                    self._remove_node(real, self._resolve(parent)[0], name, ino, kind)
                    m.log(real, "rm")
                elif real not in doomed:  # two paths through symlinks may name one entry
                    doomed.add(real)
                    leaves.append((real, self._resolve(parent)[0], name, ino, kind))
                applied.append(p)
            self._remove_leaves(leaves, m)
            for p in canon_dirs:
                if p in skipped:
                    continue
                self._ensure_dirs(
                    p, canon_modes.get(p, 0o755), m, replace_files=True, mtime=canon_mtimes.get(p)
                )
                applied.append(p)
            for p in todo:
                data = canon_writes.get(p)
                if data is None:
                    continue
                parent, name = split(p)
                pino = self._ensure_dirs(parent, 0o755, m, replace_files=True)
                node = self._lookup(pino, name)
                real = join(self._resolve(parent)[2], name)
                if node is not None and node[1] == DIR:
                    self._remove_node(real, pino, name, node[0], node[1])
                    node = None
                if node is not None and node[1] == SYMLINK:
                    pino, name, real, node = self._write_target(p)
                cutter = ChunkCutter()
                ids = [self.chunks.put(c) for c in cutter.feed(bytes(data))]
                last = cutter.finish()
                if last is not None:
                    ids.append(self.chunks.put(last))
                self._set_content(
                    p,
                    pino,
                    name,
                    real,
                    node,
                    ids,
                    cutter.total,
                    canon_modes.get(p),
                    canon_mtimes.get(p),
                    detach=True,
                )
                m.log(real, "write")
                applied.append(p)
            for p, old in sorted(canon_links.items()):
                if p not in skipped and not self._batch_link(p, old, m):
                    skipped.add(p)
                elif p not in skipped:
                    applied.append(p)
            for p in sorted(set(canon_modes) | set(canon_mtimes)):
                if p in skipped or canon_writes.get(p) is not None:
                    continue  # written files got their mode and mtime with their content
                try:
                    ino, kind, real = self._resolve(p)
                except OSError:
                    continue
                mode, mtime = canon_modes.get(p), canon_mtimes.get(p)
                cur = self._db.execute(
                    "UPDATE inodes SET mode = coalesce(?1, mode), mtime = coalesce(?2, mtime) "
                    "WHERE id = ?3 AND (mode != coalesce(?1, mode) OR mtime != coalesce(?2, mtime))",
                    (mode, mtime, ino),
                )
                if cur.rowcount:
                    m.log(real, _CREATE_OP[kind])
                    applied.append(p)
        return BatchResult(rev=self._rev, applied=sorted(set(applied)), skipped=sorted(skipped))

    def _batch_link(self, p: str, old: str, m: _Mutation) -> bool:
        """Name the node at ``old`` also ``p`` (replacing what is there); False when ``old`` is not a
        file or symlink."""
        try:
            ino, kind, _ = self._resolve(old, follow=False)
        except OSError:
            return False
        if kind == DIR or p == "/":
            return False
        parent, name = split(p)
        pino = self._ensure_dirs(parent, 0o755, m, replace_files=True)
        real = join(self._resolve(parent)[2], name)
        node = self._lookup(pino, name)
        if node is not None and node[0] == ino:
            return True  # already a name of that file
        if node is not None:
            self._remove_node(real, pino, name, node[0], node[1])
        self._add_name(pino, name, ino, real, kind)
        m.log(real, "link")
        return True

    def stats(self) -> dict[str, int]:
        """Counters: files, dirs, symlinks, chunks, stored_bytes, chunk_bytes, logical_bytes, queries, chunk_reads."""
        db = self._db
        self._refresh()
        self._flush_garbage()
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
            "logical_bytes": self._logical,
            "queries": db.queries,
            "chunk_reads": self.chunks.reads,
            "rev": self._rev,
        }

    def __repr__(self) -> str:
        return f"FileSystem(id={self.id!r}, rev={self._rev})"


_CREATE_OP = {FILE: "write", DIR: "mkdir", SYMLINK: "symlink"}


class _Mutation:
    """One mutating call: a transaction that first checks the fence and bumps the revision once."""

    def __init__(self, fs: FileSystem, path: str, *, late_fence: bool = False) -> None:
        self._fs = fs
        self._path = path
        # late_fence: the caller checks the fence itself (check_fence) after its own checks, so that a
        # fenced-out owner still reports e.g. a missing path as it did when those ran first.
        self._late_fence = late_fence
        self._epoch = 0
        self._rev = 0
        self._logged = 0
        self._cancelled = False
        self._untouched = False

    def __enter__(self) -> _Mutation:
        fs = self._fs
        try:
            fs._db.execute("BEGIN IMMEDIATE")
        except OSError as exc:
            if exc.filename is None:
                exc.filename = self._path
            raise
        fs._db.in_transaction = True
        fs._pending_logical = 0
        try:
            self._epoch, self._rev = fs._bump()
            if not self._late_fence:
                fs._check_fence(self._epoch, self._path)
            if self._rev != fs._rev + 1:
                # Another connection on the file committed since we last looked (every committed
                # mutation logs a new revision): what we cached is stale.
                fs._reload()
        except BaseException:
            self._rollback()
            raise
        return self

    def check_fence(self) -> None:
        """EROFS for a fenced-out owner (for a mutation opened with ``late_fence``)."""
        self._fs._check_fence(self._epoch, self._path)

    def log(self, path: str, op: str) -> None:
        self._fs._log(self._rev, self._logged, path, op)
        self._logged += 1

    def log_many(self, entries: Sequence[tuple[str, str]]) -> None:
        """:meth:`log` of many ``(path, op)`` at once."""
        if entries:
            self._fs._log_many(self._rev, self._logged, entries)
            self._logged += len(entries)

    def cancel(self, *, untouched: bool = False) -> None:
        """End without changes (a no-op call): roll back. A call that logged nothing ends the same way.

        ``untouched``: nothing was written yet, so the resolutions cached meanwhile stay valid (a
        failed or cancelled transaction otherwise forgets them all), even if an error follows.
        """
        self._cancelled = True
        self._untouched = untouched

    def _rollback(self) -> None:
        fs = self._fs
        fs._db.in_transaction = False
        fs._db.conn.execute("ROLLBACK")
        fs._pending_logical = 0
        if not self._untouched:
            fs._cache.clear()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        fs = self._fs
        if isinstance(exc, OSError) and exc.errno == errno.EIO and exc.filename is None:
            exc.filename = self._path
        if exc_type is None and self._logged == 0:
            self._cancelled = True  # nothing changed (e.g. a batch of no-ops): no revision either
        if exc_type is not None or self._cancelled:
            if fs._db.conn.in_transaction:
                self._rollback()
            else:
                fs._db.in_transaction = False
                fs._pending_logical = 0
                if not self._untouched:
                    fs._cache.clear()
            return
        try:
            if fs.chunks.has_sweepable():
                fs.chunks.sweep()
            fs._db.execute("COMMIT")
        except BaseException:
            if fs._db.conn.in_transaction:
                self._rollback()
            raise
        fs._db.in_transaction = False
        fs._rev = self._rev
        fs._logical += fs._pending_logical
        fs._pending_logical = 0


def _as_bytes(path: str, piece: Any) -> bytes:
    if isinstance(piece, bytes):
        return piece
    if isinstance(piece, (bytearray, memoryview)):
        return bytes(piece)
    if isinstance(piece, str):
        return piece.encode("utf-8")
    raise fs_error(errno.EINVAL, path, f"write_file pieces must be bytes, not {type(piece).__name__}")


def _as_list(value: str | Sequence[str]) -> Sequence[str]:
    return [value] if isinstance(value, str) else value


def _check_paging(path: str, offset: int, limit: int | None) -> None:
    if offset < 0 or (limit is not None and limit < 0):
        raise fs_error(errno.EINVAL, path, "offset and limit must not be negative")
