"""Taking a workspace's owner lease: the one step every owner (and a deletion) starts with.

The directory hands out epochs; the SQLite file remembers the highest epoch any owner opened it with.
A directory that lost its records (a Redis restarted empty) counts from 1 again, so a lease is taken
until its epoch is above the file's: only then does opening the file with ``fence=epoch`` stop every
earlier owner's writes (EROFS).
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

from ..storage import FileSystem
from .directory import Directory, WorkspaceRecord

__all__ = ["awake", "awake_where", "process_node", "take_lease"]


def take_lease(
    directory: Directory, name: str, path: str | Path, *, node: str, host: str | None, ttl: float
) -> tuple[str, int]:
    """Take the lease of ``name`` for a new owner id; return ``(owner_id, epoch)``, the epoch above
    every epoch the file at ``path`` has seen (0 when it does not exist)."""
    stored = FileSystem.stored_epoch(str(path))
    while True:
        owner_id = uuid.uuid4().hex
        epoch = directory.acquire_lease(name, node, owner_id, ttl, host=host)
        if epoch > stored:
            return owner_id, epoch


def process_node() -> str:
    """The ``node`` an owner outside Ray records: ``process:<pid>@<hostname>``.

    It is never an alive Ray node id, so placement treats it like the node of an owner that is gone
    (the file is on this machine).
    """
    return f"process:{os.getpid()}@{socket.gethostname()}"


def awake_where(record: WorkspaceRecord) -> str:
    """Where the owner of ``record`` runs, in words: ``in process 812 on box``, ``on node 1a2b3c4d (box)``."""
    node = record.node or "?"
    if node.startswith("process:"):
        pid, _, hostname = node.removeprefix("process:").partition("@")
        return f"in process {pid} on {hostname}" if hostname else f"in process {pid}"
    hostname = (record.host or "").partition("/")[0]
    return f"on node {node[:8]} ({hostname})" if hostname else f"on node {node[:8]}"


def awake(record: WorkspaceRecord | None, now: float | None = None) -> bool:
    """Whether an owner holds ``record``'s workspace: a live lease, unless that owner was a process of
    this machine that is gone (killed before it could release the lease: no need to wait it out).
    A pid reused by another process counts as alive: the safe side."""
    if record is None or not record.lease_live(now):
        return False
    node = record.node or ""
    if not node.startswith("process:"):
        return True
    pid, _, hostname = node.removeprefix("process:").partition("@")
    if hostname != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True
