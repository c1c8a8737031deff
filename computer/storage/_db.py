"""The SQLite connection of one store: pragmas, schema, explicit transactions and a statement counter.

Every statement goes through :meth:`Database.execute` (or ``executemany``) so that ``queries`` counts
them; tests use the counter to prove that pruning and renames cost a bounded number of reads. (The
connection's trace callback would also count, but it expands bound parameters, which costs a hex copy
of every 512 KiB blob.)
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import resource
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from ._schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION
from .errors import fs_error

__all__ = [
    "WAL_AUTOCHECKPOINT_PAGES",
    "WAL_LIMIT_BYTES",
    "Database",
    "is_disk_full",
    "storage_failure",
    "stored_epoch",
    "use_wal",
]

# Memory-map the file only for the duration of one large read (see :meth:`Database.mapped`); SQLite
# caps this at its compile-time maximum.
_MMAP_SIZE = 1 << 40
# A migration's statement adding a column: (table, column).
_ADD_COLUMN = re.compile(r"\s*ALTER TABLE (\w+) ADD COLUMN (\w+)", re.IGNORECASE)


# SQLite keeps the WAL at most this big after a checkpoint (it grows during one large transaction
# and is cut back afterwards), and checkpoints once it holds this many pages (4 KiB each): a busy
# workspace keeps at most ~4 MiB of WAL on disk, so after a full disk a few MiB let it recover. (The
# default journal_size_limit keeps the largest WAL ever reached: 64 MiB per workspace here before.)
# The price, measured on the shared 2-core machine (same process, alternating, noisy): 3,000 writes of
# 4 KiB 1.2-1.4x the time at 16,384 pages (a checkpoint, with its fsync, every ~150 such commits), a
# 64 MiB write 1.05-1.1x. 4,096 pages cost about half of that but need 16 MiB to recover; SQLite's
# own default is 1,000 pages.
WAL_LIMIT_BYTES = 4 * 1024 * 1024
WAL_AUTOCHECKPOINT_PAGES = 1024


def storage_failure(exc: sqlite3.Error, path: str | None = None) -> OSError:
    """The ``OSError`` for a failure of SQLite itself: ENOSPC for a full disk, EROFS for a write
    through a read-only open, else EIO (I/O error, closed store…)."""
    if is_disk_full(exc):
        return fs_error(
            errno.ENOSPC, path, f"no space left on device: the disk holding the workspace is full ({exc})"
        )
    if isinstance(exc, sqlite3.OperationalError) and "readonly" in str(exc):
        return fs_error(errno.EROFS, path, f"read-only store: {exc}")
    if isinstance(exc, sqlite3.OperationalError) and "within a transaction" in str(exc):
        # Within one thread transactions never nest (each is one synchronous step): another thread is
        # in the middle of one on the same connection. It said "storage failure" (EIO).
        return fs_error(errno.EBUSY, path, CONCURRENT_THREADS)
    return fs_error(errno.EIO, path, f"storage failure: {exc}")


CONCURRENT_THREADS = (
    "another thread is in the middle of an operation on this workspace: a Workspace (its fs) serves "
    "one thread at a time; give each thread a Workspace of its own on the same file (SQLite serialises "
    "them) or a get_workspace client"
)


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


def is_disk_full(exc: BaseException) -> bool:
    """Whether SQLite (or the OS under it) failed because the disk or the filesystem's quota is full.

    ``SQLITE_IOERR_SHMSIZE`` is SQLite failing to grow the ``-shm`` file (it writes every page of
    it): a new workspace on a disk with 8-32 KiB left said "disk I/O error" (EIO), not ENOSPC."""
    if getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR_SHMSIZE):
        return True
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "database or disk is full" in str(exc)


class Database:
    """One SQLite connection in autocommit mode; :meth:`transaction` wraps ``BEGIN IMMEDIATE``/``COMMIT``."""

    def __init__(self, path: str | None, *, readonly: bool = False) -> None:
        # check_same_thread=False: the owner may be driven from different event-loop threads over its
        # life (e.g. a Ray actor's loop), but never concurrently.
        self.queries = 0
        self.in_transaction = False
        self._data_version: int | None = None
        self._mapped = False
        self.private = path is None
        self.path = path
        # readonly: a reader beside the owner (the dashboard, ``computer log``): it never writes,
        # creates, migrates or takes the write lock; a file of an older schema is refused (EIO).
        self.readonly = readonly and path is not None
        try:
            self.conn = sqlite3.connect(
                f"file:{quote(path)}?mode=ro" if self.readonly and path is not None else (path or ":memory:"),
                isolation_level=None,
                check_same_thread=False,
                cached_statements=256,
                uri=self.readonly,
            )
        except sqlite3.Error as exc:
            raise _open_failure(exc, path) from exc
        try:
            if self.readonly:
                self._check_version()
            else:
                self._configure(path is None)
        except (sqlite3.Error, OSError) as exc:
            failure = _open_failure(exc, path)  # before the close frees what it holds (EMFILE)
            self.conn.close()
            raise failure from exc

    def _configure(self, memory: bool) -> None:
        c = self.conn
        c.execute("PRAGMA busy_timeout = 10000")
        if not memory:
            # page_size only applies to a new file. 4 KiB: a small transaction dirties ~7 pages and
            # larger pages made every commit 2-3x slower; 512 KiB chunk blobs stream fine either way.
            c.execute("PRAGMA page_size = 4096")
            use_wal(c)
            # NORMAL in WAL: a commit survives a process crash; only an OS crash/power loss can lose
            # the last transactions (never corrupt the file).
            c.execute("PRAGMA synchronous = NORMAL")
            c.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
            c.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
            # Fold what an earlier owner left in the WAL into the file before accepting writes, so a
            # restart after a full disk starts from a small WAL. Best effort: on a disk still full
            # the checkpoint stops part way, and writes then report ENOSPC themselves.
            with contextlib.suppress(sqlite3.Error):
                c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            # No mmap: mapped pages of a large file count as resident memory while it streams.
            c.execute("PRAGMA mmap_size = 0")
        c.execute("PRAGMA cache_size = -8192")  # 8 MiB page cache
        # FAST, as SQLite's own default: deleted content is zeroed where that costs no extra write. Some
        # builds (Debian's) default to ON, which also rewrites every freed overflow page: replacing a
        # 64 MiB file wrote 64 MiB more to the WAL (twice the pages of the write itself).
        c.execute("PRAGMA secure_delete = FAST")
        c.execute("PRAGMA temp_store = MEMORY")
        c.execute("PRAGMA foreign_keys = OFF")
        meta = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
        if c.execute(meta).fetchone() is None:
            c.execute("BEGIN IMMEDIATE")
            if c.execute(meta).fetchone() is None:  # not created by another opener meanwhile
                for stmt in SCHEMA.split(";"):
                    if stmt.strip():
                        c.execute(stmt)
                c.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            c.execute("COMMIT")
        version = c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if version is not None and int(version[0]) in MIGRATIONS:
            self._migrate(int(version[0]))
            version = c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if version is None or int(version[0]) != SCHEMA_VERSION:
            found = None if version is None else version[0]
            raise sqlite3.DatabaseError(f"unsupported schema version {found!r} (expected {SCHEMA_VERSION})")

    def _check_version(self) -> None:
        """A read-only open: the file must exist with the current schema (it is never upgraded here)."""
        self.conn.execute("PRAGMA busy_timeout = 10000")
        self.conn.execute("PRAGMA cache_size = -8192")
        try:
            version = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.OperationalError as exc:
            raise sqlite3.DatabaseError(f"not a workspace store: {exc}") from None
        if version is None or int(version[0]) != SCHEMA_VERSION:
            found = None if version is None else version[0]
            raise sqlite3.DatabaseError(
                f"schema version {found!r} (expected {SCHEMA_VERSION}): open it once with its owner to upgrade"
            )

    def _migrate(self, version: int) -> None:
        """Upgrade the file from ``version`` to :data:`SCHEMA_VERSION`, all in one transaction."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            while version in MIGRATIONS:
                for stmt in MIGRATIONS[version].split(";"):
                    if stmt.strip() and not self._has_column(stmt):
                        c.execute(stmt)
                version += 1
            c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
        except BaseException:
            c.execute("ROLLBACK")
            raise
        c.execute("COMMIT")

    def _has_column(self, stmt: str) -> bool:
        """Whether ``stmt`` adds a column the table already has (a file downgraded by hand, as the
        schema tests do, may keep a later version's column: adding it again would fail the open)."""
        added = _ADD_COLUMN.match(stmt)
        if added is None:
            return False
        columns = self.conn.execute(f"PRAGMA table_info({added[1]})").fetchall()
        return any(row[1] == added[2] for row in columns)

    def changed_elsewhere(self) -> bool:
        """True when another connection committed since the last call (SQLite's ``data_version``)."""
        if self.private:
            return False  # an in-memory store has no other connection
        try:
            version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise storage_failure(exc) from exc
        changed = self._data_version is not None and version != self._data_version
        self._data_version = version
        return changed

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        self.queries += 1
        try:
            return self.conn.execute(sql, params)
        except sqlite3.Error as exc:
            raise storage_failure(exc) from exc

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> sqlite3.Cursor:
        self.queries += 1
        try:
            return self.conn.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise storage_failure(exc) from exc

    def one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first row of a query, or None."""
        self.queries += 1
        try:
            return self.conn.execute(sql, params).fetchone()
        except sqlite3.Error as exc:
            raise storage_failure(exc) from exc

    def blob(self, cid: int, lo: int = 0, hi: int = -1) -> bytes:
        """Bytes ``[lo, hi)`` of the ``chunk_data`` row ``cid`` (``hi=-1``: to the end).

        SQLite's incremental blob read copies the pages straight into the returned ``bytes``: one copy
        fewer than a ``SELECT`` (which first assembles the value in a buffer of its own), and a range
        reads only its pages.
        """
        self.queries += 1
        try:
            with self.conn.blobopen("chunk_data", "data", cid, readonly=True) as blob:
                if lo:
                    blob.seek(lo)
                return blob.read(-1 if hi < 0 else hi - lo)
        except sqlite3.Error as exc:
            raise storage_failure(exc) from exc

    @contextmanager
    def mapped(self) -> Iterator[None]:
        """Memory-map the file while a large read runs, unmapped again when it ends.

        Without a mapping SQLite reads a 512 KiB chunk with one ``pread`` per 4 KiB page; mapped, it
        copies from the page cache (3x faster). The mapping is dropped at the end so that no file page
        stays resident in this process (a permanent mapping counts as resident memory while large files
        stream). Nested uses map once; an in-memory store has no file to map.
        """
        if self.private or self._mapped:
            yield
            return
        self.execute(f"PRAGMA mmap_size = {_MMAP_SIZE}")
        self._mapped = True
        try:
            yield
        finally:
            self._mapped = False
            self.execute("PRAGMA mmap_size = 0")

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction around several statements (a no-op inside a transaction)."""
        if self.conn.in_transaction:
            yield
            return
        self.execute("BEGIN")
        try:
            yield
        finally:
            if self.conn.in_transaction:
                self.execute("COMMIT")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; rollback on any exception. Never spans an ``await``."""
        if self.in_transaction:
            yield
            return
        self.execute("BEGIN IMMEDIATE")
        self.in_transaction = True
        try:
            yield
        except BaseException:
            self.in_transaction = False
            self.conn.execute("ROLLBACK")
            raise
        self.in_transaction = False
        try:
            self.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.conn.close()


def _open_failure(exc: BaseException, path: str | None) -> OSError:
    """A store that cannot be opened: ENOSPC when the disk is full (a new workspace); ENOENT or
    ENOTDIR when its directory is missing or is not one, EISDIR when the path is a directory, EROFS when
    it is read-only, EMFILE (ENFILE) when no descriptor is left (SQLite says only "unable to open");
    else EIO."""
    if path is not None and not is_disk_full(exc):
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            missing = not os.path.lexists(parent)
            return fs_error(
                errno.ENOENT if missing else errno.ENOTDIR,
                path,
                f"cannot open the workspace store: {parent} {'does not exist' if missing else 'is not a directory'}",
            )
        if os.path.isdir(path):  # SQLite says "unable to open database file" (EIO)
            return fs_error(
                errno.EISDIR, path, "cannot open the workspace store: it is a directory (give a file's path)"
            )
        if _read_only_disk(parent):
            return fs_error(
                errno.EROFS, path, f"cannot open the workspace store: {parent} is read-only ({exc})"
            )
    if path is not None and (no_fd := _descriptors_exhausted()) is not None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return fs_error(
            no_fd,
            path,
            f"cannot open the workspace store: no file descriptor left ({os.strerror(no_fd)}; this "
            f"process may open {soft}, each open workspace holds 3: close some, or raise ulimit -n)",
        )
    code = errno.ENOSPC if is_disk_full(exc) else errno.EIO
    return fs_error(code, path, f"cannot open the workspace store: {exc}")


def _descriptors_exhausted() -> int | None:
    """EMFILE (this process) or ENFILE (the system) when no descriptor can be opened now, else None:
    SQLite says only "unable to open database file", which was EIO, as for a damaged file."""
    try:
        os.close(os.open(os.devnull, os.O_RDONLY))
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            return exc.errno
    return None


def _read_only_disk(directory: str) -> bool:
    """Whether ``directory`` is on a filesystem mounted read-only (SQLite says only "unable to open")."""
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def use_wal(conn: sqlite3.Connection, *, within: float = 30.0) -> None:
    """Put ``conn``'s file in WAL mode, retrying (bounded) while another connection opens it too.

    Switching a new file to WAL needs a moment alone with it, and SQLite answers "database is locked"
    at once instead of waiting (no busy handler): processes opening one new file together (owners
    starting side by side on a fresh data directory) failed so, 7 times in 30 trials of 8 openers.
    """
    deadline = time.monotonic() + within
    pause = 0.002
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
