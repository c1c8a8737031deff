"""Which embedded directory file a cluster used at a path: one made anew under a running cluster is
refused, never taken for a fresh data directory.

The embedded directory (``<data_dir>/directory.sqlite``) lives in the data directory it describes. When
that directory disappears under a running cluster (a disk not mounted, a mount lost), the next process
to open the directory made an empty one there, had no record of any workspace, and every name was
opened as a new, empty workspace: clients saw their files gone, and what they wrote then was lost
again once the disk came back. Each directory file now carries an id (its ``meta`` table); the first
process of the cluster to open one at a path (on a machine) notes the id in Ray's key-value store, and
a file with another id at that path is refused with ESTALE. Outside Ray nothing is checked.
"""

from __future__ import annotations

import errno
import hashlib
import os
import socket
import sqlite3
import sys
import uuid
from pathlib import Path

from ...storage.errors import fs_error

__all__ = ["check_identity"]

_META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID"

# Files (resolved path, device, inode) this process found to be the cluster's: checked once each.
_verified: set[tuple[str, int, int]] = set()


def check_identity(path: Path, db: sqlite3.Connection) -> None:
    """Raise ESTALE when the directory file at ``path`` (open as ``db``) is not the one this Ray
    cluster used at that path on this machine; note it when the cluster knew none there."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    where = str(path.resolve())
    try:
        st = os.stat(where)
    except OSError:
        return
    seen = (where, st.st_dev, st.st_ino)
    if seen in _verified:
        return
    ident = _directory_id(db)
    if ident is None:
        return  # cannot be given an id now (read-only): nothing to compare
    from ..raycompat import kv_get, kv_put_new

    digest = hashlib.sha256(where.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    key = f"computer:directory:{digest}:{socket.gethostname()}".encode()
    try:
        known = None if kv_put_new(key, ident.encode()) else kv_get(key)
    except Exception:  # the key-value store cannot say: as outside Ray
        return
    if known is not None and known.decode() != ident:
        raise fs_error(
            errno.ESTALE,
            where,
            f"the directory {where} is not the one this cluster used there: it was made anew, so the data "
            f"directory {path.parent} is not mounted, or was replaced or emptied; its workspaces are not "
            "opened as new and empty. Mount the data directory again (if it was emptied on purpose, "
            "restart the Ray cluster)",
        )
    _verified.add(seen)


def _directory_id(db: sqlite3.Connection) -> str | None:
    """The id of the directory file ``db`` (given one when it has none); None when it cannot be."""
    try:
        return _read_id(db) or _make_id(db)
    except sqlite3.OperationalError:  # read-only, or busy beyond the connection's timeout
        return None


def _read_id(db: sqlite3.Connection) -> str | None:
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'id'").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return None if row is None else str(row[0])


def _make_id(db: sqlite3.Connection) -> str | None:
    db.execute(_META)
    db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('id', ?)", (uuid.uuid4().hex,))
    return _read_id(db)  # the first process's id when several gave one at once
