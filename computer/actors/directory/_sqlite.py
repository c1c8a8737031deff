"""The embedded directory: one SQLite file under the data directory (single node, or a shared disk)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ...storage import storage_failure, use_wal
from ._identity import check_identity
from ._record import WorkspaceRecord, refuse_while_deleting

__all__ = ["SqliteDirectory"]

_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS workspaces (
    name TEXT PRIMARY KEY,
    node TEXT,
    owner TEXT,
    epoch INTEGER NOT NULL,
    lease_expires REAL NOT NULL,
    last_active REAL NOT NULL,
    state TEXT NOT NULL,
    released_epoch INTEGER NOT NULL DEFAULT 0,
    host TEXT
) WITHOUT ROWID
"""

_COLUMNS = "name, node, owner, epoch, lease_expires, last_active, state, released_epoch, host"

# Where each workspace's file was last opened, kept on the head node when the directory proper is Redis
# (see ``_registry.py``): a Redis that restarted empty forgets placements, this file does not.
_FILES_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    name TEXT PRIMARY KEY,
    node TEXT NOT NULL,
    host TEXT NOT NULL,
    noted REAL NOT NULL
) WITHOUT ROWID
"""

# Tombstones: the workspaces ``delete_workspace`` removed, beside the file registry (``_registry.py``),
# so a Redis restored from a dump taken before a deletion brings back no workspace: its record then
# names a file the deletion removed, and the epoch tells that record from one of a later life.
_DELETED_SCHEMA = """
CREATE TABLE IF NOT EXISTS deleted (
    name TEXT PRIMARY KEY,
    at REAL NOT NULL,
    by TEXT NOT NULL,
    epoch INTEGER NOT NULL
)
"""  # a rowid table: the newest tombstones are the highest rowids (compaction is one index range)


class SqliteDirectory:
    """A :class:`Directory` in one SQLite file; every process of the node may open the same file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection guarded by a lock: owner actors call in from their event loop thread and
        # from background threads alike.
        self._db = self._connect()
        try:
            check_identity(self.path, self._db)  # one made anew under a running cluster: ESTALE
        except BaseException:
            self._db.close()
            raise
        self._lock = threading.Lock()
        self._closed = False
        self._lost = False  # the connection was closed to open a writable one, which failed

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            use_wal(db)
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(_SCHEMA)
            db.execute(_FILES_SCHEMA)
            db.execute(_DELETED_SCHEMA)
            db.execute("CREATE INDEX IF NOT EXISTS deleted_at ON deleted (at)")
            _add_host_column(db)
        except BaseException:
            db.close()
            raise
        return db

    def _writing(self, write: Callable[[], _T]) -> _T:
        """Run ``write``; refused as read-only, once more on a new connection. SQLite opens a file it
        cannot write (a data directory mounted read-only for a while) read-only, and that connection
        stays so after the disk is writable again: an owner host opened during the outage refused
        every lease (EROFS) for as long as it lived."""
        self._ready()
        try:
            return write()
        except sqlite3.OperationalError as exc:
            if "readonly" not in str(exc) or self._closed:
                raise
        self._reconnect()
        return write()

    def _ready(self) -> None:
        """Open the connection again if a reconnection failed (the disk was still unwritable)."""
        if self._lost and not self._closed:
            self._reconnect()

    def _reconnect(self) -> None:
        """Replace the connection by a new one. The old one is closed first: a process's connections
        to one file share its read-only handles while any of them is open."""
        with self._lock:
            self._db.close()
            self._lost = True
            self._db = self._connect()
            self._lost = False

    def get(self, name: str) -> WorkspaceRecord | None:
        self._ready()
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM workspaces WHERE name = ?", (name,)).fetchone()
        return None if row is None else _record(row)

    def acquire_lease(
        self, name: str, node: str, owner_id: str, ttl: float, *, host: str | None = None
    ) -> int:
        try:
            return self._writing(lambda: self._acquire_lease(name, node, owner_id, ttl, host))
        except sqlite3.Error as exc:  # a full disk is ENOSPC, as in the workspace's own file
            raise storage_failure(exc, str(self.path)) from exc

    def _acquire_lease(self, name: str, node: str, owner_id: str, ttl: float, host: str | None) -> int:
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(
                    "SELECT owner, epoch, lease_expires, released_epoch, node FROM workspaces WHERE name = ?",
                    (name,),
                ).fetchone()
                if row is not None:
                    refuse_while_deleting(name, row[4], row[2], node, now)
                released = 0 if row is None else int(row[3])
                if row is None:
                    epoch = 1
                elif row[0] == owner_id and row[2] > now:
                    epoch = int(row[1])
                else:
                    epoch = int(row[1]) + 1
                self._db.execute(
                    f"INSERT OR REPLACE INTO workspaces ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, 'active', ?, ?)",
                    (name, node, owner_id, epoch, now + ttl, now, released, host),
                )
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite may have rolled back itself (a full disk)
                    self._db.execute("ROLLBACK")
                raise
        return epoch

    def renew_lease(
        self, name: str, owner_id: str, epoch: int, ttl: float, *, last_active: float | None = None
    ) -> bool:
        now = time.time()

        def renew() -> bool:
            with self._lock:
                return self._renew(now, name, owner_id, epoch, ttl, last_active)

        return self._writing(renew)

    def _renew(
        self, now: float, name: str, owner_id: str, epoch: int, ttl: float, last_active: float | None
    ) -> bool:
        """One lease renewal (the lock held): whether ``owner_id`` at ``epoch`` still held it."""
        cur = self._db.execute(
            "UPDATE workspaces SET lease_expires = ?, last_active = MAX(last_active, ?), state = 'active' "
            "WHERE name = ? AND owner = ? AND epoch = ? AND state = 'active'",
            (now + ttl, last_active if last_active is not None else 0.0, name, owner_id, epoch),
        )
        return cur.rowcount == 1

    def renew_leases(self, renewals: Sequence[tuple[str, str, int, float, float | None]]) -> list[bool]:
        """``renew_lease`` of each ``(name, owner_id, epoch, ttl, last_active)`` in one transaction."""
        now = time.time()

        def renew() -> list[bool]:
            kept: list[bool] = []
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for name, owner_id, epoch, ttl, last_active in renewals:
                        kept.append(self._renew(now, name, owner_id, epoch, ttl, last_active))
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
            return kept

        return self._writing(renew)

    def release_lease(self, name: str, owner_id: str, epoch: int, *, hibernating: bool = False) -> bool:
        state = "hibernating" if hibernating else "closed"

        def release() -> bool:
            with self._lock:
                cur = self._db.execute(
                    "UPDATE workspaces SET lease_expires = 0.0, state = ?, released_epoch = epoch "
                    "WHERE name = ? AND owner = ? AND epoch = ? AND state = 'active'",
                    (state, name, owner_id, epoch),
                )
                return cur.rowcount == 1

        return self._writing(release)

    def remove(self, name: str, owner_id: str) -> bool:
        def remove() -> bool:
            with self._lock:
                cur = self._db.execute(
                    "DELETE FROM workspaces WHERE name = ? AND owner = ?", (name, owner_id)
                )
                return cur.rowcount == 1

        return self._writing(remove)

    def names(self) -> list[str]:
        self._ready()
        with self._lock:
            rows = self._db.execute("SELECT name FROM workspaces").fetchall()
        # Byte order of the UTF-8 names, as everywhere else in the project.
        return sorted((str(r[0]) for r in rows), key=lambda n: n.encode("utf-8", "surrogatepass"))

    # -- the file registry (used by ``RegisteredDirectory`` on the head node's file) ----------------

    def note_file(self, name: str, node: str, host: str) -> None:
        """Remember that ``name``'s file is on ``node`` of machine ``host`` (an owner just opened it)."""

        def note() -> None:
            with self._lock:
                self._transaction(
                    ("DELETE FROM deleted WHERE name = ?", (name,)),  # a new life: no longer deleted
                    (
                        "INSERT OR REPLACE INTO files (name, node, host, noted) VALUES (?, ?, ?, ?)",
                        (name, node, host, time.time()),
                    ),
                )

        try:
            self._writing(note)
        except sqlite3.Error as exc:
            raise storage_failure(exc, str(self.path)) from exc

    def file_of(self, name: str) -> tuple[str, str] | None:
        """``(node, host)`` last noted for ``name``'s file, or None."""
        self._ready()
        with self._lock:
            row = self._db.execute("SELECT node, host FROM files WHERE name = ?", (name,)).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def forget_file(self, name: str) -> None:
        """The workspace was deleted: its file is nowhere."""

        def forget() -> None:
            with self._lock:
                self._db.execute("DELETE FROM files WHERE name = ?", (name,))

        self._writing(forget)

    def forget_deletion(self, name: str) -> None:
        """``name`` was made anew: its tombstone goes (``note_file`` does it too, with the note)."""

        def forget() -> None:
            with self._lock:
                self._db.execute("DELETE FROM deleted WHERE name = ?", (name,))

        try:
            self._writing(forget)
        except sqlite3.Error as exc:
            raise storage_failure(exc, str(self.path)) from exc

    def note_deleted(self, name: str, epoch: int, by: str, *, ttl: float, kept: int) -> None:
        """Remember that a deletion (its lease's ``epoch``, run by ``by``) removed ``name`` just now, and
        forget its file's note; tombstones older than ``ttl`` seconds, and all but the newest ``kept``,
        are dropped in the same write (bounded: one row per deleted name, gone once made anew). The
        newest are the ``kept`` highest rowids (a replaced row gets a new one): an index range, not a
        scan of every tombstone (~0.1 ms at 100,000 kept)."""
        now = time.time()

        def bury() -> None:
            with self._lock:
                self._transaction(
                    ("DELETE FROM files WHERE name = ?", (name,)),
                    (
                        "INSERT OR REPLACE INTO deleted (name, at, by, epoch) VALUES (?, ?, ?, ?)",
                        (name, now, by, epoch),
                    ),
                    ("DELETE FROM deleted WHERE at < ?", (now - ttl,)),
                    (
                        "DELETE FROM deleted WHERE rowid <= (SELECT MAX(rowid) FROM deleted) - ?",
                        (max(0, kept),),
                    ),
                )

        try:
            self._writing(bury)
        except sqlite3.Error as exc:
            raise storage_failure(exc, str(self.path)) from exc

    def deletion_of(self, name: str) -> tuple[float, str, int] | None:
        """``(at, by, epoch)`` of the deletion that last removed ``name`` (unless made anew since), or None."""
        self._ready()
        with self._lock:
            row = self._db.execute("SELECT at, by, epoch FROM deleted WHERE name = ?", (name,)).fetchone()
        return None if row is None else (float(row[0]), str(row[1]), int(row[2]))

    def tombstones(self) -> int:
        """How many tombstones are kept."""
        self._ready()
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM deleted").fetchone()[0])

    def _transaction(self, *statements: tuple[str, tuple[object, ...]]) -> None:
        """Run ``statements`` in one write transaction (the lock held)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for sql, args in statements:
                self._db.execute(sql, args)
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def __repr__(self) -> str:
        return f"SqliteDirectory({str(self.path)!r})"


def _record(row: tuple[object, ...]) -> WorkspaceRecord:
    name, node, owner, epoch, lease_expires, last_active, state, released_epoch, host = row
    return WorkspaceRecord.from_wire(
        str(name),
        {
            "node": node,
            "owner": owner,
            "epoch": epoch,
            "lease_expires": lease_expires,
            "last_active": last_active,
            "state": state,
            "released_epoch": released_epoch,
            "host": host,
        },
    )


def _add_host_column(db: sqlite3.Connection) -> None:
    """Directories written before hosts were recorded lack the ``host`` column: add it once."""
    columns = {str(row[1]) for row in db.execute("PRAGMA table_info(workspaces)")}
    if "host" in columns:
        return
    try:
        db.execute("ALTER TABLE workspaces ADD COLUMN host TEXT")
    except sqlite3.OperationalError as exc:
        if "duplicate column" not in str(exc):  # another process added it first
            raise
