"""The state every room of the filesystem shares, and the transaction of one mutating call.

:class:`Store` is the one object the rooms (``_resolve``, ``_content``, ``_tree``, ``_batch``) and
:class:`Mutation` work on: the connection, the chunk table, the resolution cache and what is kept in
memory of the revision and the logical size. Its fields are public on purpose: it is the explicit
shared state, not an implementation detail of :class:`~computer.storage.FileSystem` that other code
reaches into.
"""

from __future__ import annotations

import errno
import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ._chunkstore import ChunkStore
from ._db import Database
from ._schema import DIR, FILE, ROOT_INODE, SYMLINK
from .errors import QuotaError, fs_error
from .paths import all_plain, canonical

__all__ = ["CACHE_LIMIT", "CREATE_OP", "JSON_ROWS", "Mutation", "Node", "Store", "now_ms"]

Node = tuple[int, int]  # (inode id, kind)


def now_ms() -> int:
    """The time now in the store's unit (ms since the epoch)."""
    return time.time_ns() // 1_000_000


# Resolutions cached at most (the cache is cleared past it).
CACHE_LIMIT = 200_000

# The change-log op that (re)creates a node of each kind.
CREATE_OP = {FILE: "write", DIR: "mkdir", SYMLINK: "symlink"}
# The op of a directory whose time alone changed (a run's pull keeps the program's): a change of the
# directory itself, never of what it holds, so no conflict rule counts it for the paths below it.
TOUCH = "touch"
# Logged just before a ``"link"`` entry: the existing name it links (``changes_since`` gives it to
# that entry as its ``source`` and never lists it as a change).
LINK_SOURCE = "link-source"

# From how many rows a batch statement binds one JSON array (``json_each``) rather than a row at a time.
JSON_ROWS = 16


# The runtime's bookkeeping (journal records, saved output): accounted apart from ``max_bytes``, up to
# this many bytes past it (``Store.check_quota``).
BOOKKEEPING_DIR = "/.computer"
BOOKKEEPING_BYTES = 64 * 1024 * 1024


class Store:
    """The shared state of one open store (see the module docstring).

    ``cache`` maps real paths (no symlink before the last segment) to ``(inode, kind)``; ``rev`` and
    ``logical`` mirror the committed revision and logical file bytes; ``pending_logical`` is the
    logical-size delta of the open transaction; ``closed`` is set once by ``FileSystem.close``.
    """

    change_log_limit = 100_000  # entries kept in the change log

    def __init__(
        self,
        db: Database,
        *,
        max_bytes: int | None,
        fence: int | None,
        later: Callable[[], bool] | None = None,
    ) -> None:
        self.db = db
        self.max_bytes = max_bytes
        self.fence = fence
        self.cache: dict[str, Node] = {}
        self.chunks = ChunkStore(db, self.is_current_owner, later)
        self.closed = False
        self.rev = 0
        self.logical = 0
        self.pending_logical = 0
        self.log_inserts = 0
        # Revisions whose later log entries a trim keeps, until a monotonic time (``hold_log``).
        self.log_holds: dict[int, float] = {}

    def hold_log(self, rev: int, seconds: float) -> None:
        """Keep the change log's entries after ``rev`` for ``seconds`` (from now; a later call for the
        same ``rev`` sets it again, 0 lets it go), whatever ``change_log_limit`` says."""
        if seconds > 0:
            self.log_holds[rev] = time.monotonic() + seconds
        else:
            self.log_holds.pop(rev, None)

    def reload(self) -> None:
        """(Re)read what this object keeps in memory: revision and logical size; forget resolutions."""
        db = self.db
        self.cache.clear()
        self.rev = int(
            db.one("SELECT max(rev, coalesce((SELECT max(rev) FROM changes), 0)) FROM state WHERE id = 1")[0]
        )
        total = db.one("SELECT coalesce(sum(size), 0) FROM inodes WHERE kind = ?", (FILE,))[0]
        self.logical = int(total)

    def refresh(self) -> None:
        """Reload when another connection committed since we last looked (not inside a transaction)."""
        if not self.closed and not self.db.in_transaction and self.db.changed_elsewhere():
            self.reload()

    def is_current_owner(self) -> bool:
        """True unless a newer owner raised the stored epoch (always True without a fence)."""
        if self.fence is None:
            return True
        row = self.db.one("SELECT epoch FROM state WHERE id = 1")
        return int(row[0]) == self.fence

    def bump(self) -> tuple[int, int]:
        """First statement of every mutating transaction: ``(stored epoch, next revision)``.

        The revision is the newest in the change log (or ``state.rev`` once the log was trimmed), so a
        transaction writes no extra page for it; the epoch is read under the write lock.
        """
        epoch, rev = self.db.one(
            "SELECT epoch, max(rev, coalesce((SELECT max(rev) FROM changes), 0)) FROM state WHERE id = 1"
        )
        return int(epoch), int(rev) + 1

    def check_fence(self, epoch: int, path: str) -> None:
        """EROFS when a newer owner raised the stored epoch above ours."""
        if self.fence is not None and epoch != self.fence:
            raise fs_error(
                errno.EROFS,
                path,
                f"workspace is owned by a newer owner (epoch {epoch}, ours {self.fence})",
            )

    def mutation(self, path: str, *, late_fence: bool = False) -> Mutation:
        """The transaction of one mutating call on ``path`` (see :class:`Mutation`)."""
        return Mutation(self, path, late_fence=late_fence)

    def log(self, rev: int, n: int, path: str, op: str) -> None:
        self.db.execute("INSERT INTO changes (rev, n, path, op) VALUES (?, ?, ?, ?)", (rev, n, path, op))
        self.log_inserts += 1
        if self.log_inserts >= self._trim_every():
            self.log_inserts = 0
            self.trim_log()

    def _trim_every(self) -> int:
        """Log inserts between trims: a trim's first query steps over ``change_log_limit`` index
        entries (~2.5 ms at the default 100,000), so with 1,024 a full log cost every pull of a
        ``mkdir -p`` of 1,110 directories that; a sixteenth of the limit lets the log overshoot it by
        at most that much (~6%) for ~16 index steps per insert."""
        return max(1024, self.change_log_limit // 16)

    def log_many(self, rev: int, first: int, entries: Sequence[tuple[str, str]]) -> None:
        """Log ``(path, op)`` entries numbered from ``first`` in one statement (see :meth:`log_op`)."""
        op = entries[0][1] if entries else ""
        if len(entries) >= JSON_ROWS and all(o == op for _, o in entries):
            self.log_op(rev, first, [path for path, _ in entries], op)
            return
        self.db.executemany(
            "INSERT INTO changes (rev, n, path, op) VALUES (?, ?, ?, ?)",
            [(rev, first + i, path, op) for i, (path, op) in enumerate(entries)],
        )
        self._logged_many(len(entries))

    def log_op(self, rev: int, first: int, paths: Sequence[str], op: str) -> None:
        """Log ``paths``, all with ``op``, numbered from ``first`` in one statement.

        From :data:`JSON_ROWS` entries (a pull's removals, its new directories) the paths go as one
        JSON array (``json_each``: an index is the entry's number): 1,000 rows ~1.0 ms, where
        ``executemany`` (a bind and a step per row) took ~3.2 ms.
        """
        if len(paths) < JSON_ROWS:
            self.log_many(rev, first, [(path, op) for path in paths])
            return
        self.db.execute(
            "INSERT INTO changes (rev, n, path, op) SELECT ?, ? + key, value, ? FROM json_each(?)",
            (rev, first, op, json.dumps(paths, ensure_ascii=False)),
        )
        self._logged_many(len(paths))

    def _logged_many(self, count: int) -> None:
        self.log_inserts += count
        if self.log_inserts >= self._trim_every():
            self.log_inserts = 0
            self.trim_log()

    def trim_log(self) -> None:
        """Keep about the last ``change_log_limit`` entries (whole revisions), and those after a held
        revision (:meth:`hold_log`); raise the floor."""
        row = self.db.one(
            "SELECT rev FROM changes ORDER BY rev DESC, n DESC LIMIT 1 OFFSET ?", (self.change_log_limit,)
        )
        if row is None:
            return
        cut = int(row[0])  # entries of revisions up to and including ``cut`` go
        if self.log_holds:
            now = time.monotonic()
            for rev, until in list(self.log_holds.items()):
                if until <= now:
                    del self.log_holds[rev]
                else:
                    cut = min(cut, rev)
        top = self.db.one("SELECT max(rev) FROM changes")[0]
        self.db.execute("DELETE FROM changes WHERE rev <= ?", (cut,))
        self.db.execute(
            "UPDATE state SET log_floor = max(log_floor, ?), rev = max(rev, ?) WHERE id = 1", (cut, top)
        )

    def canon(self, path: str, *, refresh: bool = True) -> str:
        """Canonical ``path``; also the entry of every call, where a write by another connection (a
        zombie or a successor owner on the same file) invalidates what this one cached.

        ``refresh=False`` is for a call that does all its work inside one :class:`Mutation`: that
        checks the revision under the write lock instead (``PRAGMA data_version`` costs ~5 µs).
        """
        p = canonical(path)
        if self.closed:
            raise fs_error(errno.EIO, p, "the workspace store is closed")
        if refresh:
            self.refresh()
        try:
            if not p.isascii():
                p.encode("utf-8")
        except UnicodeEncodeError:
            raise fs_error(
                errno.EINVAL, path.encode("utf-8", "replace").decode(), "path is not valid UTF-8"
            ) from None
        return p

    def canon_many(self, paths: Iterable[str]) -> list[str]:
        """``[canon(p, refresh=False) for p in paths]``: for the paths of one batch, which are nearly
        always canonical already: one check of them all (``paths.all_plain``) instead of one per
        path (1,000 paths ~0.05 ms instead of ~0.6); any other path, or a closed store, and each is
        canonicalised (or refused) as by :meth:`canon`, in order."""
        given = list(paths)
        if self.plain(given):
            return given
        return [self.canon(p, refresh=False) for p in given]

    def plain(self, paths: Sequence[str]) -> bool:
        """Whether :meth:`canon` would return each of ``paths`` as it is (checked at once)."""
        return not self.closed and all_plain(paths)

    def remember(self, path: str, node: Node) -> None:
        """Cache ``path``'s resolution (its real path: no link on the way), the cache held to
        :data:`CACHE_LIMIT` entries (emptied when full)."""
        if len(self.cache) >= CACHE_LIMIT:
            self.cache.clear()
        self.cache[path] = node

    def forget(self, path: str, kind: int) -> None:
        """Invalidate cached resolutions after ``path`` (of ``kind``) went away or moved."""
        if kind == DIR:
            self.cache.clear()
        else:
            self.cache.pop(path, None)

    def check_quota(self, path: str, delta: int) -> None:
        """ENOSPC when ``delta`` more logical bytes at ``path`` would pass ``max_bytes``.

        Bookkeeping (files below :data:`BOOKKEEPING_DIR`: the execution journal, saved output) is
        accounted apart: the workspace's own files are held to ``max_bytes`` without it, and a write
        below it is refused only when the store is past ``max_bytes`` and the bookkeeping would pass
        :data:`BOOKKEEPING_BYTES`. Before, a workspace its files filled failed its runs on their own
        journal records and logs. Counted only when the store is past ``max_bytes`` (one query)."""
        if self.max_bytes is None or delta <= 0:
            return
        total = self.logical + self.pending_logical + delta
        if total <= self.max_bytes:
            return
        kept = self.bookkeeping_bytes()
        if path == BOOKKEEPING_DIR or path.startswith(BOOKKEEPING_DIR + "/"):
            if kept + delta <= BOOKKEEPING_BYTES:
                return
            why = f"no space left: workspace limit is {self.max_bytes} bytes"
            raise QuotaError(errno.ENOSPC, f"{why}, and {BOOKKEEPING_BYTES} more for {BOOKKEEPING_DIR}", path)
        if total - kept > self.max_bytes:
            raise QuotaError(errno.ENOSPC, f"no space left: workspace limit is {self.max_bytes} bytes", path)

    def bookkeeping_bytes(self) -> int:
        """The logical bytes of the files below :data:`BOOKKEEPING_DIR` (the open transaction's too)."""
        row = self.db.one(
            "WITH RECURSIVE below(id) AS (SELECT child FROM dirents WHERE parent = ? AND name = ?"
            " UNION SELECT d.child FROM dirents d JOIN below b ON d.parent = b.id)"
            " SELECT coalesce(sum(size), 0) FROM inodes WHERE kind = ? AND id IN below",
            (ROOT_INODE, BOOKKEEPING_DIR[1:], FILE),
        )
        return int(row[0])


class Mutation:
    """One mutating call: a transaction that first checks the fence and bumps the revision once."""

    def __init__(self, st: Store, path: str, *, late_fence: bool = False) -> None:
        self._st = st
        self._path = path
        # late_fence: the caller checks the fence itself (check_fence) after its own checks, so that a
        # fenced-out owner still reports e.g. a missing path as it did when those ran first.
        self._late_fence = late_fence
        self._epoch = 0
        self._rev = 0
        self._logged = 0
        self._cancelled = False
        self._untouched = False

    def __enter__(self) -> Mutation:
        st = self._st
        try:
            st.db.execute("BEGIN IMMEDIATE")
        except OSError as exc:
            if exc.filename is None:
                exc.filename = self._path
            raise
        st.db.in_transaction = True
        st.pending_logical = 0
        try:
            self._epoch, self._rev = st.bump()
            if not self._late_fence:
                st.check_fence(self._epoch, self._path)
            if self._rev != st.rev + 1:
                # Another connection on the file committed since we last looked (every committed
                # mutation logs a new revision): what we cached is stale.
                st.reload()
        except BaseException:
            self._rollback()
            raise
        return self

    def check_fence(self) -> None:
        """EROFS for a fenced-out owner (for a mutation opened with ``late_fence``)."""
        self._st.check_fence(self._epoch, self._path)

    @property
    def logged(self) -> int:
        """How many change-log entries this mutation wrote so far."""
        return self._logged

    def log(self, path: str, op: str) -> None:
        self._st.log(self._rev, self._logged, path, op)
        self._logged += 1

    def log_many(self, entries: Sequence[tuple[str, str]]) -> None:
        """:meth:`log` of many ``(path, op)`` at once."""
        if entries:
            self._st.log_many(self._rev, self._logged, entries)
            self._logged += len(entries)

    def log_op(self, paths: Sequence[str], op: str) -> None:
        """:meth:`log` of many paths with one ``op`` at once."""
        if paths:
            self._st.log_op(self._rev, self._logged, paths, op)
            self._logged += len(paths)

    def cancel(self, *, untouched: bool = False) -> None:
        """End without changes (a no-op call): roll back. A call that logged nothing ends the same way.

        ``untouched``: nothing was written yet, so the resolutions cached meanwhile stay valid (a
        failed or cancelled transaction otherwise forgets them all), even if an error follows.
        """
        self._cancelled = True
        self._untouched = untouched

    def _end_without_commit(self) -> None:
        st = self._st
        if st.db.conn.in_transaction:
            st.db.conn.execute("ROLLBACK")
        st.db.in_transaction = False
        st.pending_logical = 0
        if not self._untouched:
            st.cache.clear()

    def _rollback(self) -> None:
        st = self._st
        st.db.in_transaction = False
        st.db.conn.execute("ROLLBACK")
        st.pending_logical = 0
        if not self._untouched:
            st.cache.clear()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        st = self._st
        if isinstance(exc, OSError) and exc.errno in (errno.EIO, errno.ENOSPC) and exc.filename is None:
            exc.filename = self._path
        if exc_type is None and self._logged == 0:
            self._cancelled = True  # nothing changed (e.g. a batch of no-ops): no revision either
        if exc_type is not None or self._cancelled:
            self._end_without_commit()
            return
        try:
            if st.chunks.has_sweepable():
                st.chunks.sweep()
            st.db.execute("COMMIT")
        except BaseException as failed:
            if st.db.conn.in_transaction:
                self._rollback()
            else:  # SQLite rolled back by itself (a full disk at COMMIT): drop what we cached too
                st.db.in_transaction = False
                st.pending_logical = 0
                st.cache.clear()
            if isinstance(failed, OSError) and failed.filename is None:
                failed.filename = self._path
            raise
        st.db.in_transaction = False
        st.rev = self._rev
        st.logical += st.pending_logical
        st.pending_logical = 0
