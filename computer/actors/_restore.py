"""A lease whose directory record vanished under a live owner (a Redis restarted empty, ``FLUSHALL``, the
key evicted): written back, not taken for a takeover.

An owner's lease renewal answers False both when another owner took the workspace over and when the
record is simply gone. Before, both made every live owner leave: a Redis flushed under a running cluster
closed every workspace at its next renewal (``lock_lease`` / 3), and every lock held through them was
lost (``LockLostError`` for holders nobody had displaced), every run in flight with its owner. No record
at all means nobody took a lease since (any lease, a deletion's too, writes one), so the owner writes its
own back (``RedisDirectory.restore_lease``: only where no record is) while its file still carries its
epoch: a newer owner or a deletion raises the file's epoch (the fence) before anything else, and a
deletion removes the file. Checked again after the write: a deletion that finished in between (its
record removed last) leaves the file fenced or gone, and the owner removes the record it wrote.
Directories that do not lose records (SQLite, the head's) have no ``restore_lease``: nothing to restore.

A stale record counts as lost (decided: the file's epoch is the truth). A Redis restored from an old
snapshot (an old dump or AOF, a replica promoted behind) holds an older epoch, or another node's lease,
for a workspace a live owner serves here. Epochs only grow, and every lease that opened the file raised
its stored epoch, so a record whose epoch is below the owner's (or equal under another owner id: a lease
handed out again while a directory that lost its records counted up to the file's epoch, never used) is
left from the past, never a takeover: the owner writes its own over it, as over no record, while its
file carries its epoch. Before, such a record read as a takeover: every live owner left at its next
renewal and dropped its locks, and placement sent the next clients to the node the old record named. A
record of a higher epoch is a takeover or a deletion while its lease is live (it fences the file next):
the owner leaves, as before. One whose lease is over never fenced the file (the owner checks its epoch):
a snapshot from before the workspace was deleted and made anew (the new file counts from epoch 1), and
it is written over too (``WorkspaceRecord.stale_for``; ``tests/reliability/test_cluster_faults6.py``).
Before, such a snapshot read as a takeover. Left: a snapshot restored while its lease is still live.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..storage import FileSystem
from .directory import Directory

__all__ = ["restore_lost_lease"]

log = logging.getLogger(__name__)


def _still_ours(path: Path, epoch: int) -> bool:
    """Whether the file at ``path`` exists and its highest epoch is still ``epoch`` (nobody fenced it)."""
    return path.exists() and FileSystem.stored_epoch(str(path)) == epoch


def restore_lost_lease(
    directory: Directory,
    name: str,
    path: Path,
    *,
    node: str,
    host: str | None,
    owner_id: str,
    epoch: int,
    ttl: float,
    last_active: float | None,
) -> bool:
    """Write ``owner_id``'s lease of ``name`` back when the directory has no record of it and the file
    still carries ``epoch``; whether the owner keeps serving (False: a takeover, or nothing to restore)."""
    restore = getattr(directory, "restore_lease", None)
    if restore is None or not _still_ours(path, epoch):
        return False
    found = directory.get(name)
    if found is not None and not found.stale_for(owner_id, epoch):
        return False  # a newer epoch's record: a takeover or a deletion
    if not restore(name, node, owner_id, epoch, ttl, host=host, last_active=last_active):
        return False
    if not _still_ours(path, epoch):  # fenced or removed meanwhile: the record must not name it
        directory.remove(name, owner_id)
        return False
    if found is None:
        log.warning("workspace %s: its directory record was lost (epoch %d): written back", name, epoch)
    else:
        log.warning(
            "workspace %s: the directory held an older record (epoch %d, %s) than its file (epoch %d): "
            "its own written back",
            name,
            found.epoch,
            found.node,
            epoch,
        )
    return True
