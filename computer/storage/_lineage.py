"""Which store, and which history of it, a mirror of a workspace reflects (``FileSystem.instance``,
``FileSystem.session``, ``FileSystem.continues``).

A workspace's id lives in its file, so a copy of the file (``cp a.sqlite b.sqlite``: a template, a
fork) or an earlier copy restored over it has the same id. What an exec backend keeps per workspace
(warm mirrors, live sandboxes, a pool's pins) must still tell them apart:

- **instance**: the id plus a token kept in the file together with the file's identity (device and
  inode) when it was last opened for writing. A file opened where that identity is not its own (a
  copy, a file restored or moved onto another inode, a store of an older version) gets a new token.
  Two stores open at once are two files, so their instances differ. A move to another filesystem
  (or an NFS mount whose device number differs per machine) also gets a new one: the next run
  pushes in full, nothing else changes (``id`` stays).
- **sessions**: every open for writing adds a random token and the revision it started at (the last
  :data:`SESSIONS_KEPT`). A mirror that reached revision ``rev`` while the store was in session
  ``s`` may go on from there only when this store's history holds ``s`` and reached ``rev`` within
  it (:func:`continues`): a store restored from an earlier copy (same id, maybe the same inode, its
  revision lower, or higher again after new writes) does not, and the mirror is pushed in full.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field

from ._db import Database

__all__ = ["SESSIONS_KEPT", "Lineage", "open_lineage", "read_lineage"]

# Sessions a store remembers: a mirror idle across more opens than this is pushed in full.
SESSIONS_KEPT = 32


@dataclass
class Lineage:
    instance: str  # the store's id and its instance token
    session: str  # this open's token ("" for a reader)
    sessions: list[tuple[str, int]] = field(default_factory=list)  # (token, first revision), oldest first

    def continues(self, session: str | None, rev: int, current: int) -> bool:
        """Whether this store's history holds revision ``rev`` of session ``session`` (``current``:
        the store's revision now). ``None`` (a caller that keeps no session) claims no history: only a
        revision the store has not reached is refused."""
        if session is None:
            return rev <= current
        for i, (token, start) in enumerate(self.sessions):
            if token == session:
                end = self.sessions[i + 1][1] if i + 1 < len(self.sessions) else current
                return start <= rev <= end
        return False


def _identity(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}"


def _meta(db: Database) -> dict[str, str]:
    rows = db.execute("SELECT key, value FROM meta WHERE key IN ('instance', 'file', 'sessions')")
    return {str(k): str(v) for k, v in rows.fetchall()}


def _sessions(meta: dict[str, str]) -> list[tuple[str, int]]:
    try:
        return [(str(t), int(r)) for t, r in json.loads(meta.get("sessions", "[]"))]
    except (ValueError, TypeError):
        return []  # damaged: every mirror of it is pushed in full


def open_lineage(db: Database, workspace_id: str, path: str | None, rev: int) -> Lineage:
    """A writable open's lineage (inside its open transaction, ``rev``: the store's revision): a new
    instance token when the file is not the one that recorded it, a new session from ``rev``."""
    meta = _meta(db)
    identity = _identity(path)
    token = meta.get("instance")
    if token is None or identity is None or meta.get("file") != identity:
        token = secrets.token_hex(8)
    session = secrets.token_hex(8)
    sessions = [*_sessions(meta), (session, rev)][-SESSIONS_KEPT:]
    db.executemany(
        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
        [("instance", token), ("file", identity or ""), ("sessions", json.dumps(sessions))],
    )
    return Lineage(f"{workspace_id}-{token}", session, sessions)


def read_lineage(db: Database, workspace_id: str) -> Lineage:
    """A reader's lineage: what the file says; it continues no mirror (it runs nothing)."""
    token = _meta(db).get("instance")
    return Lineage(f"{workspace_id}-{token}" if token else workspace_id, "")
