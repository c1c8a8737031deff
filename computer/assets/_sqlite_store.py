"""``SqliteAssetStore``: the embedded default. SQLite metadata plus blob files in one local directory.

Several processes (workspace owners and ``computer serve``) may open the same directory: SQLite runs
in WAL mode with a busy timeout, and blobs are immutable files renamed into place. Expired links
are reclaimed by :meth:`SqliteAssetStore.sweep`, which also runs opportunistically on ``put``/``get``
at most once per ``sweep_interval`` seconds.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from ..runtime import offload
from ._blobs import BlobDirectory, key_digest
from ._record import AssetRecord
from ._store import AssetNotFoundError

__all__ = ["SqliteAssetStore"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS assets (
    key TEXT PRIMARY KEY,
    digest TEXT NOT NULL,
    blob TEXT NOT NULL,
    filename TEXT NOT NULL,
    content_type TEXT NOT NULL,
    disposition TEXT NOT NULL,
    size INTEGER NOT NULL,
    etag TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    source_path TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    prefix TEXT
);
CREATE INDEX IF NOT EXISTS assets_expires_at ON assets (expires_at);
CREATE INDEX IF NOT EXISTS assets_digest ON assets (digest);
"""

_COLUMNS = (
    "key, filename, content_type, disposition, created_at, expires_at, source_path, workspace_id, prefix, "
    "size, etag"
)


class SqliteAssetStore:
    """Share links in ``<directory>/assets.sqlite`` with their bytes under ``<directory>/blobs``."""

    def __init__(self, directory: str | Path, *, sweep_interval: float = 60.0) -> None:
        self.directory = Path(directory)
        self.blobs = BlobDirectory(self.directory / "blobs")
        self.sweep_interval = sweep_interval
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._last_sweep = 0.0

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.directory / "assets.sqlite", timeout=30.0, check_same_thread=False, isolation_level=None
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            self._conn = conn
        return self._conn

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def call() -> T:
            with self._lock:
                return fn(self._connect())

        return await offload(self, call)  # the store's lane: never the loop's shared pool (_blobs.py)

    async def put(self, record: AssetRecord, data: AsyncIterable[bytes]) -> AssetRecord:
        if record.expired(time.time()):
            raise ValueError(f"asset {record.key!r} is already expired")
        await self._maybe_sweep()
        sha = hashlib.sha256()
        size = 0
        writer = await self.blobs.create()
        blob = self.blobs.name_for(record.key, record.expires_at_ms)
        try:
            async for piece in data:
                if piece:
                    sha.update(piece)
                    size += len(piece)
                    await writer.write(piece)
        except BaseException:
            await writer.abort()
            raise
        await writer.commit(blob)
        stored = replace(record, size=size, etag=sha.hexdigest())

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT INTO assets (digest, blob, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key_digest(stored.key), blob, *_row(stored)),
            )

        try:
            await self._run(insert)
        except BaseException:
            await self.blobs.remove(blob)
            raise
        return stored

    async def _lookup(self, key: str) -> tuple[AssetRecord, str] | None:
        def select(conn: sqlite3.Connection) -> Any:
            return conn.execute(f"SELECT blob, {_COLUMNS} FROM assets WHERE key = ?", (key,)).fetchone()

        row = await self._run(select)
        if row is None:
            return None
        record = AssetRecord(*row[1:])
        if record.expired(time.time()):
            return None
        return record, row[0]

    async def get(self, key: str) -> AssetRecord | None:
        await self._maybe_sweep()
        found = await self._lookup(key)
        return None if found is None else found[0]

    async def read(self, key: str, *, offset: int = 0, length: int | None = None) -> AsyncIterator[bytes]:
        if offset < 0 or (length is not None and length < 0):
            raise ValueError("offset and length must not be negative")
        found = await self._lookup(key)
        if found is None:
            raise AssetNotFoundError(key)
        try:
            handle = await self.blobs.open(found[1])
        except FileNotFoundError:
            raise AssetNotFoundError(key) from None
        async for piece in self.blobs.read(handle, offset, length):
            yield piece

    async def delete(self, key: str) -> bool:
        def remove(conn: sqlite3.Connection) -> Any:
            row = conn.execute("DELETE FROM assets WHERE key = ? RETURNING blob", (key,)).fetchone()
            return None if row is None else row[0]

        blob = await self._run(remove)
        if blob is None:
            return False
        await self.blobs.remove(blob)
        return True

    async def delete_workspace_links(self, workspace_id: str) -> int:
        """Remove every link shared from workspace ``workspace_id`` (its URLs answer 404); how many."""

        def remove(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute("DELETE FROM assets WHERE workspace_id = ? RETURNING blob", (workspace_id,))
            return [r[0] for r in rows.fetchall()]

        blobs = await self._run(remove)
        for blob in blobs:
            await self.blobs.remove(blob)
        return len(blobs)

    async def sweep(self) -> int:
        now = time.time()
        self._last_sweep = now

        def expire(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute("DELETE FROM assets WHERE expires_at <= ? RETURNING blob", (now,)).fetchall()
            return [r[0] for r in rows]

        expired = await self._run(expire)
        for blob in expired:
            await self.blobs.remove(blob)

        async def is_live(digest: str) -> bool:
            def probe(conn: sqlite3.Connection) -> bool:
                return conn.execute("SELECT 1 FROM assets WHERE digest = ?", (digest,)).fetchone() is not None

            return await self._run(probe)

        await self.blobs.sweep(now, is_live)
        return len(expired)

    async def _maybe_sweep(self) -> None:
        if time.time() - self._last_sweep >= self.sweep_interval:
            await self.sweep()

    async def close(self) -> None:
        def shut() -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        await offload(self, shut)

    def __repr__(self) -> str:
        return f"SqliteAssetStore({str(self.directory)!r})"


def _row(r: AssetRecord) -> tuple[Any, ...]:
    return (
        r.key,
        r.filename,
        r.content_type,
        r.disposition,
        r.created_at,
        r.expires_at,
        r.source_path,
        r.workspace_id,
        r.prefix,
        r.size,
        r.etag,
    )
