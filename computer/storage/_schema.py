"""The SQLite schema of one workspace file, created on first open and checked on every open."""

from __future__ import annotations

import errno

from ._chunks import CHUNK_SIZE
from .errors import fs_error

__all__ = [
    "DIR",
    "FILE",
    "INLINE_MAX",
    "KIND_NAMES",
    "MIGRATIONS",
    "ROOT_INODE",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SYMLINK",
    "clean_mode",
]

SCHEMA_VERSION = 5

# Inode kinds, stored as small integers.
FILE = 0
DIR = 1
SYMLINK = 2
KIND_NAMES = {FILE: "file", DIR: "dir", SYMLINK: "symlink"}

ROOT_INODE = 1

# Mode bits never stored: setuid and setgid (SPEC 10: a file never gains privileges when a sandbox
# or a mirror recreates it).
PRIVILEGE_BITS = 0o6000


def check_mode(path: str, mode: object) -> None:
    """EINVAL naming ``path`` unless ``mode`` is permission bits (an int from ``0o0`` to ``0o7777``).

    Unchecked, ``mode=-1`` was kept as ``-0o6001`` and ``2**40`` as is: ``stat`` answered them."""
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
        raise fs_error(errno.EINVAL, path, f"mode must be permission bits from 0o0 to 0o7777, not {mode!r}")


def clean_mode(mode: int) -> int:
    """``mode`` without setuid/setgid: every mode the store keeps goes through here."""
    return int(mode) & ~PRIVILEGE_BITS


# Chunks whose stored bytes are smaller than this are kept inline in their ``chunks`` row.
INLINE_MAX = 2048

# Why each shape:
# - ``dirents`` is WITHOUT ROWID with primary key (parent, name): a lookup is one index probe, a
#   listing is a range scan in name order, a rename rewrites one row. Names are TEXT in a UTF-8
#   database with the BINARY collation, which SQLite compares with memcmp: UTF-8 byte order.
# - ``chunks`` holds the reference count and metadata of each chunk, with the bytes inline only when
#   they are small (< INLINE_MAX stored bytes); larger bytes live in ``chunk_data``, so a reference
#   count update (copy, overwrite, rm) never rewrites a 512 KiB blob. ``refs = 0`` rows are garbage
#   (or staged parts of a streamed write).
# - ``inodes.chunk`` is the chunk of a file of one chunk (1 byte to CHUNK_SIZE: every small file), so
#   creating or removing it touches no ``file_chunks`` page; it is NULL for every other inode.
# - ``file_chunks`` maps (inode, index) to a chunk id for files of two chunks or more; every chunk but
#   the last is exactly CHUNK_SIZE bytes, so a byte range maps to an index range by arithmetic.
# - ``inodes.nlink`` counts the directory entries naming the inode (hard links: ``FileSystem.link``);
#   the partial index ``inodes_linked`` holds only inodes of two names or more, so a removal finds
#   the few that survive it without an extra probe per removed row (nearly every inode has one name).
# - ``inodes.sub_ns`` is the part of a node's time finer than its ``mtime`` (ms, the public unit):
#   nanoseconds past that millisecond, 0 to 999,999, so a node's exact time is
#   ``mtime * 1_000_000 + sub_ns``. A time the store makes (now) or a caller gives in ms alone has 0;
#   only an exec pull gives more (the program's time, as lstat read it), and a mirror built from the
#   store sets the exact time again (``make`` compares nanoseconds). Every statement that sets
#   ``mtime`` sets ``sub_ns`` with it: a stale remainder never outlives the time it belonged to.
# - ``changes`` is keyed by (revision, n-th change of that revision): one b-tree, scanned by rev.
# - ``state`` is one row: the revision, the owner epoch (fencing) and the change-log floor.
# - ``audit`` is the audit log (``_audit.py``): AUTOINCREMENT so an id is never reused after the
#   oldest records are trimmed (followers page by id); ``size`` is what retention counts.
AUDIT_TABLE = """
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time INTEGER NOT NULL,
    kind TEXT NOT NULL,
    tool TEXT,
    status TEXT NOT NULL,
    error TEXT,
    duration_ms REAL,
    caller TEXT,
    args TEXT,
    detail TEXT,
    size INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_time ON audit (time);
"""

SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    rev INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    log_floor INTEGER NOT NULL
);
CREATE TABLE inodes (
    id INTEGER PRIMARY KEY,
    kind INTEGER NOT NULL,
    mode INTEGER NOT NULL,
    mtime INTEGER NOT NULL,
    size INTEGER NOT NULL,
    target TEXT,
    chunk INTEGER,
    nlink INTEGER NOT NULL DEFAULT 1,
    sub_ns INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX inodes_linked ON inodes (id) WHERE nlink > 1;
CREATE TABLE dirents (
    parent INTEGER NOT NULL,
    name TEXT NOT NULL,
    child INTEGER NOT NULL,
    PRIMARY KEY (parent, name)
) WITHOUT ROWID;
CREATE TABLE file_chunks (
    inode INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    chunk INTEGER NOT NULL,
    PRIMARY KEY (inode, idx)
) WITHOUT ROWID;
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY,
    hash BLOB NOT NULL UNIQUE,
    refs INTEGER NOT NULL,
    compressed INTEGER NOT NULL,
    size INTEGER NOT NULL,
    stored INTEGER NOT NULL,
    data BLOB
);
CREATE TABLE chunk_data (
    id INTEGER PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE changes (
    rev INTEGER NOT NULL,
    n INTEGER NOT NULL,
    path TEXT NOT NULL,
    op TEXT NOT NULL,
    PRIMARY KEY (rev, n)
) WITHOUT ROWID;
{AUDIT_TABLE}INSERT INTO state (id, rev, epoch, log_floor) VALUES (1, 0, 0, 0);
INSERT INTO inodes (id, kind, mode, mtime, size, target) VALUES ({ROOT_INODE}, {DIR}, 493, 0, 0, NULL);
"""

# Upgrades of an existing file, by the version they start from (each ends at the next version).
MIGRATIONS = {
    # 1 -> 2: one-chunk files move their chunk from ``file_chunks`` to ``inodes.chunk``.
    1: f"""
ALTER TABLE inodes ADD COLUMN chunk INTEGER;
UPDATE inodes SET chunk = (SELECT f.chunk FROM file_chunks f WHERE f.inode = inodes.id AND f.idx = 0)
    WHERE kind = 0 AND size > 0 AND size <= {CHUNK_SIZE};
DELETE FROM file_chunks WHERE inode IN (SELECT id FROM inodes WHERE chunk IS NOT NULL);
""",
    # 2 -> 3: hard links get a link count; setuid/setgid bits are never kept (SPEC 10).
    2: f"""
ALTER TABLE inodes ADD COLUMN nlink INTEGER NOT NULL DEFAULT 1;
CREATE INDEX inodes_linked ON inodes (id) WHERE nlink > 1;
UPDATE inodes SET mode = mode & ~{0o6000} WHERE mode & {0o6000} != 0;
""",
    # 3 -> 4: the audit log (tool calls, exec runs, share links) lives in the workspace's own file
    # (IF NOT EXISTS: a file downgraded by hand may still hold the table).
    3: AUDIT_TABLE,
    # 4 -> 5: times finer than a millisecond (exec pulls): 0 for every existing node. A constant
    # default, so SQLite adds the column without rewriting a row (``_db`` skips it when a file
    # downgraded by hand still has it).
    4: "ALTER TABLE inodes ADD COLUMN sub_ns INTEGER NOT NULL DEFAULT 0;",
}
